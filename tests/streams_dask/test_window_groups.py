"""Keyed event-time windows by key group: the in-process output, spread over the workers.

A keyed ``timed_window(..., time=, key=)`` or ``session_window(..., key=)``
on Dask runs each batch as one task per worker thread over some key groups,
each told the stream's watermark (see :mod:`streams_dask.window_groups`);
the elements, their order, the ``late`` side and the errors are those of the
in-process node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from distributed import Client, get_task_stream
from hypothesis import given, settings
from hypothesis import strategies as st

import streams_dask  # noqa: F401
from streams import Checkpointer, NodeError, Stream
from streams_dask.key_groups import SHARED, GroupStates
from streams_dask.segment import plan_stages

pytestmark = pytest.mark.dask

KINDS = ("sliding", "tumbling", "session")


def event_time(x: tuple[str, int]) -> int:
    if x[1] < 0:
        raise ZeroDivisionError(f"no time: {x!r}")
    return x[1]


def windows(s: Stream[Any], kind: str, lateness: int) -> Stream[Any]:
    if kind == "sliding":
        return s.timed_window(4, slide=2, time=event_time, lateness=lateness, key=0)
    if kind == "tumbling":
        return s.timed_window(3, time=event_time, lateness=lateness, key=0)
    return s.session_window(2, time=event_time, lateness=lateness, key=0)


def summary(kw: tuple[str, list[tuple[str, int]]]) -> str:
    """A window as text; a window of exactly three elements fails (errors in closings)."""
    k, elements = kw
    if len(elements) == 3:
        raise ValueError(f"three in {k}")
    return f"{k}:{','.join(str(t) for _, t in elements)}"


def run(xs: list[tuple[str, int]], kind: str, lateness: int, late_side: bool,
        scatter: Any = None) -> dict[str, list[Any]]:
    """Outputs, late elements and errors of the windows (``scatter``: on Dask)."""
    source: Stream[Any] = Stream()
    head = scatter(source) if scatter else source
    window = windows(head, kind, lateness).on_error("route")
    texts = window.map(summary).on_error("route")
    out = (texts.gather() if scatter else texts).sink_to_list()
    errors: list[Any] = []
    for node in (window, texts):  # a time that fails, a late element; a failing summary
        node.errors.sink(lambda e: errors.append((type(e.exception).__name__, e.element)))
    late = window.late.sink_to_list() if late_side else []
    for x in xs:
        source.emit(x)
    source.close()
    return {"out": out, "late": late, "errors": errors}


def test_a_late_element_raises_under_the_default_policy(client: Client) -> None:
    # Without anything on ``late``, a late element is an error of the window.
    source: Stream[Any] = Stream()
    window = windows(source.scatter(client=client, batch_size=2), "sliding", 0)
    out = window.gather().sink_to_list()
    source.emit(("a", 9))
    source.emit(("b", 1))
    with pytest.raises(NodeError, match="already closed") as raised:
        source.close()
    assert raised.value.element == ("b", 1)
    assert out == [("a", [("a", 9)])] * 2


events = st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(-1, 30)), max_size=50)


@settings(max_examples=10, deadline=None)
@given(xs=events, kind=st.sampled_from(KINDS), lateness=st.integers(0, 3),
       late_side=st.booleans(), batch_size=st.integers(1, 9))
def test_keyed_windows_by_key_group_give_the_in_process_output(
        client: Client, xs: list[tuple[str, int]], kind: str, lateness: int,
        late_side: bool, batch_size: int) -> None:
    # Times jump about, so elements are late; -1 has no time (the window
    # node raises); three-element windows fail in the map after the window.
    expected = run(xs, kind, lateness, late_side)
    got = run(xs, kind, lateness, late_side,
              lambda s: s.scatter(client=client, batch_size=batch_size))
    assert got == expected


@settings(max_examples=4, deadline=None)
@given(kind=st.sampled_from(KINDS), n=st.integers(100, 300))
def test_windows_closed_by_one_element_come_in_order_across_groups(
        client: Client, kind: str, n: int) -> None:
    # Many keys open windows at the same times, so one element closes windows
    # of many groups at once: the merge orders them by end, then opening.
    xs = [(f"k{(i * 7919) % 41}", i // 10) for i in range(n)]
    expected = run(xs, kind, 0, True)
    got = run(xs, kind, 0, True, lambda s: s.scatter(client=client, batch_size=17))
    assert got == expected
    assert len(got["out"]) > 20


@pytest.mark.parametrize("kind", KINDS)
def test_keyed_event_windows_run_by_key_group_and_unkeyed_ones_in_one_task(
        client: Client, kind: str) -> None:
    node = windows(Stream().scatter(client=client), kind, 0).map(summary)
    node.gather()
    assert plan_stages(node._segment).keyed
    one = Stream().scatter(client=client).timed_window(4, slide=2, time=event_time)
    one.gather()
    assert not plan_stages(one._segment).keyed
    xs = [(k, t) for t in range(40) for k in "abcd"]
    with get_task_stream(client) as tasks:
        got = run(xs, kind, 0, True, lambda s: s.scatter(client=client, batch_size=40))
    assert got == run(xs, kind, 0, True)
    names = [t["key"][0] if isinstance(t["key"], tuple) else t["key"] for t in tasks.data]
    group_tasks = [n for n in names if n.startswith("run_link")]
    # Two single-threaded workers: two group tasks per batch (and per close),
    # and no merge task: the client merges what the group tasks return.
    assert len(group_tasks) % 2 == 0 and len(group_tasks) >= 8
    assert not [n for n in names if n.startswith("merge_links")]


class Crash(Exception):
    """The first run dies here, after some outputs."""


def _pipeline(client: Client, items: list[tuple[str, int]], kind: str, out: Path,
              ckpt: Path, crash_after: int | None = None) -> tuple[Stream[Any], Checkpointer]:
    source = Stream.from_iterable(items)
    window = windows(source.scatter(client=client, batch_size=4), kind, 2)
    texts = window.map(summary).on_error("skip").gather()
    texts.sink_to_durable_textfile(out, fsync=False)
    window.late.map(str).sink_to_durable_textfile(out.with_suffix(".late"), fsync=False)
    left = [crash_after]

    def tap(_: Any) -> None:
        if left[0] is not None:
            left[0] -= 1
            if left[0] == 0:
                raise Crash

    texts.sink(tap)
    return source, Checkpointer(source, ckpt, every=5, fsync=False)


@pytest.mark.parametrize("kind", KINDS)
def test_a_window_checkpoint_restores_on_a_different_number_of_workers(
        client: Client, one_worker: Client, tmp_path: Path, segment_state: Any,
        kind: str) -> None:
    items = [(k, 5 + t + d) for t in range(0, 60, 3)
             for k, d in zip("abcde", (0, 2, -3, 1, -5), strict=True)]
    clean, _ = _pipeline(client, items, kind, tmp_path / "clean.txt", tmp_path / "clean-ckpt")
    clean.start()
    # Dies after 30 outputs on two workers, with windows open; restarts on one.
    first, cp = _pipeline(client, items, kind, tmp_path / "out.txt", tmp_path / "ckpt", 30)
    with pytest.raises(NodeError):
        first.start()
    cp.wait()
    window_state = segment_state(tmp_path / "ckpt")
    assert isinstance(window_state, GroupStates)
    largest, seen = window_state[SHARED]  # the stream's largest time and count go with it
    assert 0 < seen < len(items) and largest < max(t for _, t in items)
    second, cp = _pipeline(one_worker, items, kind, tmp_path / "out.txt", tmp_path / "ckpt")
    assert cp.restored
    second.start()
    assert (tmp_path / "out.txt").read_text() == (tmp_path / "clean.txt").read_text()
    late = (tmp_path / "out.late").read_text()
    assert late == (tmp_path / "clean.late").read_text() and late
