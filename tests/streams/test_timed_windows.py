"""timed_window (processing and event time), timed_window_unique, partition(timeout=).

Time is a VirtualClock: no sleeps, no wall-clock asserts.
"""

from __future__ import annotations

import asyncio
import math
from datetime import UTC
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams import Stream, VirtualClock, use_clock
from streams.errors import NodeError
from streams.operators.timed import LateElementError
from streams.window_clock import EPSILON

# -- processing time -------------------------------------------------------


def test_one_list_per_interval_empty_windows_included(clock: VirtualClock) -> None:
    source = Stream()
    L = source.timed_window(1.0).sink_to_list()
    source.emit(1)
    source.emit(2)
    clock.advance(1.0)
    assert L == [[1, 2]]
    clock.advance(2.0)
    assert L == [[1, 2], [], []]
    source.emit(3)
    clock.advance(0.5)
    assert L == [[1, 2], [], []]
    clock.advance(0.5)
    assert L == [[1, 2], [], [], [3]]


def test_windows_follow_a_fixed_grid(clock: VirtualClock) -> None:
    source = Stream()
    L = source.timed_window(0.1).sink_to_list()
    for _ in range(10):
        clock.advance(0.1)
    assert len(L) == 10  # no drift from summing 0.1 ten times


def test_arrival_checks_the_deadline_without_any_timer() -> None:
    # A clock that cannot schedule (like the loop clock with no loop): only
    # element arrivals and close() can emit windows.
    class Manual(VirtualClock):
        def call_later(self, delay, callback, *args):  # type: ignore[no-untyped-def]
            raise RuntimeError("no loop")

    clock = Manual()
    with use_clock(clock):
        source = Stream()
        L = source.timed_window(1.0).sink_to_list()
    source.emit("a")
    clock._now = 1.0  # a producer that never yields: time moves, no timer runs
    source.emit("b")
    assert L == [["a"]]
    clock._now = 3.5
    source.emit("c")
    assert L == [["a"], ["b"], []]  # the interval [2, 3) was empty
    source.close()
    assert L == [["a"], ["b"], [], ["c"]]


def test_close_flushes_the_open_window_and_stops_the_timer(clock: VirtualClock) -> None:
    source = Stream()
    L = source.timed_window(1.0).sink_to_list()
    source.emit(1)
    source.close()
    assert L == [[1]]
    assert clock.pending == 0
    clock.advance(5)
    assert L == [[1]]


def test_window_emitted_from_timer_reaches_a_coroutine_sink(clock: VirtualClock) -> None:
    out: list[list[int]] = []

    async def slow(w: list[int]) -> None:
        await clock.sleep(0.5)
        out.append(w)

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.timed_window(1.0).sink(slow)
        await source.emit(1)
        await clock.advance_async(1.0)  # window [1] emitted; sink busy until 1.5
        waiting = asyncio.ensure_future(source.emit(2))
        await asyncio.sleep(0)
        assert not waiting.done()  # backpressure: the producer waits for the sink
        await clock.advance_async(0.5)
        await waiting
        await clock.advance_async(0.5)  # window [2] emitted; sink busy until 2.5
        closing = asyncio.ensure_future(source.aclose())
        await asyncio.sleep(0)
        assert not closing.done()  # close waits for the work in flight
        await clock.advance_async(0.5)
        await closing

    asyncio.run(main())
    assert out == [[1], [2]]


