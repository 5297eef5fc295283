"""Stream mode: keyed scans on Spark-managed state, event-time windows under a watermark."""

from __future__ import annotations

from typing import Any

import pytest

from streams import NodeError, Stream
from streams.operators.timed import LateElementError
from tests.streams_spark.spark_plans import both

pytestmark = pytest.mark.spark


def add_value(total: int, kv: tuple[str, int]) -> int:
    return total + kv[1]


# JVMs start slowly on a loaded 2-core machine; no timing is asserted.
@pytest.mark.timeout(900)
def test_keyed_scan_then_event_time_window(spark: Any) -> None:
    # Timestamps out of order by less than the lateness: no element is late
    # in-process nor on Spark, so both emit every window, in time order.
    xs = [(f"k{i % 3}", i, i * 0.25 + (0.2 if i % 4 == 1 else 0.0)) for i in range(24)]

    def build(s: Stream) -> Stream:
        return (s.filter(lambda r: r[1] % 5 != 0)
                .scan(lambda st, r: (st[0] + r[1], r[2]), start=(0, 0.0), key=0)
                .timed_window(1.0, time=lambda kv: kv[1][1], lateness=0.5)
                .map(lambda w: [kv[0] for kv in w]))

    out, expected = both(xs, build, batch_size=10)
    assert out == expected
    assert len(out) == 6


def test_late_elements_are_reported_not_dropped(spark: Any) -> None:
    source = Stream()
    window = source.to_spark(batch_size=2).timed_window(1.0, time=lambda x: x)
    errors = window.on_error("route").errors.sink_to_list()
    out = window.gather().sink_to_list()
    for t in [5.0, 7.5, 1.0, 8.0]:  # 1.0 arrives after the watermark passed 7.5
        source.emit(t)
    source.close()
    assert out == [[5.0], [7.5], [8.0]]
    assert [type(e.exception) for e in errors] == [LateElementError]


def test_error_in_keyed_scan_names_the_node(spark: Any) -> None:
    source = Stream()
    (source.to_spark().scan(lambda a, b: a + 1 // b[1], start=0, key=0, stream_name="inv")
     .gather().sink_to_list())
    source.emit(("a", 1))
    source.emit(("a", 0))
    with pytest.raises(NodeError, match=r"inv.*\('a', 0\).*ZeroDivisionError"):
        source.close()


def test_an_error_before_a_keyed_scan_and_a_window_is_raised_not_dropped(spark: Any) -> None:
    def parse(r: tuple[str, int]) -> tuple[str, int]:
        if r[1] == 3:
            raise ValueError("bad record")
        return r

    source = Stream()
    (source.to_spark(batch_size=3).map(parse, stream_name="parse")
     .scan(add_value, start=0, key=0).timed_window(1.0, time=lambda kv: float(kv[1]))
     .gather().sink_to_list())
    with pytest.raises(NodeError, match=r"parse.*\('a', 3\).*bad record"):
        for i in range(8):
            source.emit(("a", i))
        source.close()


def test_second_state_stage_is_refused_at_build_time() -> None:
    s = Stream().to_spark().scan(add_value, start=0, key=0)
    with pytest.raises(TypeError, match=r"accumulate\(\) cannot run in this Spark segment"):
        s.scan(lambda a, b: a + b[1], start=0)
    with pytest.raises(TypeError, match=r"partition\(\) cannot run"):
        s.partition(2)


def test_sequential_steps_in_a_streaming_query(spark: Any) -> None:
    # With an event-time window the segment runs as a query; the running
    # count (accumulate) and partition run there as one state stage.
    xs = [0.1, 0.4, 1.2, 1.3, 2.5, 2.6, 2.7]

    def build(s: Stream) -> Stream:
        return (s.map(lambda t: (t, 1)).scan(lambda a, x: (x[0], a[1] + x[1]))
                .partition(2).flatten()
                .timed_window(1.0, time=0))

    out, expected = both(xs, build, batch_size=3)
    assert out == expected


def test_keyed_scan_over_many_keys_keeps_each_keys_state_and_errors_in_place(
        spark: Any) -> None:
    # More keys than groups of keys (KEY_BUCKETS), no start (a key's first
    # element is its state), a failing element: per-key states stay apart
    # across micro-batches and the error comes in its place.
    xs = [(f"k{i % 40}", i) for i in range(130)]

    def run(s: Stream, spark_: bool) -> tuple[list, list]:
        node = s.to_spark(batch_size=17) if spark_ else s
        scan = node.scan(lambda a, x: (x[0], a[1] + 100 // (x[1] - 77)), key=0)
        errors = scan.on_error("route").errors.map(lambda e: e.element).sink_to_list()
        out = (scan.map(lambda kv: kv[1]).gather() if spark_ else scan.map(lambda kv: kv[1]))
        return out.sink_to_list(), errors

    results = []
    for spark_ in (True, False):
        source = Stream()
        out, errors = run(source, spark_)
        for x in xs:
            source.emit(x)
        source.close()
        results.append((list(out), list(errors)))
    assert results[0] == results[1]
    assert results[1][1] == [("k37", 77)]
