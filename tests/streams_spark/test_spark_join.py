"""The interval join of two Spark-resident inputs, as Spark's stream-stream join.

Each case runs on Spark and in-process over the same elements; a DataFrame
has no order, so the pairs compare as multisets. Event times are in order on
each side, so nothing is late in-process and Spark drops nothing.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from streams_spark.listener import settle

pytestmark = pytest.mark.spark

SCHEMA = "key string, t long, id long"
PAIRS = "key string, lt long, lid long, rt long, rid long"
few = settings(max_examples=3, deadline=None, derandomize=True,
               suppress_health_check=list(HealthCheck))

#: One side's rows ``(key, time, id)``, in time order (ids tell equal rows apart).
side = st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 30)), max_size=8).map(
    lambda rows: [(k, t, i) for i, (k, t) in enumerate(sorted(rows, key=lambda r: r[1]))])


def flat(pair: tuple[Any, Any]) -> tuple[Any, ...]:
    (k, lt, lid), (_, rt, rid) = pair
    return (k, lt, lid, rt, rid)


def pipeline(within: float) -> Any:
    """A map before the join on each side, one after it."""
    def build(left: Stream[Any], right: Stream[Any]) -> Stream[Any]:
        pairs = left.map(tuple).join(right.map(tuple), key=0, within=within, time=1)
        return pairs.map(flat)
    return build


def in_process(build: Any, left: list[Any], right: list[Any]) -> list[tuple[Any, ...]]:
    """The graph run in-process on Rows, each side in its order, interleaved by time."""
    from pyspark.sql import Row

    heads: list[Stream[Any]] = [Stream(), Stream()]
    out = build(*heads).sink_to_list()
    tagged = [(r[1], which, Row(key=r[0], t=r[1], id=r[2]))
              for which, rows in enumerate([left, right]) for r in rows]
    for _, which, r in sorted(tagged, key=lambda x: (x[0], x[1])):
        heads[which].emit(r)
    for head in heads:
        head.close()
    return sorted(tuple(v.values()) if isinstance(v, dict) else tuple(v) for v in out)


def frame(build: Any, left_df: Any, right_df: Any, schema: str = PAIRS) -> Any:
    return build(Stream.from_spark(left_df), Stream.from_spark(right_df)).to_dataframe(schema)


def streaming(spark: Any, tmp: Path, name: str, rows: list[Any], schema: str = SCHEMA,
              files: int = 2) -> Any:
    """A streaming DataFrame of ``rows`` in ``files`` files, read one per micro-batch."""
    size = max(1, -(-len(rows) // files))
    for i, part in enumerate([rows[i:i + size] for i in range(0, len(rows), size)]):
        spark.createDataFrame(part, schema).coalesce(1).write.parquet(
            str(tmp / name / f"part={i}"))
    return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
            .parquet(str(tmp / name / "*")))


def written(spark: Any, tmp: Path, out: Any) -> list[tuple[Any, ...]]:
    """Run the streaming ``out`` with Spark's parquet sink; what it wrote."""
    assert out.isStreaming
    query = (out.writeStream.format("parquet").option("path", str(tmp / "out"))
             .option("checkpointLocation", str(tmp / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return sorted(tuple(r) for r in spark.read.parquet(str(tmp / "out")).collect())


@few
@given(left=side, right=side, within=st.integers(0, 6))
def test_a_join_of_static_dataframes_gives_the_in_process_pairs(
        spark: Any, left: list[Any], right: list[Any], within: int) -> None:
    got = frame(pipeline(within), spark.createDataFrame(left, SCHEMA),
                spark.createDataFrame(right, SCHEMA))
    assert sorted(tuple(r) for r in got.collect()) == in_process(pipeline(within), left, right)


@settings(few, max_examples=1)
@given(left=side.filter(bool), right=side.filter(bool), within=st.integers(0, 6))
def test_a_join_of_streaming_dataframes_gives_the_in_process_pairs(
        spark: Any, tmp_path_factory: pytest.TempPathFactory, left: list[Any],
        right: list[Any], within: int) -> None:
    tmp = tmp_path_factory.mktemp("join")
    got = frame(pipeline(within), streaming(spark, tmp, "left", left),
                streaming(spark, tmp, "right", right))
    assert written(spark, tmp, got) == in_process(pipeline(within), left, right)


def test_a_streaming_join_keeps_the_rows_that_equal_times_later_meet(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Equal times in three micro-batches, within=0: Spark forgets held rows
    # after each batch, at its watermark (5 after the first); given lateness
    # itself as its delay, it would forget the rows at 5 before the third
    # batch's rows at 5 meet them. The delay it is given keeps them.
    left = [("a", 5, 0), ("a", 5, 1), ("a", 5, 2)]
    right = [("a", 5, 0), ("a", 5, 1), ("a", 5, 2)]
    got = frame(pipeline(0), streaming(spark, tmp_path, "left", left, files=3),
                streaming(spark, tmp_path, "right", right, files=3))
    expected = in_process(pipeline(0), left, right)
    assert len(expected) == 9
    with caplog.at_level(logging.WARNING, logger="streams"):
        assert written(spark, tmp_path, got) == expected
        settle(spark)
    assert not [r for r in caplog.records if "watermark" in r.getMessage()]  # none late


def _keyed_by_pair(left: Stream[Any], right: Stream[Any]) -> Stream[Any]:
    """Steps before (a filter, a map) and after (a filter, a map); key and time as pairs."""
    views = left.filter(lambda r: r.t != 3).map(lambda r: {"ad": r.key, "at": r.t})
    clicks = right.map(lambda r: (r.t, r.key.upper()))
    pairs = views.join(clicks, key=(lambda v: v["ad"], lambda c: c[1].lower()),
                       within=2, time=("at", 0))
    return (pairs.filter(lambda p: p[1][0] >= p[0]["at"])
            .map(lambda p: {"key": p[0]["ad"], "lt": p[0]["at"], "rt": p[1][0]}))


def test_steps_before_and_after_and_a_key_given_as_a_pair_of_functions(spark: Any) -> None:
    left = [("a", 1, 0), ("a", 3, 1), ("b", 4, 2), ("a", 6, 3)]
    right = [("a", 2, 0), ("b", 3, 1), ("a", 7, 2), ("b", 9, 3)]
    got = frame(_keyed_by_pair, spark.createDataFrame(left, SCHEMA),
                spark.createDataFrame(right, SCHEMA), "key string, lt long, rt long")
    expected = in_process(_keyed_by_pair, left, right)
    assert sorted(tuple(r) for r in got.collect()) == expected
    assert expected == [("a", 1, 2), ("a", 6, 7)]


def _stamped(r: Any) -> tuple[str, datetime]:
    return (r.key, datetime.fromtimestamp(r.t / 1000, tz=UTC))


def test_datetime_times_join_to_the_microsecond_as_in_process(spark: Any) -> None:
    # Milliseconds apart: 1.5 s is within, 1.501 s is not.
    left = [("a", 10_000, 0), ("a", 20_000, 1)]
    right = [("a", 11_500, 0), ("a", 21_501, 1), ("a", 8_500, 2)]

    def build(lt: Stream[Any], rt: Stream[Any]) -> Stream[Any]:
        pairs = lt.map(_stamped).join(rt.map(_stamped), key=0, within="1500ms", time=1)
        return pairs.map(lambda p: (p[0][1], p[1][1]))

    got = frame(build, spark.createDataFrame(left, SCHEMA),
                spark.createDataFrame(right, SCHEMA), "l timestamp, r timestamp")
    expected = in_process(build, sorted(left, key=lambda r: r[1]),
                          sorted(right, key=lambda r: r[1]))
    assert len(expected) == 2
    assert sorted((r.l.timestamp(), r.r.timestamp()) for r in got.collect()) == sorted(
        (a.timestamp(), b.timestamp()) for a, b in expected)


def test_float_times_join_to_the_microsecond_as_in_process(spark: Any) -> None:
    # 1.1 - 0.8 is 0.30000000000000004 as floats; to the microsecond it is
    # 0.3, within 0.3, in-process as on Spark.
    schema = "key string, t double, id long"
    left = [("a", 0.8, 0), ("a", 1.1, 1)]
    right = [("a", 0.5, 0), ("a", 1.1, 1), ("a", 1.4, 2)]
    got = frame(pipeline(0.3), spark.createDataFrame(left, schema),
                spark.createDataFrame(right, schema),
                "key string, lt double, lid long, rt double, rid long")
    expected = in_process(pipeline(0.3), left, right)
    assert ("a", 0.8, 0, 1.1, 1) in expected and len(expected) == 4
    assert sorted(tuple(r) for r in got.collect()) == expected


@pytest.mark.parametrize("kind", ["static", "streaming"])
def test_a_join_of_two_branches_of_one_input(spark: Any, tmp_path: Path, kind: str) -> None:
    rows = [("a", 1, 0), ("b", 2, 1), ("a", 4, 2)]
    df = (spark.createDataFrame(rows, SCHEMA) if kind == "static"
          else streaming(spark, tmp_path, "in", rows))
    source = Stream.from_spark(df)
    pairs = source.map(tuple).join(source.map(tuple), key=0, within=3, time=1)
    out = pairs.map(lambda p: (p[0][2], p[1][2])).to_dataframe("l long, r long")
    got = (sorted(tuple(r) for r in out.collect()) if kind == "static"
           else written(spark, tmp_path, out))
    assert got == [(0, 0), (0, 2), (1, 1), (2, 0), (2, 2)]


def test_keys_equal_in_a_dict_are_one_key_and_the_schema_can_be_inferred(spark: Any) -> None:
    # 1, 1.0 and True are one key in-process (a dict); the right side comes
    # out of time order, which only thins the sample the schema is inferred from.
    left = spark.createDataFrame([(1, 5), (2, 5)], "k long, t long")
    right = spark.createDataFrame([(1.0, 6), (2.0, 1), (3.0, 5)], "k double, t long")
    pairs = Stream.from_spark(left).join(
        Stream.from_spark(right).map(lambda r: (r.k == 1.0 or r.k, r.t)),
        key=(0, 0), within=1, time=(1, 1))
    out = pairs.map(lambda p: (p[0][0], p[1][1])).to_dataframe()
    assert sorted(tuple(r) for r in out.collect()) == [(1, 6)]


def test_tuple_keys_equal_in_a_dict_are_one_key(spark: Any) -> None:
    # (user, 1) and (user, 1.0) are one key in-process; so are a key holding
    # one string twice and one holding two equal strings.
    left = spark.createDataFrame([("u", 1, 5), ("v", 2, 5)], "u string, d long, t long")
    right = spark.createDataFrame([("u", 1.0, 6), ("v", 2.5, 5)], "u string, d double, t long")
    pairs = Stream.from_spark(left).join(
        Stream.from_spark(right), key=(lambda r: (r.u, r.d), lambda r: (r.u, r.d)),
        within=1, time=("t", "t"))
    out = pairs.map(lambda p: {"u": p[0].u, "t": p[1].t}).to_dataframe("u string, t long")
    assert sorted(tuple(r) for r in out.collect()) == [("u", 6)]
    df = spark.createDataFrame([("a", "a", 1)], "x string, y string, t long")
    same = Stream.from_spark(df).join(
        Stream.from_spark(df), key=(lambda r: (r.x, r.x), lambda r: (r.x, r.y)),
        within=1, time=("t", "t"))
    assert same.map(lambda p: {"n": 1}).to_dataframe("n long").count() == 1


def test_a_tuple_key_holding_a_nan_matches_nothing_as_in_process(spark: Any) -> None:
    # In-process a dict finds (nan, 1) only by identity: each row's NaN is a
    # key of its own, so such rows pair with none. Spark matched them by
    # their pickled form, where every NaN is one.
    rows = "k double, t long, id long"
    left = spark.createDataFrame([(float("nan"), 2, 2), (1.0, 0, 0)], rows)
    right = spark.createDataFrame([(float("nan"), 2, 12), (1.0, 0, 10)], rows)

    def build(lhs: Stream[Any], rhs: Stream[Any]) -> Stream[Any]:
        return lhs.join(rhs, key=lambda r: (r.k, 1), within=1, time="t").map(
            lambda p: (p[0].id, p[1].id))

    out = build(Stream.from_spark(left), Stream.from_spark(right)).to_dataframe(
        "lid long, rid long")
    heads: list[Stream[Any]] = [Stream(), Stream()]
    expected = build(*heads).sink_to_list()
    tagged = [(r.t, which, r) for which, df in enumerate((left, right)) for r in df.collect()]
    for _, which, r in sorted(tagged, key=lambda x: (x[0], x[1])):
        heads[which].emit(r)  # collected rows: fresh NaN objects, as Spark's rows give
    for head in heads:
        head.close()
    assert sorted(tuple(r) for r in out.collect()) == sorted(expected) == [(0, 10)]


def test_a_failing_key_function_fails_the_job_naming_the_join(spark: Any) -> None:
    df = spark.createDataFrame([("a", 1, 0)], SCHEMA)
    pairs = Stream.from_spark(df).join(Stream.from_spark(df), key=lambda r: 1 // 0,
                                       within=1, time="t")
    with pytest.raises(Exception, match=r"join.*failed on element.*ZeroDivisionError"):
        pairs.map(lambda p: 1).to_dataframe("n long").collect()
    skipped = Stream.from_spark(df).join(Stream.from_spark(df), key=lambda r: 1 // 0,
                                         within=1, time="t").on_error("skip")
    assert skipped.map(lambda p: 1).to_dataframe("n long").collect() == []


def test_a_time_beyond_sparks_timestamps_fails_the_job_naming_the_join(spark: Any) -> None:
    # In-process takes any number of seconds; Spark's timestamps end in 9999.
    df = spark.createDataFrame([("a", 10 ** 15, 0)], SCHEMA)
    pairs = Stream.from_spark(df).join(Stream.from_spark(df), key="key", within=1, time="t")
    with pytest.raises(Exception, match=r"join.*failed on element.*ValueError: the event "
                                        r"time is beyond Spark's timestamps"):
        pairs.map(lambda p: 1).to_dataframe("n long").collect()


def test_rows_behind_the_watermark_are_joined_as_spark_does_and_logged(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The second micro-batch brings a left row at 99, behind the watermark of
    # 100: in-process it is late and unjoined; Spark joins it with the right
    # rows its state still holds, and a warning names it.
    left = [("a", 100, 0), ("a", 99, 1)]
    right = [("a", 100, 0), ("a", 101, 1)]
    got = frame(pipeline(5), streaming(spark, tmp_path, "left", left),
                streaming(spark, tmp_path, "right", right))
    with caplog.at_level(logging.WARNING, logger="streams"):
        rows = written(spark, tmp_path, got)
        settle(spark)
    assert rows == [("a", 99, 1, 100, 0), ("a", 99, 1, 101, 1), ("a", 100, 0, 100, 0),
                    ("a", 100, 0, 101, 1)]
    warned = [r.getMessage() for r in caplog.records if "behind the join's watermark" in
              r.getMessage()]
    assert len(warned) == 1
    assert "join" in warned[0] and "left side" in warned[0] and "('a', 99, 1)" in warned[0]


def test_rows_late_by_less_than_sparks_millisecond_are_logged(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Spark's watermark is whole milliseconds: a left row 0.4 ms behind the
    # in-process watermark (lateness 0) is within Spark's, and joined; the
    # warning judges it by the in-process watermark, to the microsecond.
    schema = "key string, t double, id long"
    left = [("a", 100.0009, 0), ("a", 100.0005, 1)]
    right = [("a", 100.0009, 0), ("b", 100.0009, 1)]

    def build(lt: Stream[Any], rt: Stream[Any]) -> Stream[Any]:
        return lt.join(rt, key="key", within=1.0, time="t", lateness=0).map(
            lambda p: (p[0].id, p[1].id))

    got = frame(build, streaming(spark, tmp_path, "left", left, schema),
                streaming(spark, tmp_path, "right", right, schema), "l long, r long")
    with caplog.at_level(logging.WARNING, logger="streams"):
        rows = written(spark, tmp_path, got)
        settle(spark)
    assert rows == [(0, 0), (1, 0)]  # in-process only (0, 0): 1 is late
    warned = [r.getMessage() for r in caplog.records if "behind the join's watermark" in
              r.getMessage()]
    assert len(warned) == 1
    assert "left side" in warned[0] and "watermark 100.0009 s (Spark's: " in warned[0]


def test_rows_at_the_epoch_that_sparks_join_drops_are_logged(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Spark's join drops a row at or behind the watermark of the micro-batch
    # before, which stands at the epoch until it has one: times of 0 and
    # less are dropped, where in-process they are joined. Not silently.
    left = [("a", 0, 0), ("a", 5, 1)]
    right = [("a", -1, 0), ("a", 6, 1)]
    got = frame(pipeline(1), streaming(spark, tmp_path, "left", left),
                streaming(spark, tmp_path, "right", right))
    with caplog.at_level(logging.WARNING, logger="streams"):
        rows = written(spark, tmp_path, got)
        settle(spark)
    assert in_process(pipeline(1), left, right) == [("a", 0, 0, -1, 0), ("a", 5, 1, 6, 1)]
    assert rows == [("a", 5, 1, 6, 1)]
    warned = [r.getMessage() for r in caplog.records if "at or before the epoch" in
              r.getMessage()]
    assert len(warned) == 2
    assert any("left side" in w and "('a', 0, 0)" in w for w in warned)
    assert any("right side" in w and "('a', -1, 0)" in w for w in warned)


def test_what_a_spark_join_cannot_run_is_refused_when_built(spark: Any) -> None:
    df = spark.createDataFrame([("a", 1, 0)], SCHEMA)
    a, b = Stream.from_spark(df), Stream.from_spark(df)
    with pytest.raises(ValueError, match=r"only the segments of Stream.from_spark\(\) inputs"):
        Stream().to_spark().join(Stream().to_spark(), key=0, within=1, time=1)
    with pytest.raises(ValueError, match=r"runs in-process.*gather\(\) the Spark side"):
        a.join(Stream(), key=0, within=1, time=1)
    with pytest.raises(ValueError, match=r"join.*accumulate.*keeps state before it"):
        a.scan(max).join(b, key=0, within=1, time=1)
    pairs = Stream.from_spark(df).join(Stream.from_spark(df), key=0, within=1, time=1)
    with pytest.raises(ValueError, match=r"accumulate.*keeps state after join.*no defined order"):
        pairs.scan(max)
    with pytest.raises(ValueError, match=r"gather\(\) cannot follow join.*to_dataframe"):
        pairs.gather()
    with pytest.raises(ValueError, match=r"union.*combines the pairs of join"):
        pairs.union(Stream.from_spark(df))
    union = Stream.from_spark(df).union(Stream.from_spark(df))
    with pytest.raises(ValueError, match=r"joins the output of union.*unionByName"):
        union.join(Stream.from_spark(df), key=0, within=1, time=1)
    one = Stream.from_spark(df)
    with pytest.raises(ValueError, match=r"gather\(\) cannot follow join"):
        one.join(one.map(tuple), key=0, within=1, time=1).gather()
    late = Stream.from_spark(df).join(Stream.from_spark(df), key=0, within=1, time=1)
    late.late.sink(print)
    with pytest.raises(ValueError, match=r"late stream connected.*Disconnect node.late"):
        late.to_dataframe("n long")
    with pytest.raises(TypeError, match=r"lookup\(\) cannot run in a Spark segment"):
        Stream.from_spark(df).lookup(Stream.from_spark(df), key=0)
