"""Keyed scans: a streaming query with Spark-managed keyed state."""

from __future__ import annotations

from typing import Any

import pytest

from streams import NodeError, Stream

pytestmark = pytest.mark.spark


def add_value(total: int, kv: tuple[str, int]) -> int:
    return total + kv[1]


def both(source: Stream, xs: list[Any], build: Any, **kwargs: Any) -> tuple[list, list]:
    local = Stream()
    expected = build(local).sink_to_list()
    for x in xs:
        local.emit(x)
    local.close()
    out = build(source.to_spark(**kwargs)).gather().sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return list(out), list(expected)


def test_keyed_scan_keeps_state_per_key_across_batches(spark: Any) -> None:
    xs = [("ab"[i % 2], i) for i in range(9)]

    def build(s: Stream) -> Stream:
        return s.map(lambda kv: (kv[0], kv[1] * 10)).scan(add_value, start=0, key=0)

    out, expected = both(Stream(), xs, build, batch_size=4)
    assert out == expected
    assert out[-1] == ("a", 200)


def test_keyed_scan_then_stateless_steps(spark: Any) -> None:
    xs = [(i % 3, i) for i in range(8)]

    def build(s: Stream) -> Stream:
        return (s.scan(add_value, start=0, key=lambda kv: kv[0], with_state=True)
                .pluck(1).map(lambda kv: [kv, kv]).flatten())

    out, expected = both(Stream(), xs, build, batch_size=3)
    assert out == expected


def test_second_state_stage_is_refused_at_build_time() -> None:
    s = Stream().to_spark().scan(add_value, start=0, key=0)
    with pytest.raises(TypeError, match=r"accumulate\(\) cannot run in this Spark segment"):
        s.scan(lambda a, b: a + b[1], start=0)
    with pytest.raises(TypeError, match=r"partition\(\) cannot run"):
        s.partition(2)


def test_error_in_keyed_scan_names_the_node(spark: Any) -> None:
    source = Stream()
    (source.to_spark().scan(lambda a, b: a + 1 // b[1], start=0, key=0, stream_name="inv")
     .gather().sink_to_list())
    source.emit(("a", 1))
    source.emit(("a", 0))
    with pytest.raises(NodeError, match=r"inv.*\('a', 0\).*ZeroDivisionError"):
        source.close()
