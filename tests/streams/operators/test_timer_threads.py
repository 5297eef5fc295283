"""delay and partition(timeout=) fed from one thread while their timer fires on another.

With no loop running, a node's timer fires on the shared loop thread
(streams-loop) while the producer emits from its own. Each test forces the
interleaving that went wrong: a downstream sink holds the producer's thread
inside ``update()`` while another thread, running a loop as streams-loop
does, calls the node's timer callback (or ``update``) itself. Threads meet
on Events; time is a VirtualClock (no sleeps, no wall-clock asserts).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from streams import Stream, VirtualClock

#: How long a test waits for the other thread before failing instead of hanging.
HANG = 30.0


def on_a_loop_thread(call: Callable[[], Any], called: threading.Event,
                     producer_done: threading.Event) -> threading.Thread:
    """Run ``call()`` on a new thread that runs a loop, as the timers' thread does.

    ``called`` is set once ``call()`` has returned (an awaitable it returns is
    awaited after that); the loop goes on turning until ``producer_done``, so
    that work put off to a later turn (a timer tried again) runs.
    """

    async def main() -> None:
        pending = call()
        called.set()
        if pending is not None:
            await pending
        await asyncio.get_running_loop().run_in_executor(None, producer_done.wait, HANG)
        for _ in range(3):  # the turns that run what was put off
            await asyncio.sleep(0)

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="a-loop", daemon=True)
    thread.start()
    return thread


class HoldOn:
    """A sink that, on ``x``, starts ``call`` on a loop thread and waits until it returned.

    The producer's thread is then inside the node's ``update()`` (which is
    emitting ``x``) while ``call`` runs.
    """

    def __init__(self, x: Any, call: Callable[[], Any]) -> None:
        self.x = x
        self.call = call
        self.seen: list[Any] = []
        self.called = threading.Event()
        self.producer_done = threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self, y: Any) -> None:
        if y == self.x and self.thread is None:
            self.thread = on_a_loop_thread(self.call, self.called, self.producer_done)
            assert self.called.wait(HANG)
        self.seen.append(y)

    def join(self) -> None:
        self.producer_done.set()
        assert self.thread is not None
        self.thread.join(HANG)
        assert not self.thread.is_alive()


def held_delay(clock: VirtualClock, call: Callable[[Stream[Any]], Any]) -> tuple[Any, HoldOn]:
    """A delay(1.0) holding 'a' (due 1.0) and 'b' (due 1.5) at time 2.5.

    The producer did not yield past their times: 'c' arriving releases both,
    and the sink holds the producer there while ``call(node)`` runs.
    """
    source = Stream()
    node = source.delay(1.0)
    sink = HoldOn("a", lambda: call(node))
    node.sink(sink)
    source.emit("a")
    clock._now = 0.5
    source.emit("b")
    clock._now = 2.5
    return source, sink


def test_delay_timer_firing_on_another_thread_waits_for_the_update_inside(
        clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    # Before: the timer sent 'b' while the producer was still sending 'a'
    # ('b' went first) and both threads changed the held deque at once.
    source, sink = held_delay(clock, lambda node: node._on_timer(1.5))
    with caplog.at_level(logging.ERROR, logger="streams"):
        source.emit("c")
        assert sink.seen == ["a", "b"]
        sink.join()  # the timer, put off to the loop's next turn, went then
        clock.advance(1.0)
    assert sink.seen == ["a", "b", "c"]
    assert not caplog.records


def test_delay_element_arriving_on_a_loop_thread_waits_for_the_update_inside(
        clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    # An element arriving on a loop thread (from another node's timer) must
    # not block that loop: it waits, as an awaitable, for the node to be free.
    source, sink = held_delay(clock, lambda node: node.update("z"))
    with caplog.at_level(logging.ERROR, logger="streams"):
        source.emit("c")
        assert sink.seen == ["a", "b"]
        sink.join()
        clock.advance(1.0)
    assert sink.seen == ["a", "b", "c", "z"]
    assert not caplog.records


def test_partition_timer_firing_on_another_thread_waits_for_the_update_inside(
        clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    # Groups 'a' (started at 0) and 'b' (at 0.2) have timed out when 'c1'
    # arrives at 1.5: the producer sends ('a1',) and the timer for 'b' fires
    # meanwhile. Before: the timer sent ('b1',) first, and the producer,
    # going on to 'b', raised KeyError.
    source = Stream()
    node = source.partition(3, timeout=1.0, key=lambda s: s[0])
    sink = HoldOn(("a1",), lambda: node._on_timer(1.2))
    node.sink(sink)
    source.emit("a1")
    clock._now = 0.2
    source.emit("b1")
    clock._now = 1.5
    with caplog.at_level(logging.ERROR, logger="streams"):
        source.emit("c1")
        assert sink.seen == [("a1",), ("b1",)]
        sink.join()
        clock.advance(1.0)
    assert sink.seen == [("a1",), ("b1",), ("c1",)]
    assert not caplog.records
