"""Segments that live in Spark: from_spark(df) ... to_dataframe(schema), no driver funnel."""

from __future__ import annotations

import operator
import pickle
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from streams.operators._checks import key_bytes

pytestmark = pytest.mark.spark


def keyed_total(s: Stream[Any]) -> Stream[Any]:
    """map -> filter -> keyed scan, over Rows (key, value)."""
    return (s.map(lambda r: (r.key, r["value"] * 2)).filter(lambda kv: kv[1] != 4)
            .scan(lambda total, kv: total + kv[1], start=0, key=0)
            .map(lambda kt: {"key": kt[0], "total": kt[1]}))


def in_process(rows: list[Any], pipeline: Any) -> list[Any]:
    source: Stream[Any] = Stream()
    out = pipeline(source).sink_to_list()
    for r in rows:
        source.emit(r)
    source.close()
    return out


def as_rows(spark: Any, data: list[tuple[str, int]]) -> Any:
    return spark.createDataFrame(data, "key string, value long")


def test_rows_reach_functions_as_rows_and_pluck_works(spark: Any) -> None:
    df = as_rows(spark, [("a", 1), ("b", 2)])
    out = (Stream.from_spark(df).map(lambda r: (r.key, r["value"], r[1]))
           .to_dataframe("key string, v long, w long"))
    assert sorted(tuple(r) for r in out.collect()) == [("a", 1, 1), ("b", 2, 2)]
    plucked = Stream.from_spark(df).pluck("value").to_dataframe("value long")
    assert sorted(r.value for r in plucked.collect()) == [1, 2]


@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 9)), min_size=1,
                max_size=20))
def test_a_static_dataframe_gives_the_in_process_result(spark: Any,
                                                        data: list[tuple[str, int]]) -> None:
    df = as_rows(spark, data)
    got = keyed_total(Stream.from_spark(df)).to_dataframe("key string, total long")
    expected = in_process(df.collect(), keyed_total)
    # A DataFrame has no order; within a key, totals only grow, so the
    # multiset of rows pins the result.
    assert sorted(tuple(r) for r in got.collect()) == sorted(
        (d["key"], d["total"]) for d in expected)