@pytest.mark.parametrize("slide", [None, 1.0], ids=["tumbling", "sliding"])
def test_a_sink_slower_than_the_interval_does_not_queue_empty_windows(
        clock: VirtualClock, slide: float | None) -> None:
    # The sink takes 5 s a window, the interval is 1 s. While it is busy with
    # [1], the windows that come due are empty: skipped, not queued behind it,
    # so a producer waits for the window in flight only (under streamz, as
    # before this was fixed, it waited for four empty windows more: 25 s).
    out: list[tuple[float, list[int]]] = []

    async def slow(w: list[int]) -> None:
        await clock.sleep(5.0)
        out.append((clock.now(), w))

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.timed_window(1.0, slide=slide).sink(slow)
        await source.emit(1)
        await clock.advance_async(4.5)  # [1] emitted at 1; the sink is busy until 6
        waiting = asyncio.ensure_future(source.emit(2))
        await clock.advance_async(1.4)
        assert not waiting.done()  # backpressure: the sink still holds [1]
        await clock.advance_async(0.1)
        assert waiting.done()  # at 6, not behind empty windows
        await clock.advance_async(6.0)  # [2], of the window [5, 6), is taken at 11
        closing = asyncio.ensure_future(source.aclose())
        await clock.advance_async(5.0)
        await closing

    asyncio.run(main())
    assert [w for _, w in out[:2]] == [[1], [2]]
    assert [t for t, _ in out[:2]] == pytest.approx([6.0, 11.0])  # timers fire EPSILON early


def test_a_window_emitted_on_arrival_is_in_flight_for_the_timer(clock: VirtualClock) -> None:
    # [1, 2] is emitted when 3 arrives (the producer did not yield past the
    # deadline); its slow sink is in flight, so the timer's [3] waits behind
    # it instead of entering the sink at once (and finishing first), and the
    # windows that come due empty meanwhile are skipped.
    log: list[tuple[str, list[int], int]] = []
    active = [0]

    async def slow(w: list[int]) -> None:
        active[0] += 1
        log.append(("enter", w, active[0]))
        await clock.sleep(3.0 if len(w) > 1 else 0.5)
        active[0] -= 1
        log.append(("done", w, active[0]))

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.timed_window(1.0).sink(slow)
        await source.emit(1)
        await source.emit(2)
        clock._now = 1.0  # the producer did not yield for a second
        emitting = asyncio.ensure_future(source.emit(3))  # closes [1, 2]
        await clock.advance_async(3.2)
        await emitting
        closing = asyncio.ensure_future(source.aclose())
        await clock.advance_async(1.0)
        await closing

    asyncio.run(main())
    assert log == [("enter", [1, 2], 1), ("done", [1, 2], 0), ("enter", [3], 1), ("done", [3], 0)]


def test_a_failure_downstream_of_the_timer_is_raised_at_close(clock: VirtualClock) -> None:
    async def bad(w: list[int]) -> None:
        await asyncio.sleep(0)
        raise ZeroDivisionError(f"boom on {w!r}")

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.timed_window(1.0).sink(bad)
        await source.emit(1)
        await clock.advance_async(1.0)  # [1] sent by the timer: nobody awaits it
        with pytest.raises(ZeroDivisionError, match=r"boom on \[1\]"):
            await source.aclose()

    asyncio.run(main())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.floats(0, 0.35)), max_size=60))
@example([(0, 0.0999999995), (1, 0.0)])  # stops within EPSILON of an interval's end
def test_every_element_once_in_order(steps: list[tuple[int, float]]) -> None:
    with use_clock(VirtualClock()) as clock:
        source = Stream()
        windows = source.timed_window(0.1).sink_to_list()
    for x, dt in steps:
        source.emit(x)
        clock.advance(dt)
    source.close()
    assert [x for w in windows for x in w] == [x for x, _ in steps]
    # One window per elapsed interval (plus the one flushed at close); an
    # interval ends within the clock's tolerance, EPSILON seconds early.
    ended = math.floor((clock.now() + EPSILON) / 0.1)
    assert len(windows) in (ended, ended + 1)


def test_timed_window_unique(clock: VirtualClock) -> None:
    source = Stream()
    first = source.timed_window_unique(1.0).sink_to_list()
    last = source.timed_window_unique(1.0, keep="last").sink_to_list()
    for x in [1, 2, 3, 3, 2, 1]:
        source.emit(x)
    clock.advance(1.0)
    clock.advance(1.0)
    assert first == [(1, 2, 3), ()]
    assert last == [(3, 2, 1), ()]


@pytest.mark.parametrize("given", [{"time": 1}, {"slide": 0.5}, {"bounds": True},
                                   {"lateness": 1, "time": 1}])
