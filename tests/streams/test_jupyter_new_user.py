"""What a notebook user sees: a sink's view, start() on the loop, a bar of unknown total."""

from __future__ import annotations

import asyncio
import io
import re

import pytest

from streams import Stream, VirtualClock
from streams.jupyter import live_view


def test_the_view_of_a_sink_counts_what_it_received() -> None:
    source = Stream()
    seen: list[str] = []
    sink = source.map(str).sink(seen.append)
    view = live_view(sink, widget=False)
    for i in range(1700):
        source.emit(i)
    assert (view.count, view.latest) == (1700, "1699")
    assert view.text().startswith("sink(append): 1700 elements, live")
    assert live_view(sink) is view  # displayed twice: one view
    source.close()
    assert view.status == "ended"


def test_start_on_a_loop_displays_nothing_in_a_notebook() -> None:
    pytest.importorskip("IPython")
    from IPython.core.formatters import DisplayFormatter

    source = Stream.from_iterable(range(3))
    out = source.sink_to_list()

    async def main() -> tuple[dict[str, str], asyncio.Task[None]]:
        task = source.start()
        data, _ = DisplayFormatter().format(task)  # what a cell ending in start() shows
        await task
        return data, task

    data, task = asyncio.run(main())
    assert data == {}
    assert isinstance(task, asyncio.Task) and out == [0, 1, 2]


def test_a_bar_of_unknown_total_shows_elements_per_second(clock: VirtualClock) -> None:
    pytest.importorskip("tqdm")
    source = Stream()
    counted = source.progress(desc="clicks", file=io.StringIO(), smoothing=0, mininterval=0)
    for _ in range(10):
        clock.advance(0.5)
        source.emit("click")
    text = str(counted.bar)
    assert re.fullmatch(r"clicks: 10 elements \[00:05, +2\.00 elements/s\]", text), text
    known = Stream().progress(total=20, file=io.StringIO())
    assert "elements/s" in str(known.bar) and "/20" in str(known.bar)