def test_a_streaming_dataframe_is_written_by_spark_with_no_driver_in_between(
        spark: Any, tmp_path: Path) -> None:
    data = [("a", 1), ("b", 5), ("a", 3), ("c", 2), ("b", 1)]
    as_rows(spark, data[:3]).coalesce(1).write.parquet(str(tmp_path / "in" / "part=0"))
    as_rows(spark, data[3:]).coalesce(1).write.parquet(str(tmp_path / "in" / "part=1"))
    df = (spark.readStream.schema("key string, value long")
          .option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in" / "*")))
    out = keyed_total(Stream.from_spark(df)).to_dataframe("key string, total long")
    assert out.isStreaming
    query = (out.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    written = spark.read.parquet(str(tmp_path / "out")).collect()
    static = as_rows(spark, data)
    expected = in_process(static.collect(), keyed_total)
    assert sorted(tuple(r) for r in written) == sorted(
        (d["key"], d["total"]) for d in expected)


def test_elements_become_rows_by_name_position_or_as_one_value(spark: Any) -> None:
    df = spark.createDataFrame([(1,), (2,)], "n long")
    by_tuple = Stream.from_spark(df).map(lambda n: (n, str(n))).to_dataframe("a long, b string")
    assert sorted(tuple(r) for r in by_tuple.collect()) == [(1, "1"), (2, "2")]
    scalar = Stream.from_spark(df).map(operator.neg).to_dataframe("value long")
    assert sorted(r.value for r in scalar.collect()) == [-2, -1]
    by_name = Stream.from_spark(df).map(lambda n: {"b": n, "a": 0}).to_dataframe("a long, b long")
    assert sorted(tuple(r) for r in by_name.collect()) == [(0, 1), (0, 2)]


def test_without_a_schema_a_static_dataframe_is_inferred(spark: Any) -> None:
    df = as_rows(spark, [("a", 1), ("b", 2)])
    out = Stream.from_spark(df).map(lambda r: {"k": r.key, "double": 2 * r.value}).to_dataframe()
    assert sorted(out.schema.names) == ["double", "k"]
    assert sorted((r.k, r.double) for r in out.collect()) == [("a", 2), ("b", 4)]
    scalars = Stream.from_spark(df).pluck("key").to_dataframe()
    assert scalars.schema.names == ["value"]


def test_a_streaming_dataframe_without_a_schema_is_refused_saying_what_to_give(
        spark: Any, tmp_path: Path) -> None:
    as_rows(spark, [("a", 1)]).write.parquet(str(tmp_path / "in"))
    df = spark.readStream.schema("key string, value long").parquet(str(tmp_path / "in"))
    with pytest.raises(ValueError, match=r"give the output schema.*to_dataframe\('"):
        Stream.from_spark(df).map(str).to_dataframe()


def test_a_failing_function_fails_the_job_naming_node_and_element(spark: Any) -> None:
    df = spark.createDataFrame([(1,), (0,), (2,)], "n long")
    out = Stream.from_spark(df).map(lambda n: 10 // n).to_dataframe("value long")
    with pytest.raises(Exception, match=r"map\(<lambda>\) failed on element 0: ZeroDivision"):
        out.collect()
    skipped = (Stream.from_spark(df).map(lambda n: 10 // n).on_error("skip")
               .to_dataframe("value long"))
    assert sorted(r.value for r in skipped.collect()) == [5, 10]


def test_a_value_of_the_wrong_shape_or_type_is_named(spark: Any) -> None:
    df = spark.createDataFrame([(1,)], "n long")
    with pytest.raises(Exception, match=r"has 3 values for the 2 columns"):
        Stream.from_spark(df).map(lambda n: (n, n, n)).to_dataframe("a long, b long").collect()
    with pytest.raises(Exception, match=r"column 'a' \(int64\) cannot hold"):
        Stream.from_spark(df).map(lambda n: ("x",)).to_dataframe("a long").collect()


def test_misuse_is_refused_when_the_graph_is_built(spark: Any) -> None:
    df = spark.createDataFrame([(1,)], "n long")
    with pytest.raises(ValueError, match="from_spark"):
        Stream().map(abs).to_dataframe("n long")
    routed = Stream.from_spark(df).map(abs).on_error("route")
    with pytest.raises(ValueError, match="routes its errors"):
        routed.to_dataframe("n long")
    with pytest.raises(TypeError, match="schema must be a DDL string"):
        Stream.from_spark(df).to_dataframe(3)
    with pytest.raises(TypeError, match="from_spark\\(\\) takes a Spark DataFrame"):
        Stream.from_spark([1, 2])


@pytest.mark.parametrize("build", [
    lambda s: s.timed_window(1), lambda s: s.timed_window(1, slide=0.5),
    lambda s: s.map(abs).timed_window(1, key=0)], ids=["tumbling", "sliding", "keyed"])
def test_a_processing_time_window_of_a_from_spark_segment_is_refused_when_built(
        spark: Any, build: Any) -> None:
    # It failed with an AttributeError of the segment's entry, and left the node closed.
    df = spark.createDataFrame([(1,)], "n long")
    with pytest.raises(ValueError, match=r"timed_window\(1.*processing time.*give it time="):
        build(Stream.from_spark(df))


def test_a_static_dataframe_delivered_to_python_needs_no_checkpoint(spark: Any) -> None:
    df = as_rows(spark, [("a", 1), ("b", 2), ("a", 3)])
    source = Stream.from_spark(df)
    out = keyed_total(source).gather().sink_to_list()
    source.start()
    assert sorted((d["key"], d["total"]) for d in out) == [("a", 2), ("a", 8)]  # b: 4 filtered
    assert source._closed  # a backfill ends: windows and partitions flushed


def test_a_stateful_step_after_an_event_time_window_is_refused_when_built() -> None:
    Stream().to_spark().timed_window(10, time=lambda x: x).map(len)  # element-wise: fine
    for build in (lambda w: w.scan(lambda a, b: a + b), lambda w: w.timed_window(5, time=0),
                  lambda w: w.map(lambda x: (len(x), x)).scan(max, key=0)):
        window = Stream().to_spark().timed_window(10, time=lambda x: x)
        with pytest.raises(TypeError, match=r"cannot follow the event-time window.*gather\(\)"):
            build(window)


def test_combining_a_segment_with_a_local_stream_is_refused_naming_the_operator() -> None:
    with pytest.raises(TypeError, match=r"combine_latest\(\) cannot run in a Spark segment"):
        Stream().to_spark().map(abs).combine_latest(Stream())


def test_from_spark_delivers_every_result_of_a_batch_before_raising(
        spark: Any, tmp_path: Path) -> None:
    from streams import NodeError

    spark.createDataFrame([(5,), (0,), (2,)], "n long").coalesce(1).write.parquet(
        str(tmp_path / "in"))
    df = spark.readStream.schema("n long").parquet(str(tmp_path / "in"))
    source = Stream.from_spark(df, checkpoint=str(tmp_path / "ckpt"))
    out = source.map(lambda n: 10 // n).gather().sink_to_list()
    with pytest.raises(NodeError) as info:  # itself, not Spark's query exception
        source.start()
    assert isinstance(info.value.__cause__, ZeroDivisionError) and info.value.element == 0
    assert sorted(out) == [2, 5]
    assert source.query.name.startswith("streams_from_spark")


def _window_counts(kind: str) -> Any:
    """A keyed event-time window over Rows (key, value = seconds), as counts per window."""
    def pipeline(s: Stream[Any]) -> Stream[Any]:
        pairs = s.map(lambda r: (r.key, r.value))
        windows = (pairs.timed_window(6, slide=2, time=1, key=0) if kind == "sliding"
                   else pairs.session_window(3, time=1, key=0))
        return windows.map(lambda kw: {"key": kw[0], "first": min(t for _, t in kw[1]),
                                       "n": len(kw[1])})
    return pipeline


@pytest.mark.parametrize("kind", ["sliding", "session"])
@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 30)), min_size=1,
                     max_size=25))
def test_keyed_windows_run_as_spark_windows_with_the_in_process_result(
        spark: Any, kind: str, data: list[tuple[str, int]]) -> None:
    # A static DataFrame is one micro-batch: Spark's watermark never passes
    # an element, so the in-process run, in time order, has nothing late.
    data = sorted(data, key=lambda d: d[1])
    df = as_rows(spark, data)
    got = _window_counts(kind)(Stream.from_spark(df)).to_dataframe(
        "key string, first long, n long")
    expected = in_process(df.collect(), _window_counts(kind))
    assert sorted(tuple(r) for r in got.collect()) == sorted(
        (d["key"], d["first"], d["n"]) for d in expected)


def _stamped(r: Any) -> dict[str, Any]:
    return {"at": datetime.fromtimestamp(r.value, tz=UTC), "key": r.key}


def test_timestamps_become_a_timestamp_column(spark: Any) -> None:
    df = as_rows(spark, [("a", 0), ("b", 90)])
    out = Stream.from_spark(df).map(_stamped).to_dataframe("at timestamp, key string")
    got = sorted((r.key, r.at.replace(tzinfo=None)) for r in out.collect())
    # Spark shows the instants in the session's time zone.
    zone = ZoneInfo(spark.conf.get("spark.sql.session.timeZone"))
    expected = [(k, datetime.fromtimestamp(s, tz=UTC).astimezone(zone)
                 .replace(tzinfo=None)) for k, s in [("a", 0), ("b", 90)]]
    assert got == expected


def test_times_are_read_and_written_in_the_session_time_zone(spark: Any) -> None:
    # A row's time is an aware datetime in the session's time zone (as Spark's
    # hour() sees it); written back naive, it is read as a wall time there, as
    # Spark reads a TIMESTAMP literal, so it stays the same instant.
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        df = spark.sql("SELECT 1 AS n, TIMESTAMP '2026-07-01 12:30:00' AS at UNION ALL "
                       "SELECT 2, TIMESTAMP '2026-11-01 01:30:00'")  # the hour twice
        seen = Stream.from_spark(df).map(lambda r: (r.n, r.at.isoformat()))
        assert sorted(map(tuple, seen.to_dataframe("n long, at string").collect())) == [
            (1, "2026-07-01T12:30:00-04:00"), (2, "2026-11-01T01:30:00-04:00")]
        out = Stream.from_spark(df).map(
            lambda r: (r.n, r.at, r.at.replace(tzinfo=None), r.at.hour)).to_dataframe(
            "n long, aware timestamp, naive timestamp, hour int")
        assert out.where("aware = naive").count() == 2
        assert out.join(df, "n").where("naive = at AND hour = hour(at)").count() == 2
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def test_a_schema_is_inferred_from_the_elements_the_query_makes(spark: Any) -> None:
    # collect()'s Rows hold naive times, which an aware one cannot be taken from.
    df = spark.sql("SELECT 1 AS n, TIMESTAMP '1970-01-01 00:01:00 UTC' AS at")
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    out = Stream.from_spark(df).map(
        lambda r: {"n": r.n, "secs": (r.at - epoch).total_seconds()}).to_dataframe()
    assert [tuple(r) for r in out.collect()] == [(1, 60.0)]


def test_a_keyed_query_restarts_from_its_checkpoint_only_with_its_key_buckets(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.errors import StreamingQueryException

    from streams_spark import route_columns

    # "c" hashes to bucket 4 of 16 and of 128: its saved state is met.
    data = [("c", 1), ("a", 5), ("c", 3), ("c", 2), ("a", 1), ("c", 7)]
    assert route_columns.key_bucket(key_bytes("c"), 16) == route_columns.key_bucket(
        key_bytes("c"), 128)

    def run(part: int, buckets: int) -> None:
        as_rows(spark, data[3 * part:3 * part + 3]).coalesce(1).write.mode("overwrite") \
            .parquet(str(tmp_path / "in" / f"part={part}"))
        monkeypatch.setattr(route_columns, "KEY_BUCKETS", buckets)  # read when the graph is planned
        df = spark.readStream.schema("key string, value long").parquet(str(tmp_path / "in/*"))
        out = keyed_total(Stream.from_spark(df)).to_dataframe("key string, total long")
        (out.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start().awaitTermination())

    run(0, buckets=16)
    # Another number of buckets puts most keys in groups whose state is not
    # theirs (they would start again): the first key met is refused.
    with pytest.raises(StreamingQueryException, match=r"holds its keyed state in 16 key "
                                                      r"buckets.*hashes keys into 128"):
        run(1, buckets=128)
    run(1, buckets=16)  # again, with the checkpoint's buckets
    written = spark.read.parquet(str(tmp_path / "out")).collect()
    expected = in_process(as_rows(spark, data).collect(), keyed_total)
    assert sorted(tuple(r) for r in written) == sorted(
        (d["key"], d["total"]) for d in expected)


def test_equal_keys_from_different_partitions_share_one_state(spark: Any) -> None:
    # A dict takes 0.0 and -0.0, 1.0 and 1 as one key: one state in-process.
    # Their pickles differ, and put them in different buckets on Spark.
    rows = [(0.0, 1), (1.0, 10), (-0.0, 2), (1.0, 20)]  # two partitions of two rows
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 2), "x double, i long")

    def totals(source: Stream[Any]) -> Stream[Any]:
        keyed = source.map(lambda r: (r.x if r.i % 20 else int(r.x), r.i))  # 1.0, then 1
        return keyed.scan(lambda total, kv: total + kv[1], start=0, key=0).map(
            lambda kt: kt[1])

    got = sorted(r.v for r in totals(Stream.from_spark(df)).map(lambda t: {"v": t})
                 .to_dataframe("v long").collect())
    assert got == sorted(in_process(df.collect(), totals)) == [1, 3, 10, 30]


