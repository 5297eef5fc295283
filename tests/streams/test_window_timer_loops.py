"""Where a processing-time window's timer runs: on the loop that runs the stream's elements.

These run a real loop (the virtual clock has no loops): each waits for a
window with an event, under a generous timeout that only guards against a
hang; nothing is asserted about how long anything took.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from streams import Stream


def windows_of(build: Any) -> tuple[Stream[Any], list[Any], list[str], asyncio.Event | None]:
    source = Stream(asynchronous=True)
    out: list[Any] = []
    threads: list[str] = []
    box: dict[str, asyncio.Event] = {}

    def got(window: Any) -> None:
        if window:
            out.append(window)
            threads.append(threading.current_thread().name)
            box["event"].set()

    build(source).sink(got)
    return source, out, threads, box  # type: ignore[return-value]


@pytest.mark.parametrize("build", [lambda s: s.timed_window(0.01),
                                   lambda s: s.timed_window(0.02, slide=0.01)],
                         ids=["tumbling", "sliding"])
def test_an_asynchronous_stream_built_with_no_loop_gets_its_windows_on_its_loop(
        build: Any) -> None:
    source, out, threads, box = windows_of(build)  # built at import, as a service does

    async def main() -> None:
        box["event"] = asyncio.Event()  # type: ignore[index]
        await source.emit(1)
        await asyncio.wait_for(box["event"].wait(), timeout=30)  # type: ignore[index]

    asyncio.run(main())
    assert out[0] == [1]
    assert set(threads) == {threading.current_thread().name}  # not the shared loop thread


def test_a_window_built_under_one_loop_ticks_under_the_next() -> None:
    box: dict[str, Any] = {}

    async def build() -> None:
        box["parts"] = windows_of(lambda s: s.timed_window(0.01))

    async def feed() -> None:
        source, _, _, events = box["parts"]
        events["event"] = asyncio.Event()
        await source.emit(1)
        await asyncio.wait_for(events["event"].wait(), timeout=30)

    asyncio.run(build())  # its timer goes with this loop
    asyncio.run(feed())
    assert box["parts"][1] == [[1]]
