"""Sliding, session and keyed windows, keyed expiry and ``node.late`` in Spark segments.

Event-time windows are lowered to Spark's ``window(t, size, slide)`` and
``session_window(t, gap)`` under a watermark, grouped by key; with
``node.late`` sunk they run as the core's own nodes, in element order, in a
chain of the stage program (Spark's window() drops late rows). Keyed state
with ttl runs as the core's node too. Results on Spark are checked against
the in-process run in tests/equivalence/.
"""

from __future__ import annotations

from typing import Any

import pytest

import streams_spark  # noqa: F401
from streams import NodeError, Stream
from streams.operators.timed import LateElementError
from streams_spark.plan import ChainStage, WindowStage, lower


def _count(n: int, x: Any) -> int:
    return n + 1


@pytest.mark.parametrize("make", [
    lambda s: s.timed_window(10, slide=5, time=0),
    lambda s: s.timed_window(10, time=0, key=1),
    lambda s: s.session_window(10, time=0, key=1),
    lambda s: s.session_window(10, time=0),
], ids=["sliding", "keyed_tumbling", "keyed_session", "session"])
def test_event_time_windows_are_lowered_to_spark_windows(make: Any) -> None:
    node = make(Stream().to_spark())
    plan = lower([node.describe()])
    assert [type(s) for s in plan.stages] == [WindowStage]
    assert plan.mode == "stream"


@pytest.mark.parametrize("make", [
    lambda s: s.scan(_count, start=0, key=1, ttl=10, time=0),
    lambda s: s.stateful_map(lambda n, x: (n, [x]), start=0, key=1, ttl=10, time=0),
], ids=["scan_ttl", "stateful_map_ttl"])
def test_keyed_state_with_ttl_runs_as_the_core_node(make: Any) -> None:
    node = make(Stream().to_spark())
    plan = lower([node.describe()])
    assert [type(s) for s in plan.stages] == [ChainStage]
    chain = plan.stages[0]
    assert isinstance(chain, ChainStage) and chain.sequential  # in order, in one group
    assert plan.mode == "batch"


def test_a_window_with_late_sunk_runs_as_its_node() -> None:
    window = Stream().to_spark().timed_window(10, time=0, lateness=2)
    assert [type(s) for s in lower([window.describe()]).stages] == [WindowStage]
    window.late.sink_to_list()
    stages = lower([window.describe()]).stages
    assert [type(s) for s in stages] == [ChainStage]


def _run(build: Any, xs: list[Any], on_spark: bool) -> list[Any]:
    """What ``build`` gives over ``xs``, in-process or in a to_spark() segment."""
    source = Stream()
    node = build(source.to_spark(batch_size=2) if on_spark else source)
    out = (node.gather() if on_spark else node).sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return out


def _running_max(best: int, x: Any) -> int:
    return max(best, x[1])


def test_a_session_window_after_a_keyed_scan_runs_as_in_process(spark: Any) -> None:
    xs = [("a", 1), ("b", 2), ("a", 3), ("b", 9), ("a", 10), ("a", 11)]

    def build(s: Stream[Any]) -> Stream[Any]:
        return (s.scan(_running_max, start=0, key=0).map(lambda kv: (kv[0], kv[1], kv[1]))
                .session_window(2, time=2, key=0))

    results = [_run(build, xs, on_spark) for on_spark in (False, True)]
    assert results[1] == results[0]
    assert results[0][:2] == [("b", [("b", 2, 2)]), ("a", [("a", 1, 1), ("a", 3, 3)])]


def test_late_elements_of_a_tumbling_window_reach_late_on_spark(spark: Any) -> None:
    source = Stream()
    window = source.to_spark(batch_size=2).timed_window(1.0, time=lambda x: x)
    late = window.late.sink_to_list()
    out = window.gather().sink_to_list()
    for t in [5.0, 7.5, 1.0, 8.0]:  # 1.0 arrives after the watermark passed 7.5
        source.emit(t)
    source.close()
    assert out == [[5.0], [7.5], [8.0]]
    assert late == [1.0]


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


def _raised(make: Any, times: list[float]) -> tuple[list[Any], list[NodeError]]:
    source = Stream()
    out = make(source.to_spark(batch_size=2)).gather().sink_to_list()
    errors = []
    for t in [*times, None]:
        try:
            source.emit(t) if t is not None else source.close()
        except NodeError as e:
            errors.append(e)
    return out, errors


def test_a_late_element_of_a_spark_sliding_window_is_named_and_kept_in_open_windows(
        spark: Any) -> None:
    # Spark drops the element from its windows that closed (and the error
    # names it) but counts it in those still open: in-process it would be
    # in none of them (node.late sunk gives the in-process result).
    out, errors = _raised(lambda s: s.timed_window(4.0, slide=2.0, time=lambda x: x),
                          [5.0, 9.0, 6.5, 10.0])
    assert [e.element for e in errors] == [6.5]
    assert isinstance(errors[0].__cause__, LateElementError)
    assert "window [4.0, 8.0)" in str(errors[0].__cause__)
    assert out == [[5.0], [5.0], [9.0, 6.5], [9.0, 10.0], [10.0]]


def test_spark_session_windows_merge_elements_exactly_a_gap_apart(spark: Any) -> None:
    out, errors = _raised(lambda s: s.session_window(2.0, time=lambda x: x),
                          [1.0, 3.0, 5.0, 9.0, 12.0])
    assert errors == []
    assert out == [[1.0, 3.0, 5.0], [9.0], [12.0]]


def test_keys_equal_in_a_dict_share_a_window_on_spark(spark: Any) -> None:
    xs = [(1, 0.5), (1.0, 1.0), (True, 1.5), (2, 2.0), (1, 12.0)]
    results = [_run(lambda s: s.timed_window(10, time=1, key=0), xs, on_spark)
               for on_spark in (False, True)]
    assert results[1] == results[0]
    assert [len(w) for _, w in results[1]] == [3, 1, 1]


@pytest.mark.parametrize(("xs", "make"), [
    ([(1.0, 1), (7.3e9, 2), (7.3e9 + 1, 3)], lambda s: s.timed_window(10, time=0)),
    ([(1.0, 1), (7.3e9 - 3, 2)], lambda s: s.timed_window(7, time=0)),
    ([(1.0, 1), (8e9, 2), (8e9 + 1, 3)], lambda s: s.timed_window(10, slide=5, time=0)),
    ([(1.0, "a"), (8e9, "b"), (2.5e11, "b")], lambda s: s.session_window(10, time=0, key=1)),
], ids=["at_7.3e9", "sharing_the_old_flush_window", "sliding_2223", "sessions_to_9999"])
def test_windows_of_any_year_spark_takes_close_at_the_end(spark: Any, xs: list[Any],
                                                          make: Any) -> None:
    # The end-of-stream row's time was 7.3e9 s (2201): a window ending after it
    # was lost, and a time after it made that row late (a LateElementError).
    assert _run(make, xs, True) == _run(make, xs, False)


def test_a_window_too_long_to_close_on_spark_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match=r"session_window\(1000000000000.0\): .* cannot close "
                                         r"on Spark; call gather\(\) before it"):
        Stream().to_spark().session_window(1e12, time=0)
    with pytest.raises(ValueError, match="size plus lateness"):
        Stream().to_spark().timed_window(1e11, time=0, lateness=7e11)
    Stream().to_spark().timed_window(1e11, time=0, lateness=6e11)  # it fits