def test_a_keyed_checkpoint_of_keys_hashed_by_their_pickles_is_refused() -> None:
    from streams_spark.stages import KEY_HASH, KeyBucketsChanged, _bucket_state

    states = {0: {"a": 1}}
    assert _bucket_state(pickle.dumps((128, states, KEY_HASH)), 128, "scan") == states
    with pytest.raises(KeyBucketsChanged, match=r"scan: .* in buckets of the keys' pickles"):
        _bucket_state(pickle.dumps((128, states)), 128, "scan")  # written before the hash


def test_a_keyed_stage_spreads_over_more_tasks_than_the_old_16_groups(spark: Any) -> None:
    from pyspark.sql import functions as F

    # 64 shuffle partitions, kept as they are (adaptive execution would merge
    # these small ones into one).
    settings = {"spark.sql.shuffle.partitions": "64",
                "spark.sql.adaptive.coalescePartitions.enabled": "false"}
    saved = {k: spark.conf.get(k) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        df = spark.range(2000).selectExpr("concat('k', id % 1000) as key", "id as value")
        out = keyed_total(Stream.from_spark(df)).to_dataframe("key string, total long")
        tasks = out.select(F.spark_partition_id().alias("p")).distinct().count()
    finally:
        for k, v in saved.items():
            spark.conf.set(k, v)
    # 1,000 keys in 128 groups over 64 partitions: most partitions get some.
    assert tasks > 16


def test_a_keyed_query_restarted_with_other_shuffle_partitions_resumes_its_state(
        spark: Any, tmp_path: Path) -> None:
    # Spark keeps a stateful query's shuffle partitions in its checkpoint (its
    # state is partitioned so): a restart under another setting runs with the
    # checkpoint's, and the keyed state carries on.
    data = [("a", 1), ("b", 5), ("a", 3), ("c", 2), ("b", 1), ("a", 7)]
    saved = spark.conf.get("spark.sql.shuffle.partitions")

    def run(part: int, partitions: int) -> None:
        as_rows(spark, data[3 * part:3 * part + 3]).coalesce(1).write.parquet(
            str(tmp_path / "in" / f"part={part}"))
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
        df = spark.readStream.schema("key string, value long").parquet(str(tmp_path / "in/*"))
        out = keyed_total(Stream.from_spark(df)).to_dataframe("key string, total long")
        (out.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start().awaitTermination())

    try:
        run(0, partitions=2)
        run(1, partitions=5)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", saved)
    written = spark.read.parquet(str(tmp_path / "out")).collect()
    expected = in_process(as_rows(spark, data).collect(), keyed_total)
    assert sorted(tuple(r) for r in written) == sorted(
        (d["key"], d["total"]) for d in expected)


def test_a_schema_text_is_parsed_once_and_follows_the_session_timestamp_type(
        spark: Any) -> None:
    from pyspark.sql.types import TimestampNTZType, TimestampType

    from streams_spark.dataframe import _parsed_schema, _schema_json

    first = _parsed_schema("n long, at timestamp", spark)
    first.add("extra", "string")  # a StructType is mutable: the next caller's is its own
    hits = _schema_json.cache_info().hits
    again = _parsed_schema("n long, at timestamp", spark)
    assert _schema_json.cache_info().hits == hits + 1
    assert again.names == ["n", "at"] and isinstance(again["at"].dataType, TimestampType)
    spark.conf.set("spark.sql.timestampType", "TIMESTAMP_NTZ")
    try:
        ntz = _parsed_schema("n long, at timestamp", spark)
        assert isinstance(ntz["at"].dataType, TimestampNTZType)
        df = spark.createDataFrame([(1,)], "n long")
        out = Stream.from_spark(df).map(lambda r: (r.n, datetime(2026, 1, 1))).to_dataframe(
            "n long, at timestamp")
        assert isinstance(out.schema["at"].dataType, TimestampNTZType)
    finally:
        spark.conf.unset("spark.sql.timestampType")
