"""Processing-time ``timed_window`` on Spark: the driver's clock, batch-aligned windows."""

from __future__ import annotations

from typing import Any

import pytest

from streams import Stream, VirtualClock, use_clock

pytestmark = pytest.mark.spark

#: Emits and clock moves, as a user's program would make them.
SCHEDULE: list[tuple[str, Any]] = [
    ("emit", 1), ("emit", 2), ("advance", 1.0), ("emit", 3), ("advance", 2.5),
    ("emit", 4), ("emit", 5), ("advance", 0.2), ("emit", 6), ("emit", 7),
]


def run(build: Any, spark: bool, schedule: list[tuple[str, Any]] = SCHEDULE,
        **kwargs: Any) -> list[Any]:
    with use_clock(VirtualClock()) as clock:
        source = Stream()
        node = source.to_spark(**kwargs) if spark else source
        out = build(node)
        if spark:
            out = out.gather()
        got = out.sink_to_list()
        for what, value in schedule:
            if what == "emit":
                source.emit(value)
            else:
                clock.advance(value)
        source.close()
    return list(got)


def windows(s: Stream[Any]) -> Stream[Any]:
    return s.map(lambda x: x * 10).timed_window(1.0).filter(lambda w: w != [99])


def test_windows_hold_what_they_hold_in_process(spark: Any) -> None:
    expected = run(windows, spark=False)
    assert expected == [[10, 20], [30], [], [40, 50, 60, 70]]  # the empty window kept
    assert run(windows, spark=True) == expected


def sliding(s: Stream[Any]) -> Stream[Any]:
    # 2.5 s every second: windows also start between two ends.
    return s.map(lambda x: x * 10).timed_window(2.5, slide=1.0)


def keyed(s: Stream[Any]) -> Stream[Any]:
    return s.timed_window(2.0, slide=1.0, key=lambda x: x % 2)


@pytest.mark.parametrize("build", [sliding, keyed], ids=["sliding", "keyed"])
def test_sliding_and_keyed_windows_hold_what_they_hold_in_process(spark: Any,
                                                                  build: Any) -> None:
    expected = run(build, spark=False)
    assert expected  # windows closed by the clock, and flushed at close
    assert run(build, spark=True) == expected
    assert run(build, spark=True, batch_size=2) == expected


class NoTimers(VirtualClock):
    """Virtual time with nothing to run timers (a producer that never yields)."""

    def call_later(self, delay: float, callback: Any, *args: Any) -> Any:
        raise RuntimeError("no event loop to run timers")


def test_windows_close_on_arrival_without_timers(spark: Any) -> None:
    # Without timers the deadline is checked when an element arrives, on
    # Spark as in-process; batch_size is large, so the window (not the size)
    # closes the micro-batch.
    results = []
    for on_spark in (False, True):
        with use_clock(NoTimers()) as clock:
            source = Stream()
            node = source.to_spark(batch_size=1000) if on_spark else source
            node = node.timed_window(1.0).map(sum)
            got = (node.gather() if on_spark else node).sink_to_list()
            source.emit(1)
            source.emit(2)
            clock.advance(2.0)
            source.emit(3)  # two windows have ended: [1, 2] and an empty one
            held = list(got)
            source.close()
        results.append((held, list(got)))
    assert results[0] == results[1] == ([3, 0], [3, 0, 3])


def test_keyed_scan_and_processing_window_are_refused_together() -> None:
    with pytest.raises(TypeError, match=r"processing-time timed_window.*gather"):
        Stream().to_spark().scan(lambda a, b: a + b, start=0, key=0).timed_window(1.0)


def test_streaming_mode_refuses_a_processing_window_naming_the_fix(spark: Any) -> None:
    source = Stream()
    source.to_spark(streaming=True).timed_window(1.0).gather().sink(print)
    with pytest.raises(ValueError, match=r"streaming=True.*event time"):
        source.emit(1)
        source.close()
