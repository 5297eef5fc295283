"""Failures on the way to an event-time window on Spark meet their node's policy, as in-process.

And where a policy cannot apply there, the user is told which node and
why, never an internal error of the library.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from streams import NodeError, Stream

pytestmark = pytest.mark.spark

#: The second element has no event time.
EVENTS = [(0.5, 1), (None, 2), (1.5, 3), (2.5, 4)]


def parse(r: tuple[Any, int]) -> tuple[Any, int]:
    if r[1] == 4:
        raise ValueError("bad record")
    return r


def run(source: Stream, head: Stream, caplog: pytest.LogCaptureFixture
        ) -> tuple[list[Any], list[Any], list[str]]:
    parsed = head.map(parse, stream_name="parse").on_error("skip")
    window = parsed.timed_window(2, time=0).on_error("route")
    errors = window.errors.sink_to_list()
    out = (window.gather() if head is not source else window).sink_to_list()
    with caplog.at_level(logging.WARNING, logger="streams"):
        for x in EVENTS:
            source.emit(x)
        source.close()
    skipped = [r.getMessage() for r in caplog.records if "bad record" in r.getMessage()]
    caplog.clear()
    return list(out), [e.element for e in errors], skipped


@pytest.mark.timeout(900)
def test_skip_before_and_route_at_a_window_on_spark_as_in_process(
        spark: Any, caplog: pytest.LogCaptureFixture) -> None:
    local = Stream()
    expected = run(local, local, caplog)
    source = Stream()
    got = run(source, source.to_spark(), caplog)
    assert expected == ([[(0.5, 1), (1.5, 3)]], [(None, 2)], [
        "map(parse) 'parse' failed on element (2.5, 4): ValueError: bad record"])
    assert got == expected


def test_from_spark_window_key_failure_routed_and_skipped(
        spark: Any, caplog: pytest.LogCaptureFixture) -> None:
    df = spark.createDataFrame([(0.5, "a"), (1.0, None), (1.5, "b")], "t double, k string")

    def windows(s: Stream, policy: str) -> Stream:
        return s.timed_window(2, time=lambda r: r.t, key=lambda r: r.k.upper()).on_error(policy)

    source = Stream.from_spark(df)
    window = windows(source, "route")
    errors = window.errors.sink_to_list()
    out = window.map(lambda kw: (kw[0], len(kw[1]))).gather().sink_to_list()
    source.start()
    assert sorted(out) == [("A", 1), ("B", 1)]
    assert [(e.element.k, type(e.exception)) for e in errors] == [(None, AttributeError)]
    # No driver reads a to_dataframe(): a skipped element is logged on the executor.
    frame = windows(Stream.from_spark(df), "skip").map(lambda kw: (kw[0], len(kw[1])))
    assert sorted(tuple(r) for r in frame.to_dataframe("k string, n long").collect()) == [
        ("A", 1), ("B", 1)]


def test_from_spark_window_failure_raises_the_nodes_error(spark: Any) -> None:
    df = spark.createDataFrame([(0.5, 1), (None, 2)], "t double, v long")
    source = Stream.from_spark(df)
    source.timed_window(2, time=lambda r: r.t).gather().sink_to_list()
    with pytest.raises(NodeError, match=r"timed_window\(2.0\) failed on element "
                                        r"Row\(t=None, v=2\): TypeError") as info:
        source.start()
    assert isinstance(info.value, TypeError)


def test_an_error_stream_feeding_to_dataframe_is_named(spark: Any) -> None:
    df = spark.createDataFrame([(1,), (0,)], "a long")
    m = Stream.from_spark(df).map(lambda a: 10 // a).on_error("route")
    with pytest.raises(ValueError, match=r"reads stream 'errors of map\(<lambda>\)', an "
                                         r"error stream \(node.errors\).*cannot feed "
                                         r"to_dataframe\(\)"):
        m.errors.map(lambda r: (repr(r.element),)).to_dataframe("e string")
