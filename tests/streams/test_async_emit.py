"""Async emit and backpressure: coroutine steps, map_async, buffer, latest, zip.

Each test drives its own loop with ``asyncio.run`` (or Tornado's IOLoop,
which runs on asyncio). Concurrency is controlled with events and the
virtual clock, never with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import Stream, VirtualClock
from streams.errors import NodeError


class Gate:
    """A coroutine sink that holds each element until the test releases it."""

    def __init__(self) -> None:
        self.entered: list[Any] = []
        self.done: list[Any] = []
        self.open = asyncio.Event()

    async def __call__(self, x: Any) -> None:
        self.entered.append(x)
        await self.open.wait()
        self.done.append(x)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_await_emit_waits_for_a_coroutine_sink() -> None:
    async def main() -> None:
        gate = Gate()
        source = Stream(asynchronous=True)
        source.map(lambda x: x + 1).sink(gate)
        emitting = asyncio.ensure_future(source.emit(1))
        await settle()
        assert gate.entered == [2] and not emitting.done()
        gate.open.set()
        await emitting
        assert gate.done == [2]

    asyncio.run(main())


def test_coroutine_map_is_awaited_not_dropped() -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    async def main() -> list[int]:
        source = Stream(asynchronous=True)
        L = source.map(double).map(lambda x: x + 1).sink_to_list()
        for i in range(5):
            await source.emit(i)
        return L

    assert asyncio.run(main()) == [1, 3, 5, 7, 9]


def test_sync_emit_without_loop_runs_coroutine_steps_to_completion() -> None:
    out: list[int] = []

    async def sink(x: int) -> None:
        await asyncio.sleep(0)
        out.append(x)

    source = Stream()
    source.sink(sink)
    source.emit(1)
    assert out == [1]


async def _slow_append(out: list[Any], w: Any) -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    out.append(w)


def _check(w: Any) -> Any:
    if 2 in w[1]:
        raise ValueError("no 2")
    return w


@pytest.mark.parametrize("nested", [False, True])
def test_a_flush_that_fails_on_one_window_still_runs_the_coroutine_of_another(
        nested: bool) -> None:
    # close() sends every key's window; the first went to a coroutine sink,
    # the second failed synchronously: the first's coroutine was dropped,
    # never run, and its window lost. Nested: the failing flush is itself
    # part of a close's work on the private loop.
    out: list[Any] = []
    source = Stream()
    windows = source.timed_window(10, time=lambda x: x, key=lambda x: x % 2)
    if nested:
        windows.sink(lambda w: _slow_append([], w))
        windows = windows.map(lambda w: w[1][0]).timed_window(
            10, time=lambda x: x, key=lambda x: x % 2)
    windows.map(_check).sink(lambda w: _slow_append(out, w))
    source.emit(1)
    source.emit(2)
    with pytest.raises(NodeError, match="no 2"):
        source.close()
    assert out == [(1, [1])]


def test_awaited_close_raises_a_failed_window_after_the_others_went() -> None:
    out: list[Any] = []

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.timed_window(10, time=lambda x: x, key=lambda x: x % 4).map(_check).sink(
            lambda w: _slow_append(out, w))
        for x in (1, 2, 3):
            await source.emit(x)
        with pytest.raises(NodeError, match="no 2"):
            await source.close()
        assert out == [(1, [1]), (3, [3])]  # done before close() returned

    asyncio.run(main())


def test_on_a_running_loop_a_failed_window_is_logged_and_the_others_go(
        caplog: pytest.LogCaptureFixture) -> None:
    # The synchronous API on a running loop (a notebook): close() cannot
    # wait, its work is scheduled and a failure in it logged.
    out: list[Any] = []

    async def main() -> None:
        source = Stream()
        source.timed_window(10, time=lambda x: x, key=lambda x: x % 2).map(_check).sink(
            lambda w: _slow_append(out, w))
        source.emit(1)
        source.emit(2)
        closing = source.close()
        assert isinstance(closing, asyncio.Future)
        await asyncio.wait((closing,))

    with caplog.at_level(logging.ERROR, logger="streams"):
        asyncio.run(main())
    assert out == [(1, [1])]
    assert "no 2" in caplog.text


def test_a_flush_that_fails_after_a_coroutine_still_ends_the_stream_below() -> None:
    # The failure came once the coroutine sink's work was done: the window's
    # other branch (a partition holding its windows) was never closed.
    out: list[Any] = []
    source = Stream()
    windows = source.timed_window(10, time=lambda x: x, key=lambda x: x % 2)
    windows.map(_check).sink(lambda w: _slow_append(out, w))
    held = windows.partition(5).sink_to_list()
    source.emit(1)
    source.emit(2)
    with pytest.raises(NodeError, match="no 2"):
        source.close()
    # The failing window stopped at its failing branch (a fan-out's order).
    assert out == [(1, [1])] and held == [((1, [1]),)]


def test_an_awaited_union_closes_after_its_first_input_failed_to_flush() -> None:
    out: list[Any] = []
    held: list[Any] = []

    async def main() -> None:
        s1, s2 = Stream(asynchronous=True), Stream(asynchronous=True)
        windows = s1.timed_window(10, time=lambda x: x, key=lambda x: x % 2)
        windows.map(_check).sink(lambda w: _slow_append(out, w))
        windows.union(s2).partition(9).sink(held.append)
        await s1.emit(1)
        await s1.emit(2)
        await s2.emit("s2")
        with pytest.raises(NodeError, match="no 2"):
            await s1.close()
        await s2.close()

    asyncio.run(main())
    assert out == [(1, [1])]
    assert held == [("s2", (1, [1]))]


def test_expired_keys_failing_at_close_leave_no_coroutine_unrun() -> None:
    # Key a's first output went to a coroutine sink, its second and key b's
    # failed: a's coroutine was dropped with the failure.
    out: list[Any] = []
    source = Stream()
    node = source.stateful_map(
        lambda n, x: (n + 1, []), start=0, key=0, ttl=100, time=1,
        on_expire=lambda k, n: [(k, 1), (k, 2)] if k == "a" else [(k, 2)])
    node.map(lambda kv: kv if kv[1] != 2 else _check((kv[0], [2]))).sink(
        lambda w: _slow_append(out, w))
    source.emit(("a", 0))
    source.emit(("b", 1))
    with pytest.raises(NodeError, match="no 2"):
        source.close()
    assert out == [("a", 1)]


def test_a_union_closes_when_its_other_input_closes_during_the_first_ones_close() -> None:
    # The first input's close left a coroutine sink's work on the loop (the
    # synchronous API on a running loop); the union took that input for one
    # still flushing, waited for it, and never closed: its window was lost.
    joined: list[Any] = []

    async def main() -> None:
        s1, s2 = Stream(), Stream()
        s1.timed_window(10, time=lambda x: x).sink(lambda w: _slow_append([], w))
        s1.union(s2).timed_window(10, time=lambda x: x).sink(joined.append)
        s1.emit(1)
        s2.emit(3)
        closing = s1.close()
        s2.close()
        await asyncio.wait((closing,))
        await settle()

    asyncio.run(main())
    assert joined == [[1, 3]]


def _boom(x: Any) -> Any:
    raise ValueError("boom")


@pytest.mark.parametrize("how", ["fused", "unfused", "metadata", "from_iterable"])
def test_a_failing_branch_does_not_drop_an_earlier_branchs_coroutine(how: str) -> None:
    # The first branch's coroutine sink had not run when the second raised:
    # the element never reached it.
    from streams import RefCounter
    from streams.fusion import unfused

    out: list[Any] = []
    with unfused() if how == "unfused" else contextlib.nullcontext():
        source = Stream.from_iterable([1]) if how == "from_iterable" else Stream()
        source.sink(lambda x: _slow_append(out, x))
        source.sink(_boom)
        with pytest.raises(NodeError, match="boom"):
            if how == "from_iterable":
                source.start()
            elif how == "metadata":
                source.emit(1, metadata=[{"ref": RefCounter()}])
            else:
                source.emit(1)
    assert out == [1]


def test_a_flatten_whose_later_item_fails_still_runs_the_earlier_ones_coroutine() -> None:
    out: list[Any] = []
    source = Stream()
    source.flatten().map(lambda x: 1 / (x - 2)).sink(lambda x: _slow_append(out, x))
    with pytest.raises(NodeError, match="division"):
        source.emit([1, 2])
    assert out == [-1.0]


def test_a_slice_ending_in_a_failure_still_runs_its_last_elements_coroutine() -> None:
    # slice(end=1) closes itself after its element; closing failed below (a
    # partition flushing into a failing map): the element's coroutine sink
    # work was dropped with it.
    out: list[Any] = []
    source = Stream()
    sliced = source.slice(end=1)
    sliced.sink(lambda x: _slow_append(out, x))
    sliced.partition(5).map(_boom)
    with pytest.raises(NodeError, match="boom"):
        source.emit(1)
    assert out == [1]


def test_a_windows_late_stream_ends_when_closing_below_the_window_fails() -> None:
    source = Stream()
    windows = source.timed_window(10, time=lambda x: x)
    windows.partition(5).map(_boom)  # fails as the partition below the window closes
    late = windows.late.partition(5).sink_to_list()
    source.emit(20)
    source.emit(1)  # late: its window [0, 10) had closed
    with pytest.raises(NodeError, match="boom"):
        source.close()
    assert windows.late._closed and late == [(1,)]


@pytest.mark.parametrize("how", ["fused", "unfused", "two_coroutines", "asynchronous"])
def test_an_item_failing_beside_a_coroutine_branch_is_read_again_on_restart(
        how: str) -> None:
    # Its failure came with the coroutine's work: the item was counted as
    # gone through, and a restart skipped it for the branch that had failed.
    from streams.fusion import unfused

    out: list[Any] = []
    seen: list[Any] = []
    failing = [True]

    def once(x: Any) -> None:
        if x == 2 and failing:
            failing.clear()
            raise ValueError("boom")
        seen.append(x)

    def build() -> Stream[Any]:
        source = Stream.from_iterable([1, 2, 3], asynchronous=how == "asynchronous")
        # Two coroutines: the failing fan-out's work is gathered with a later branch's.
        branch = source.map(lambda x: x) if how == "two_coroutines" else source
        branch.sink(lambda x: _slow_append(out, x))
        branch.sink(once)
        if how == "two_coroutines":
            source.sink(lambda x: _slow_append([], x))
        return source

    if how == "asynchronous":
        async def main() -> Stream[Any]:
            source = build()
            with pytest.raises(NodeError, match="boom"):
                await source.start()
            assert source.offset == 1
            await source.start()
            return source

        asyncio.run(main())
    else:
        with unfused() if how == "unfused" else contextlib.nullcontext():
            source = build()
            with pytest.raises(NodeError, match="boom"):
                source.start()
            assert source.offset == 1
            source.start()
    assert seen == [1, 2, 3]
    assert out == [1, 2, 2, 3]  # at least once: the coroutine had run for 2


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited")
def test_a_loop_through_a_fan_out_with_a_coroutine_branch_is_still_explained() -> None:
    # The graph loops: the branches' coroutines are dropped with the error
    # (Python warns of each), which must still say where the element went.
    source = Stream()
    source.sink(lambda x: _slow_append([], x))
    source.map(lambda x: x + 1).filter(lambda x: x < 10 ** 9).connect(source)
    with pytest.raises(RecursionError, match="went round the loop"):
        source.emit(0)
    gc.collect()  # their warnings come here, in this test


def test_a_second_window_failing_at_close_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    source = Stream()
    source.timed_window(10, time=lambda x: x, key=lambda x: x % 2).map(_boom)
    source.emit(1)
    source.emit(2)
    with caplog.at_level(logging.ERROR, logger="streams"), \
            pytest.raises(NodeError, match="boom"):
        source.close()
    assert "another failure, after the one raised" in caplog.text


def test_coroutine_sink_failure_names_the_node() -> None:
    async def broken(x: int) -> None:
        raise ValueError("bad")

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(broken)
        await source.emit(1)

    with pytest.raises(NodeError, match="sink"):
        asyncio.run(main())


def test_tornado_ioloop_drives_the_same_pipeline() -> None:
    from tornado.ioloop import IOLoop

    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    async def main() -> list[int]:
        source = Stream(asynchronous=True)
        L = source.map(double).sink_to_list()
        for i in range(3):
            await source.emit(i)
        return L

    loop = IOLoop(make_current=False)
    try:
        assert loop.run_sync(main) == [0, 2, 4]
    finally:
        loop.close()


# -- a loop already running (Jupyter) ------------------------------------------


def test_sync_emit_inside_a_running_loop_keeps_order_and_close_waits() -> None:
    async def main() -> None:
        gate = Gate()
        source = Stream()  # the synchronous API, as typed in a notebook cell
        windows = source.partition(2)
        windows.sink(gate)
        futures = [source.emit(i) for i in range(5)]
        closing = source.close()  # must not flush the partial group before 4 arrives
        await settle()
        assert gate.entered == [(0, 1)]
        gate.open.set()
        await asyncio.gather(*[f for f in futures if f is not None], closing)
        assert gate.done == [(0, 1), (2, 3), (4,)]
        # the backlog drained: the synchronous path is back in place
        from streams.backlog import Backlog

        assert Backlog.of(source) is None

    asyncio.run(main())


def test_failure_in_scheduled_work_is_logged_and_later_elements_still_run(
        caplog: pytest.LogCaptureFixture) -> None:
    out: list[int] = []

    async def sink(x: int) -> None:
        await asyncio.sleep(0)
        if x == 1:
            raise ValueError("one")
        out.append(x)

    async def main() -> None:
        source = Stream()
        source.sink(sink)
        futures = [source.emit(i) for i in range(3)]
        await asyncio.wait(futures)

    with caplog.at_level(logging.ERROR, logger="streams"):
        asyncio.run(main())
    assert out == [0, 2]
    assert "work scheduled by a synchronous emit failed" in caplog.text


def test_timed_window_schedules_on_the_running_loop() -> None:
    async def main() -> list[list[int]]:
        clock = VirtualClock()
        from streams import use_clock

        with use_clock(clock):
            source = Stream()
            L = source.timed_window(1.0).sink_to_list()
        source.emit(1)
        await clock.advance_async(1.0)
        return L

    assert asyncio.run(main()) == [[1]]


# -- map_async -------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=30), st.integers(1, 4))
def test_map_async_keeps_input_order_and_bounds_concurrency(
        delays: list[int], parallelism: int) -> None:
    running = 0
    peak = 0

    async def work(x: tuple[int, int]) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        for _ in range(x[1]):  # finish in a scrambled order
            await asyncio.sleep(0)
        running -= 1
        return x[0]

    async def main() -> list[int]:
        source = Stream(asynchronous=True)
        L = source.map_async(work, parallelism=parallelism).sink_to_list()
        for i, d in enumerate(delays):
            await source.emit((i, d))
        await source.aclose()
        return L

    assert asyncio.run(main()) == list(range(len(delays)))
    assert peak <= parallelism


def test_map_async_waits_when_all_slots_are_taken() -> None:
    async def main() -> None:
        gate = asyncio.Event()

        async def work(x: int) -> int:
            await gate.wait()
            return x

        source = Stream(asynchronous=True)
        L = source.map_async(work, parallelism=2).sink_to_list()
        await source.emit(0)
        await source.emit(1)
        third = asyncio.ensure_future(source.emit(2))
        await settle()
        assert not third.done()
        gate.set()
        await third
        await source.aclose()
        assert L == [0, 1, 2]

    asyncio.run(main())


def test_map_async_failure_is_raised_at_close(caplog: pytest.LogCaptureFixture) -> None:
    async def work(x: int) -> int:
        if x == 1:
            raise ValueError("boom")
        return x

    async def main() -> list[int]:
        source = Stream(asynchronous=True)
        L = source.map_async(work, parallelism=2).sink_to_list()
        for i in range(3):
            await source.emit(i)
        with pytest.raises(NodeError, match="boom"):
            await source.aclose()
        return L

    assert asyncio.run(main()) == [0, 2]


def test_map_async_without_a_loop() -> None:
    async def inc(x: int) -> int:
        return x + 1

    source = Stream()
    L = source.map_async(inc, parallelism=4).sink_to_list()
    for i in range(3):
        source.emit(i)
    assert L == [1, 2, 3]
    with pytest.raises(ValueError, match="parallelism"):
        source.map_async(inc, parallelism=0)


# -- buffer, latest ---------------------------------------------------------------


def test_full_buffer_makes_await_emit_wait() -> None:
    async def main() -> None:
        gate = Gate()
        source = Stream(asynchronous=True)
        source.buffer(3).sink(gate)
        for i in range(4):  # one in the sink, three held
            await source.emit(i)
            await settle()
        blocked = asyncio.ensure_future(source.emit(4))
        await settle()
        assert gate.entered == [0] and not blocked.done()
        gate.open.set()
        await blocked
        await source.aclose()
        assert gate.done == [0, 1, 2, 3, 4]

    asyncio.run(main())


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(), max_size=40), st.integers(1, 5))
def test_buffer_delivers_every_element_once_in_order(xs: list[int], n: int) -> None:
    async def main() -> list[int]:
        out: list[int] = []

        async def sink(x: int) -> None:
            await asyncio.sleep(0)
            out.append(x)

        source = Stream(asynchronous=True)
        source.buffer(n).sink(sink)
        for x in xs:
            await source.emit(x)
        await source.aclose()
        return out

    assert asyncio.run(main()) == xs


def test_buffer_passes_through_without_a_loop() -> None:
    source = Stream()
    L = source.buffer(2).sink_to_list()
    for i in range(5):
        source.emit(i)
    assert L == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="buffer"):
        source.buffer(0)


def test_latest_skips_only_while_downstream_is_busy() -> None:
    async def main() -> None:
        gate = Gate()
        source = Stream(asynchronous=True)
        source.latest().sink(gate)
        for i in range(4):
            await source.emit(i)
        await settle()
        gate.open.set()
        await source.aclose()
        assert gate.done == [0, 3]

    asyncio.run(main())


def test_latest_passes_everything_through_a_synchronous_downstream() -> None:
    source = Stream()
    L = source.latest().sink_to_list()
    for i in range(3):
        source.emit(i)
    assert L == [0, 1, 2]


# -- zip(maxsize=) ---------------------------------------------------------------


def test_zip_maxsize_backpressure() -> None:
    async def main() -> None:
        a, b = Stream(asynchronous=True), Stream(asynchronous=True)
        L = a.zip(b, maxsize=2).sink_to_list()
        await a.emit(1)
        await a.emit(2)
        third = asyncio.ensure_future(a.emit(3))  # a would be 3 ahead of b
        await settle()
        assert not third.done()
        await b.emit("x")
        await third
        assert L == [(1, "x")]

    asyncio.run(main())


def test_zip_maxsize_checked_at_build_time() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        Stream().zip(Stream(), maxsize=0)


# -- delay and rate_limit --------------------------------------------------------


def test_delay_keeps_order_and_flushes_at_close(clock: VirtualClock) -> None:
    source = Stream()
    L = source.delay(1.0).sink_to_list()
    source.emit(1)
    clock.advance(0.5)
    source.emit(2)
    clock.advance(0.5)
    assert L == [1]
    source.emit(3)
    source.close()
    assert L == [1, 2, 3]


def test_rate_limit_spaces_elements(clock: VirtualClock) -> None:
    async def main() -> list[tuple[float, int]]:
        source = Stream(asynchronous=True)
        L = source.rate_limit(1.0).map(lambda x: (clock.now(), x)).sink_to_list()
        tasks = [asyncio.ensure_future(source.emit(i)) for i in range(3)]
        for _ in range(3):
            await clock.advance_async(1.0)
        await asyncio.gather(*tasks)
        return L

    assert asyncio.run(main()) == [(0.0, 0), (1.0, 1), (2.0, 2)]


def test_rate_limit_on_a_virtual_clock_without_a_loop_fails_clearly(
        clock: VirtualClock) -> None:
    source = Stream()
    L = source.rate_limit(1.0).sink_to_list()
    source.emit(1)
    with pytest.raises(RuntimeError, match="running loop"):
        source.emit(2)
    clock.advance(1.0)
    source.emit(3)
    assert L == [1, 3]


def test_emit_queued_behind_a_close_fails_with_closed_error(
        caplog: pytest.LogCaptureFixture) -> None:
    from streams.errors import StreamClosedError

    async def sink(x: int) -> None:
        await asyncio.sleep(0)

    async def main() -> None:
        source = Stream()
        source.sink(sink)
        first = source.emit(1)
        closing = source.close()
        late = source.emit(2)
        await asyncio.wait([first, closing, late])
        assert isinstance(late.exception(), StreamClosedError)

    with caplog.at_level(logging.ERROR, logger="streams"):
        asyncio.run(main())


def test_real_loop_timers_are_scheduled_on_the_running_loop() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        source = Stream()  # default clock: the running loop's
        node = source.timed_window(30.0)
        L = node.sink_to_list()
        timer = node._timer  # type: ignore[attr-defined]
        assert isinstance(timer, asyncio.TimerHandle)
        assert 0 < timer.when() - loop.time() <= 30.0
        source.emit(1)
        source.close()
        assert L == [[1]] and timer.cancelled()

    asyncio.run(main())


def test_close_sync_and_awaitable_forms_flush_everything_in_flight() -> None:
    async def run(awaitable_form: bool) -> list[Any]:
        out: list[Any] = []

        async def sink(x: Any) -> None:
            await asyncio.sleep(0)
            out.append(x)

        source = Stream(asynchronous=True)
        (source.buffer(4).map_async(lambda_free_double, parallelism=3)
            .partition(3).timed_window(60).sink(sink))
        for i in range(10):
            await source.emit(i)
        if awaitable_form:
            await source.aclose()
        else:
            await source.close()  # the sync form returns an awaitable on a running loop
        return out

    expected = [[(0, 2, 4), (6, 8, 10), (12, 14, 16), (18,)]]
    assert asyncio.run(run(True)) == expected
    assert asyncio.run(run(False)) == expected


async def lambda_free_double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


def test_map_awaits_an_object_with_an_async_call() -> None:
    class Double:
        async def __call__(self, x: int) -> int:
            await asyncio.sleep(0)
            return 2 * x

    async def main() -> list[int]:
        source = Stream(asynchronous=True)
        L = source.map(Double()).sink_to_list()
        for i in range(3):
            await source.emit(i)
        return L

    assert asyncio.run(main()) == [0, 2, 4]


def test_tornado_gen_coroutine_sink_is_awaited() -> None:
    from tornado import gen
    from tornado.ioloop import IOLoop

    done: list[int] = []

    @gen.coroutine  # type: ignore[misc]
    def legacy_sink(x: int):  # type: ignore[no-untyped-def]
        yield gen.moment
        done.append(x)

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(legacy_sink)
        for i in range(3):
            await source.emit(i)
            assert done == list(range(i + 1))  # awaited before emit returned

    loop = IOLoop(make_current=False)
    try:
        loop.run_sync(main)
    finally:
        loop.close()


def test_emit_result_is_a_future_awaitable_twice_and_never_lost() -> None:
    # issue 15: as streamz's emit, the result is a Future on a running loop.
    out: list[int] = []

    async def slow_sink(x: int) -> None:
        await asyncio.sleep(0)
        out.append(x)

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(slow_sink)
        source.emit(1)  # never awaited: still processed
        second = source.emit(2)
        assert isinstance(second, asyncio.Future)
        await second
        await second  # a Future may be awaited again
        await asyncio.gather(source.emit(3), source.emit(4))

    asyncio.run(main())
    assert out == [1, 2, 3, 4]


def test_coroutine_work_of_an_emit_runs_in_a_task_of_its_own() -> None:
    # A coroutine sink's asyncio.timeout() and context variables are its
    # own: its work runs in a Task, not in the task that emitted.
    import contextvars

    who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="caller")
    out: list[Any] = []

    async def sink(x: int) -> None:
        who.set("sink")
        try:
            async with asyncio.timeout(0):
                await asyncio.sleep(1)
        except TimeoutError:
            out.append(x)

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(sink)
        await source.emit(1)
        assert who.get() == "caller"

    asyncio.run(main())
    assert out == [1]


def test_a_future_of_the_running_loop_is_the_emits_result_as_it_is() -> None:
    # buffer's room for an element: no Task around it.
    async def main() -> None:
        source = Stream(asynchronous=True)
        source.buffer(1).sink(lambda x: asyncio.sleep(0))
        results = [source.emit(i) for i in range(3)]
        assert not any(isinstance(r, asyncio.Task) for r in results)
        assert not all(r.done() for r in results)  # one waits for room
        await asyncio.gather(*results)

    asyncio.run(main())


def test_a_nodes_tornado_coroutine_update_runs_with_no_loop_running() -> None:
    # streamz's plugin reference (docs/source/plugins.rst): a node whose
    # update is a @gen.coroutine. Called with no loop running, Tornado would
    # start it on the thread's default loop and the synchronous emit finish
    # it on another ("attached to a different loop").
    from tornado import gen

    class Repeat(Stream):
        _local_only = "a test node"

        def __init__(self, upstream: Stream[Any], n: int, **kwargs: Any) -> None:
            super().__init__(upstream, **kwargs)
            self.n = n

        @gen.coroutine
        def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
            for _ in range(self.n):
                yield self._emit(x, metadata=metadata)

    source = Stream()
    L = Repeat(source, 2).sink_to_list()
    source.emit("a")
    source.emit("b")
    assert L == ["a", "a", "b", "b"]


def test_a_graph_change_while_emits_queue_on_the_loop_does_not_stall_them() -> None:
    # Synchronous emits on a running loop (a notebook's) queue behind a
    # coroutine sink; a sink added meanwhile made the queued element wait on itself.
    async def main() -> tuple[list[int], list[int]]:
        gate = asyncio.Event()
        out: list[int] = []
        other: list[int] = []

        async def slow(x: int) -> None:
            await gate.wait()
            out.append(x)

        source: Stream[int] = Stream()
        source.sink(slow)
        first, second = source.emit(0), source.emit(1)
        source.sink(other.append)
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, second), 60)
        return out, other

    assert asyncio.run(main()) == ([0, 1], [1])


def test_a_c_function_sink_returning_an_awaitable_is_awaited() -> None:
    """anext (a C function) returns an awaitable: the sink awaits it, fused as unfused."""

    async def main() -> list[str]:
        log: list[str] = []

        async def agen(tag: str) -> Any:
            log.append(f"{tag} started")
            yield 1

        source = Stream(asynchronous=True)
        source.sink(anext)
        await source.emit(agen("a"))
        return log

    assert asyncio.run(main()) == ["a started"]
