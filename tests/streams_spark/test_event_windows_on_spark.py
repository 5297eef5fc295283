"""Sliding and session windows, keyed expiry and ``node.late`` in Spark segments.

Spark's ``window()`` is the tumbling window: the planner lowers only nodes
with an ``event_time`` trait to it. Sliding and session windows (one
watermark for all keys) and keyed state with ttl run as the core's own
nodes, in element order, in a chain of the stage program; their results on
Spark are checked in tests/equivalence/.
"""

from __future__ import annotations

from typing import Any

import pytest

import streams_spark  # noqa: F401
from streams import Stream
from streams_spark.plan import ChainStage, WindowStage, lower


def _count(n: int, x: Any) -> int:
    return n + 1


@pytest.mark.parametrize("make", [
    lambda s: s.timed_window(10, slide=5, time=0),
    lambda s: s.timed_window(10, time=0, key=1),
    lambda s: s.session_window(10, time=0, key=1),
    lambda s: s.scan(_count, start=0, key=1, ttl=10, time=0),
    lambda s: s.stateful_map(lambda n, x: (n, [x]), start=0, key=1, ttl=10, time=0),
], ids=["sliding", "keyed_tumbling", "session", "scan_ttl", "stateful_map_ttl"])
def test_they_are_not_lowered_to_spark_window_or_keyed_state(make: Any) -> None:
    node = make(Stream().to_spark())
    plan = lower([node.describe()])
    assert [type(s) for s in plan.stages] == [ChainStage]
    chain = plan.stages[0]
    assert isinstance(chain, ChainStage) and chain.sequential  # in order, in one group
    assert plan.mode == "batch"


def test_the_tumbling_window_is_still_spark_window() -> None:
    node = Stream().to_spark().timed_window(10, time=0, lateness=2)
    assert [type(s) for s in lower([node.describe()]).stages] == [WindowStage]


def test_a_session_window_after_a_keyed_scan_is_refused_naming_both() -> None:
    s = Stream().to_spark().scan(_count, start=0, key=0)
    with pytest.raises(TypeError, match=r"session_window\(\) cannot run in this Spark "
                                        r"segment after accumulate.*gather\(\)"):
        s.session_window(5, time=1)


def test_late_stream_of_spark_window_is_refused(spark: Any) -> None:
    source = Stream()
    window = source.to_spark(batch_size=2).timed_window(1.0, time=lambda x: x)
    window.late.sink_to_list()
    window.gather().sink_to_list()
    with pytest.raises(ValueError, match=r"cannot reach node.late.*on_error\('route'\)"):
        for t in [5.0, 7.5, 1.0, 8.0]:
            source.emit(t)
        source.close()


def test_late_elements_of_a_sliding_window_reach_late_on_spark(spark: Any) -> None:
    source = Stream()
    window = source.to_spark(batch_size=2).timed_window(2.0, slide=1.0, time=lambda x: x)
    late = window.late.sink_to_list()
    out = window.gather().sink_to_list()
    for t in [5.0, 7.5, 1.0, 8.0]:  # 1.0 arrives after the watermark passed 7.5
        source.emit(t)
    source.close()
    assert out == [[5.0], [5.0], [7.5], [7.5, 8.0], [8.0]]
    assert late == [1.0]
