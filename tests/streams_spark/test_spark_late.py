"""Late elements of an event-time window on Spark reach the window's error policy, named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Row

import streams_spark  # noqa: F401 - registers to_spark()
from streams import NodeError, Stream
from streams.operators.timed import LateElementError

pytestmark = pytest.mark.spark


def run(xs: list[Any], build: Any, batch_size: int | None) -> tuple[list[Any], list[Any]]:
    """Windows out, and (element, error type) routed, in-process (None) or on Spark."""
    source: Stream[Any] = Stream()
    head = source if batch_size is None else source.to_spark(batch_size=batch_size)
    window = build(head).on_error("route")
    errors = window.errors.map(lambda r: (r.element, type(r.exception))).sink_to_list()
    out = (window if batch_size is None else window.gather()).sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return out, errors


def windows(s: Stream[Any]) -> Stream[Any]:
    return s.map(lambda x: x * 0.5).timed_window(1.0, time=lambda t: t, lateness=0.5)


def test_each_late_element_is_named_with_its_window_and_the_watermark(spark: Any) -> None:
    source: Stream[Any] = Stream()
    window = source.to_spark(batch_size=2).timed_window(1.0, time=lambda x: x)
    errors = window.on_error("route").errors.sink_to_list()
    out = window.gather().sink_to_list()
    # 1.0 arrives after the watermark passed 7.5; 6.9 and 6.2 share one
    # window, which Spark drops as one row, after it passed 8.0.
    for t in [5.0, 7.5, 1.0, 8.0, 6.9, 6.2, 9.5]:
        source.emit(t)
    source.close()
    assert out == [[5.0], [7.5], [8.0], [9.5]]
    assert [(e.element, type(e.exception)) for e in errors] == [
        (1.0, LateElementError), (6.9, LateElementError), (6.2, LateElementError)]
    assert "window [6.0, 7.0), already emitted: Spark's watermark is 8.0" in str(
        errors[1].exception)


def test_a_late_element_raises_naming_itself_under_the_raise_policy(spark: Any) -> None:
    source: Stream[Any] = Stream()
    source.to_spark(batch_size=2).timed_window(1.0, time=lambda x: x).gather().sink_to_list()
    source.emit(5.0)
    source.emit(7.5)
    source.emit(1.0)
    with pytest.raises(NodeError, match=r"timed_window.*1\.0.*LateElementError") as info:
        source.emit(8.0)
    assert info.value.element == 1.0
    source.close()


def test_after_a_keyed_scan_the_late_rows_are_counted_saying_why(spark: Any) -> None:
    source: Stream[Any] = Stream()
    window = (source.to_spark(batch_size=2).scan(lambda a, x: x, key=lambda x: x > 3)
              .timed_window(1.0, time=lambda kx: kx[1]))  # (key, latest)
    errors = window.on_error("route").errors.sink_to_list()
    window.gather().sink_to_list()
    for t in [5.0, 7.5, 1.0, 8.0]:
        source.emit(t)
    source.close()
    assert len(errors) == 1 and isinstance(errors[0].exception, LateElementError)
    assert "steps before the window keep state" in str(errors[0].exception)
    assert errors[0].element == "<1 late row(s) of Spark micro-batch 2>"


# One element per micro-batch: Spark's watermark then moves element by
# element, as in-process, so even late elements match.
@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.integers(0, 12), max_size=3).map(lambda xs: [*xs, 12, 0]))  # 0 is late
def test_late_elements_match_the_in_process_run_one_element_per_batch(
        spark: Any, xs: list[int]) -> None:
    expected = run(xs, windows, None)
    assert (0.0, LateElementError) in expected[1]
    assert run(xs, windows, 1) == expected


def test_rows_a_spark_source_loses_to_the_watermark_are_reported(
        spark: Any, tmp_path: Path) -> None:
    # From a Spark source the rows never pass through the driver: what it
    # can say is how many Spark dropped, and when - never nothing.
    # One file per micro-batch: 1.0 comes after a batch that moved the watermark to 7.5.
    for i, part in enumerate([[5.0, 7.5], [8.0], [1.0]]):
        spark.createDataFrame([(t,) for t in part], "t double").coalesce(1).write.parquet(
            str(tmp_path / "in" / f"part={i}"))
    df = (spark.readStream.schema("t double").option("maxFilesPerTrigger", 1)
          .parquet(str(tmp_path / "in" / "*")))
    source = Stream.from_spark(df, checkpoint=str(tmp_path / "ckpt"))
    window = source.timed_window(1.0, time=lambda t: t).on_error("route")
    errors = window.errors.sink_to_list()
    out = window.gather().sink_to_list()
    source.start()
    assert out == [[5.0], [7.5]]  # 8.0's window stays open: the query stopped
    assert [type(e.exception) for e in errors] == [LateElementError]
    assert "came from a Spark source" in str(errors[0].exception)
    # Of the three micro-batches' watermarks, only the last two are kept:
    # a query that runs for months reads one a micro-batch.
    assert sorted(source._dropped_rows.watermarks) == [1, 2]


#: Times by the epoch, then after it, then one that holds its window open.
EPOCH_BATCHES = [[(-25.0,), (-5.0,)], [(3.0,), (7.0,)], [(1000.0,)]]


def epoch_input(spark: Any, tmp_path: Path) -> Any:
    """A stream of ``EPOCH_BATCHES``, one file each, one micro-batch each."""
    for i, part in enumerate(EPOCH_BATCHES):
        spark.createDataFrame(part, "t double").coalesce(1).write.parquet(
            str(tmp_path / "in" / f"part={i}"))
    return (spark.readStream.schema("t double").option("maxFilesPerTrigger", 1)
            .parquet(str(tmp_path / "in" / "*")))


def window_of(df: Any, size: float) -> Any:
    """``to_dataframe()`` of the windows of ``size`` over ``df``: (first, count) each."""
    return (Stream.from_spark(df).timed_window(size, time=lambda t: t)  # one column: its values
            .map(lambda w: (min(w), len(w))).to_dataframe("first double, n long"))


def run_logged(spark: Any, out: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
               ) -> tuple[list[tuple[Any, ...]], list[str]]:
    """The rows ``out``'s query writes, and the drops it logged."""
    from streams_spark.listener import settle

    with caplog.at_level("WARNING", logger="streams"):
        query = (out.writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        settle(spark)
    rows = sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    return rows, [r.getMessage() for r in caplog.records if "Spark dropped" in r.getMessage()]


def test_windows_ending_by_the_epoch_that_spark_drops_are_logged(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Spark's watermark starts at the epoch and never goes below it: in a
    # streaming query it drops the windows that end by then, which
    # in-process are on time. A DataFrame's query has no driver in its path
    # to name the elements: each micro-batch of drops is logged.
    out = window_of(epoch_input(spark, tmp_path), 10)
    rows, warned = run_logged(spark, out, tmp_path, caplog)
    assert rows == [(3.0, 2)]  # in-process also (-25.0, 1) and (-5.0, 1); 1000's stays open
    assert len(warned) == 1
    assert "timed_window" in warned[0] and "never goes below 1970-01-01" in warned[0]


def test_a_query_of_two_windowed_outputs_logs_its_drops_once_naming_both(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Spark counts the drops of a query, not of each window: a user's union
    # of two outputs with windows gets one warning per micro-batch, naming both.
    df = epoch_input(spark, tmp_path)
    rows, warned = run_logged(spark, window_of(df, 10).union(window_of(df, 20)), tmp_path,
                              caplog)
    assert rows == [(3.0, 2), (3.0, 2)]  # [0, 10) and [0, 20); both windows by 1970 lost
    assert len(warned) == 1
    assert warned[0].count("timed_window") == 2
    assert "dropped 4 window group(s)" in warned[0]  # [-30, -20), [-10, 0); [-40, -20), [-20, 0)


def test_a_session_the_watermark_has_just_reached_is_still_open_as_in_process(
        spark: Any, tmp_path: Path) -> None:
    # In-process a session stays open until the watermark is past its end:
    # c at 108 (gap 2, so ending at 110) comes after b moved the watermark to
    # 110, on time. Spark closes a session at the watermark: it dropped c.
    batches = [[("a", 100.0, 0), ("b", 110.0, 1)], [("c", 108.0, 2)], [("d", 130.0, 3)]]

    def sessions(source: Stream[Any]) -> Stream[Any]:
        return (source.session_window(2, time="t", key="k", bounds=True)
                .map(lambda kw: (kw[0], kw[1].start, sum(r.i for r in kw[1].elements))))

    source = Stream()
    expected = sessions(source).sink_to_list()
    written: list[tuple[Any, ...]] = []
    for i, part in enumerate(batches):
        for k, t, n in part:
            source.emit(Row(k=k, t=t, i=n))  # not closed: the query's last session stays open
        # Each batch a run of the query of its own, resumed from its checkpoint.
        spark.createDataFrame(part, "k string, t double, i long").write.json(
            str(tmp_path / "in" / f"b{i}"))
        df = (spark.readStream.schema("k string, t double, i long")
              .json(str(tmp_path / "in" / "*")))
        out = sessions(Stream.from_spark(df)).to_dataframe("k string, start double, ids long")
        (out.writeStream.foreachBatch(lambda b, _: written.extend(map(tuple, b.collect())))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True)
         .start().awaitTermination())
    assert sorted(written) == sorted(expected) == [
        ("a", 100.0, 0), ("b", 110.0, 1), ("c", 108.0, 2)]


def test_a_window_whose_late_stream_is_connected_is_refused_by_to_dataframe(spark: Any) -> None:
    # A DataFrame cannot feed node.late: a late row would fail the query.
    df = spark.createDataFrame([(100.0,), (110.0,), (101.0,)], "t double")
    window = Stream.from_spark(df).timed_window(5, time="t")
    window.late.sink(print)
    with pytest.raises(ValueError, match=r"timed_window\(5\.0\) has its late stream connected.*"
                                         r"Disconnect node.late \(a static DataFrame has no "
                                         r"watermark"):
        window.map(len).to_dataframe("n long")
