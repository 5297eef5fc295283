"""Loops a pipeline meets: a private loop per thread, timers of ended loops, rate_limit's order.

Time is a VirtualClock wherever a test can use one; thread interleavings are
forced with Events. The one real-loop test waits for its element on an
Event, under a timeout that only guards against a hang: nothing is asserted
about how long anything took.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from streams import Stream, VirtualClock, use_clock
from streams import clock as clock_module
from streams.operators._outbox import running_loop

#: How long a test waits for another thread before failing instead of hanging.
HANG = 30.0


# -- run_sync: one private loop per thread ---------------------------------------


def test_two_threads_each_emit_into_their_own_pipeline_while_the_other_runs_its_loop() -> None:
    # Thread A's coroutine sink is running (A's private loop is busy) when
    # thread B emits into its own pipeline: one loop for the process
    # refused B's emit ("This event loop is already running") and lost it.
    a_running, b_done = threading.Event(), threading.Event()
    out_a: list[int] = []
    out_b: list[int] = []
    errors: list[BaseException] = []
    loops: dict[str, Any] = {}

    async def sink_a(x: int) -> None:
        loops["a"] = asyncio.get_running_loop()
        loops["a is private"] = loops["a"] is clock_module.private_loop()  # as _outbox reads it
        a_running.set()
        assert b_done.wait(HANG)  # blocks A's loop, and only A's, while B emits
        out_a.append(x)

    async def sink_b(x: int) -> None:
        loops["b"] = asyncio.get_running_loop()
        await asyncio.sleep(0)
        out_b.append(x)

    source_a, source_b = Stream(), Stream()
    source_a.sink(sink_a)
    source_b.sink(sink_b)

    def produce_a() -> None:
        try:
            source_a.emit(1)
        except BaseException as e:
            errors.append(e)

    def produce_b() -> None:
        try:
            assert a_running.wait(HANG)
            source_b.emit(2)
        except BaseException as e:
            errors.append(e)
        finally:
            b_done.set()

    threads = [threading.Thread(target=produce_a), threading.Thread(target=produce_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert (out_a, out_b) == ([1], [2])
    assert loops["a"] is not loops["b"]
    assert loops["a is private"]


def test_a_thread_s_private_loop_is_closed_when_the_thread_ends() -> None:
    # A loop left open holds its selector's file descriptors: one set per
    # thread that ever emitted, for the life of the process.
    seen: list[Any] = []
    out: list[int] = []

    async def sink(x: int) -> None:
        await asyncio.sleep(0)
        out.append(x)

    def produce() -> None:
        source = Stream()
        source.sink(sink)
        source.emit(1)
        seen.append(clock_module.private_loop())

    thread = threading.Thread(target=produce)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive()
    assert out == [1]
    loop = seen[0]
    assert loop is not None and loop.is_closed()

    # The main thread's loop is its own: another thread's end leaves it alone.
    source = Stream()
    source.sink(sink)
    source.emit(2)
    assert out == [1, 2]
    assert clock_module.private_loop() is not loop


# -- rate_limit keeps the order elements came in ---------------------------------


def rate_limited(clock: VirtualClock) -> tuple[Stream[Any], list[tuple[float, str]]]:
    source = Stream(asynchronous=True)
    out: list[tuple[float, str]] = []
    source.rate_limit(1.0).sink(lambda x: out.append((clock.now(), x)))
    return source, out


def test_rate_limit_waits_to_its_turn_not_for_the_wait_it_had_on_arrival(
        clock: VirtualClock) -> None:
    # A producer emits without awaiting and blocks between emits (clock.advance:
    # time passes while the loop does not run). b's wait (1.0) counted from
    # when its task first ran (1.5) outlasted c's (0.5): a, c, b.
    async def main() -> list[tuple[float, str]]:
        source, out = rate_limited(clock)
        sent = [source.emit("a"), source.emit("b")]  # b's turn: 1.0
        clock.advance(1.5)
        sent.append(source.emit("c"))  # c's turn: 2.0
        await clock.advance_async(5.0)
        await asyncio.gather(*(s for s in sent if s is not None))
        return out

    assert asyncio.run(main()) == [(0.0, "a"), (1.5, "b"), (2.0, "c")]


def test_rate_limit_element_whose_turn_came_while_blocked_goes_after_one_still_waiting(
        clock: VirtualClock) -> None:
    # b waits on its timer (turn 1.0); the producer blocks past b's turn and
    # d's (2.0) and emits d: d's turn has come, but b has not gone yet (its
    # timer fires when the loop runs again). streamz sends a, d, b.
    async def main() -> list[tuple[float, str]]:
        source, out = rate_limited(clock)
        sent = [source.emit("a"), source.emit("b")]
        await asyncio.sleep(0)  # b's task starts its wait
        clock.advance(2.5)
        sent.append(source.emit("d"))
        await clock.advance_async(1.0)
        await asyncio.gather(*(s for s in sent if s is not None))
        return out

    assert asyncio.run(main()) == [(0.0, "a"), (2.5, "b"), (2.5, "d")]


# -- delay, partition(timeout=): a timer of a loop since closed is armed again ----


class _LoopBoundHandle:
    """A virtual timer that belongs, as asyncio's do, to the loop running when it was armed."""

    __slots__ = ("_handle", "_loop")

    def __init__(self, handle: Any, loop: asyncio.AbstractEventLoop | None) -> None:
        self._handle, self._loop = handle, loop

    def cancel(self) -> None:
        self._handle.cancel()


