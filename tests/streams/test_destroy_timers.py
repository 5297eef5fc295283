"""destroy() stops a timed node's timer: nothing fires into a node cut from the graph."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from streams import Stream, VirtualClock

TIMED: dict[str, Callable[[Stream[Any]], Stream[Any]]] = {
    "delay": lambda s: s.delay(1.0),
    "partition": lambda s: s.partition(5, timeout=1.0),
    "timed_window": lambda s: s.timed_window(1.0),
    "sliding timed_window": lambda s: s.timed_window(2.0, slide=1.0),
}


@pytest.mark.parametrize("make", TIMED.values(), ids=TIMED.keys())
def test_destroy_cancels_the_timer_and_logs_no_error(
        make: Callable[[Stream[Any]], Stream[Any]], clock: VirtualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    # Before: delay's and partition's timers fired into the destroyed node
    # and logged "emitting downstream failed ... was destroyed"; the windows'
    # stayed armed for nothing. What was held is dropped, as streamz drops it.
    source = Stream()
    node = make(source)
    out = node.sink_to_list()
    source.emit(1)
    clock.advance(0.5)
    with caplog.at_level(logging.ERROR, logger="streams"):
        node.destroy()
        assert clock.pending == 0
        clock.advance(5.0)
    assert out == []
    assert not caplog.records


@pytest.mark.parametrize("make", [TIMED["delay"], TIMED["partition"]], ids=["delay", "partition"])
def test_a_timer_already_firing_when_destroyed_sends_nothing(
        make: Callable[[Stream[Any]], Stream[Any]], clock: VirtualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    # The timer's callback may be on its way on the loop thread when another
    # thread destroys the node: it finds the node closed and stops there.
    source = Stream()
    node = make(source)
    out = node.sink_to_list()
    source.emit(1)
    node.destroy()
    with caplog.at_level(logging.ERROR, logger="streams"):
        node._on_timer(1.0)  # type: ignore[attr-defined]
    assert out == []
    assert not caplog.records
    assert clock.pending == 0  # and it armed no other