def test_timed_window_unique_refuses_event_time_and_sliding_arguments(
        given: dict[str, Any]) -> None:
    # Taken by the timed_window underneath, they were ignored, or (time=)
    # gave lists with the keys repeated.
    with pytest.raises(TypeError, match=r"timed_window_unique\(\): .*not supported.*timed_window"):
        Stream().timed_window_unique(1.0, key=len, **given)


def test_timed_window_unique_by_key_flushes_at_close(clock: VirtualClock) -> None:
    source = Stream()
    L = source.timed_window_unique(1.0, key="k").sink_to_list()
    source.emit({"k": 1, "v": "a"})
    source.emit({"k": 1, "v": "b"})
    source.close()
    assert L == [({"k": 1, "v": "a"},)]


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "soon"])
def test_bad_interval_fails_at_build_time(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="timed_window"):
        Stream().timed_window(bad)  # type: ignore[arg-type]


def test_interval_strings() -> None:
    assert Stream().timed_window("250ms").interval == 0.25  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="lateness= needs time="):
        Stream().timed_window(1, lateness=2)


# -- event time -------------------------------------------------------------


def test_event_time_windows_close_on_the_watermark() -> None:
    source = Stream()
    L = source.timed_window(10, time=lambda e: e["t"]).sink_to_list()
    for t in [0, 3, 9.99, 10, 25]:
        source.emit({"t": t})
    assert [[e["t"] for e in w] for w in L] == [[0, 3, 9.99], [10]]
    source.close()
    assert [[e["t"] for e in w] for w in L] == [[0, 3, 9.99], [10], [25]]


def test_event_time_late_element_is_routed_not_dropped() -> None:
    source = Stream()
    windows = source.timed_window(10, time=0, lateness=2).on_error("route")
    L = windows.sink_to_list()
    errors = windows.errors.sink_to_list()
    for e in [(1, "a"), (11, "b"), (8, "c"), (13, "d"), (9, "late")]:
        source.emit(e)
    assert L == [[(1, "a"), (8, "c")]]
    assert [r.element for r in errors] == [(9, "late")]
    assert isinstance(errors[0].exception, LateElementError)
    assert "already closed" in str(errors[0].exception)


def test_event_time_late_element_raises_by_default() -> None:
    source = Stream()
    source.timed_window(1, time=lambda x: x).sink_to_list()
    source.emit(5)
    with pytest.raises(NodeError, match="already closed"):
        source.emit(0)


def _reference(interval: float, lateness: float, times: list[float]) -> tuple[list, list]:
    """A direct restatement of the event-time semantics."""
    emitted: set[int] = set()
    open_: dict[int, list[float]] = {}
    out, late = [], []
    high = -math.inf
    for t in times:
        k = math.floor(t / interval)
        if k in emitted or (k + 1) * interval <= high - lateness:
            late.append(t)
            continue
        open_.setdefault(k, []).append(t)
        high = max(high, t)
        for j in sorted(open_):
            if (j + 1) * interval <= high - lateness:
                out.append(open_.pop(j))
                emitted.add(j)
    out.extend(open_[j] for j in sorted(open_))
    return out, late


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 100), max_size=50), st.sampled_from([1, 5, 10]),
       st.sampled_from([0, 3, 20]))
def test_event_time_matches_reference(times: list[int], interval: int, lateness: int) -> None:
    source = Stream()
    node = source.timed_window(interval, time=lambda t: t, lateness=lateness).on_error("route")
    out = node.sink_to_list()
    late = node.errors.map(lambda r: r.element).sink_to_list()
    for t in times:
        source.emit(t)
    source.close()
    assert (out, late) == _reference(interval, lateness, times)
    assert sorted([*(x for w in out for x in w), *late]) == sorted(times)  # nothing lost


# -- partition(timeout=) ------------------------------------------------------