class LoopBoundClock(VirtualClock):
    """A VirtualClock whose timers, as a loop's, never fire once their loop is closed.

    A timer armed with no loop running belongs to none and fires on ``advance``.
    """

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Any:
        loop = running_loop()

        def fire() -> None:
            if loop is None or not loop.is_closed():
                callback(*args)

        return _LoopBoundHandle(super().call_later(delay, fire), loop)


HOLDERS = {
    "delay": (lambda s: s.delay(1.0), ["a", "b"]),
    "partition": (lambda s: s.partition(10, timeout=1.0), [("a", "b")]),
}


@pytest.mark.parametrize("name", sorted(HOLDERS))
def test_a_node_fed_under_one_loop_then_the_next_arms_its_timer_on_the_next(name: str) -> None:
    build, expected = HOLDERS[name]
    with use_clock(LoopBoundClock()) as clock:
        source = Stream()
        out = build(source).sink_to_list()

    async def feed(x: str) -> None:
        source.emit(x)  # a's timer is armed on this loop, which ends before it fires

    async def then(x: str) -> list[Any]:
        source.emit(x)
        await clock.advance_async(1.0)  # past a's time, and b's
        return list(out)

    asyncio.run(feed("a"))
    clock.advance(0.5)
    assert asyncio.run(then("b")) == expected


@pytest.mark.parametrize("name", sorted(HOLDERS))
def test_a_node_fed_under_a_loop_then_with_none_arms_its_timer_again(name: str) -> None:
    build, expected = HOLDERS[name]
    with use_clock(LoopBoundClock()) as clock:
        source = Stream()
        out = build(source).sink_to_list()

    async def feed(x: str) -> None:
        source.emit(x)

    asyncio.run(feed("a"))
    clock.advance(0.5)
    source.emit("b")  # a plain script now: no loop in this thread
    clock.advance(1.0)
    assert out == expected


def test_delay_and_partition_fed_under_an_ended_loop_then_with_none_send_on_the_loop_thread(
        ) -> None:
    # The real thing: asyncio's timers, then the shared loop thread's.
    source = Stream()
    got = {"delay": threading.Event(), "partition": threading.Event()}
    out: dict[str, list[Any]] = {"delay": [], "partition": []}

    def sink(name: str, size: Callable[[Any], int]) -> Callable[[Any], None]:
        def add(x: Any) -> None:
            out[name].append(x)
            if sum(map(size, out[name])) == 2:  # a and b, however a loaded machine groups them
                got[name].set()
        return add

    source.delay(0.05).sink(sink("delay", lambda x: 1))
    source.partition(10, timeout=0.05).sink(sink("partition", len))

    async def feed() -> None:
        source.emit("a")

    asyncio.run(feed())  # ends at once: a's timers go with this loop
    source.emit("b")
    assert got["delay"].wait(HANG) and got["partition"].wait(HANG)
    assert out["delay"] == ["a", "b"]
    assert [x for group in out["partition"] for x in group] == ["a", "b"]