def test_partition_timeout_emits_partial_groups(clock: VirtualClock) -> None:
    source = Stream()
    L = source.partition(3, timeout=1.0).sink_to_list()
    source.emit(1)
    clock.advance(0.5)
    source.emit(2)
    clock.advance(0.5)
    assert L == [(1, 2)]
    for x in [3, 4, 5]:
        source.emit(x)
    assert L == [(1, 2), (3, 4, 5)]
    clock.advance(5)
    assert L == [(1, 2), (3, 4, 5)]


def test_partition_timeout_per_key_in_start_order(clock: VirtualClock) -> None:
    source = Stream()
    L = source.partition(2, timeout=1.0, key=lambda x: x % 2).sink_to_list()
    source.emit(1)
    clock.advance(0.25)
    source.emit(2)
    clock.advance(0.75)
    assert L == [(1,)]
    clock.advance(0.25)
    assert L == [(1,), (2,)]


def test_partition_timeout_checked_on_arrival_without_timer() -> None:
    class Manual(VirtualClock):
        def call_later(self, delay, callback, *args):  # type: ignore[no-untyped-def]
            raise RuntimeError("no loop")

    clock = Manual()
    with use_clock(clock):
        source = Stream()
        L = source.partition(3, timeout=1.0).sink_to_list()
    source.emit(1)
    clock._now = 2.0
    source.emit(2)
    assert L == [(1,)]
    source.close()
    assert L == [(1,), (2,)]


def test_window_after_a_coroutine_step_without_a_loop() -> None:
    """The private loop of a synchronous emit holds no timer that could never fire."""

    async def inc(x: int) -> int:
        return x + 1

    source = Stream()
    node = source.map(inc).timed_window(60)
    L = node.sink_to_list()
    source.emit(1)
    # Not on the private loop (it stops when emit returns): on the loop thread.
    from streams.clock import _ThreadTimer

    assert isinstance(node._timer, _ThreadTimer)  # type: ignore[attr-defined]
    source.close()
    assert L == [[2]]


def test_event_time_accepts_datetimes() -> None:
    from datetime import datetime, timedelta

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    source = Stream()
    L = source.timed_window(60, time="at").sink_to_list()
    for minutes in [0, 0.5, 1.5, 3]:
        source.emit({"at": t0 + timedelta(minutes=minutes)})
    source.close()
    assert [len(w) for w in L] == [2, 1, 1]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.floats(0, 0.7)), max_size=40),
       st.integers(1, 4))
def test_partition_timeout_delivers_every_element_once_in_order_per_key(
        steps: list[tuple[int, float]], n: int) -> None:
    with use_clock(VirtualClock()) as clock:
        source = Stream()
        groups = source.partition(n, timeout=0.5, key=lambda x: x % 3).sink_to_list()
    for x, dt in steps:
        source.emit(x)
        clock.advance(dt)
    source.close()
    assert all(1 <= len(g) <= n for g in groups)
    for key in range(3):
        assert [x for g in groups for x in g if x % 3 == key] == \
            [x for x, _ in steps if x % 3 == key]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(), st.floats(0, 2)), max_size=40))
def test_delay_delivers_every_element_once_in_order_and_on_time(
        steps: list[tuple[int, float]]) -> None:
    with use_clock(VirtualClock()) as clock:
        source = Stream()
        out = source.delay(1.0).map(lambda x: (x, clock.now())).sink_to_list()
    sent = []
    for x, dt in steps:
        sent.append((x, clock.now()))
        source.emit(x)
        clock.advance(dt)
    released = len(out)
    source.close()
    assert [x for x, _ in out] == [x for x, _ in sent]
    for (_, t_out), (_, t_in) in zip(out[:released], sent, strict=False):
        assert t_out == pytest.approx(t_in + 1.0)


def test_a_lateness_of_none_written_as_text_needs_no_time() -> None:
    # "0s" is no lateness, as 0 is: only a real lateness needs time=.
    assert Stream().timed_window(1.0, lateness="0s").lateness == 0
    with pytest.raises(ValueError, match=r"lateness= needs time="):
        Stream().timed_window(1.0, lateness="1s")
