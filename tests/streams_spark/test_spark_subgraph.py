"""Whole subgraphs in a Spark-resident segment: branches, and unions of Spark sources.

Each shape runs on static and on streaming DataFrames, compared with the
same graph run in-process. A DataFrame has no order, so outputs compare as
multisets; the keyed totals only grow within a key (values are >= 0), so the
multiset pins them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream

pytestmark = pytest.mark.spark

Outputs = dict[str, tuple[Stream[Any], str]]
data = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 9)), min_size=1, max_size=12)
numbers = st.lists(st.integers(0, 30), min_size=1, max_size=8)
few = settings(max_examples=2, deadline=None, derandomize=True,
               suppress_health_check=list(HealthCheck))


def branches(source: Stream[Any]) -> Outputs:
    """One stateless prefix, three outputs: its own, a keyed scan below it, a filter."""
    pre = source.map(lambda r: (r[0], r[1] * 2))
    totals = (pre.scan(lambda t, kv: t + kv[1], start=0, key=0)
              .map(lambda kt: {"key": kt[0], "total": kt[1]}))
    big = pre.filter(lambda kv: kv[1] > 6).map(lambda kv: {"key": kv[0], "v": kv[1] + 1})
    return {"pre": (pre, "key string, v long"), "totals": (totals, "key string, total long"),
            "big": (big, "key string, v long")}


def joined(left: Stream[Any], right: Stream[Any]) -> Outputs:
    """A keyed scan on one input, a filter on the other, then their union and a map."""
    totals = left.map(lambda r: (r[0], r[1])).scan(lambda t, kv: t + kv[1], start=0, key=0)
    evens = right.filter(lambda n: n % 2 == 0).map(lambda n: ("n", n))
    union = totals.union(evens).map(lambda kv: {"key": kv[0], "v": 10 * kv[1]})
    return {"union": (union, "key string, v long")}


def in_process(build: Callable[..., Outputs], *inputs: list[Any]) -> dict[str, list[Any]]:
    heads: list[Stream[Any]] = [Stream() for _ in inputs]
    outs = {name: node.sink_to_list() for name, (node, _) in build(*heads).items()}
    for head, rows in zip(heads, inputs, strict=True):
        for r in rows:
            head.emit(r)
        head.close()
    return outs


def as_set(values: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(tuple(v.values()) if isinstance(v, dict) else tuple(v) for v in values)


def frames(build: Callable[..., Outputs], *dfs: Any) -> dict[str, Any]:
    return {name: node.to_dataframe(schema)
            for name, (node, schema) in build(*[Stream.from_spark(df) for df in dfs]).items()}


def streaming(spark: Any, tmp: Path, name: str, rows: list[Any], schema: str) -> Any:
    """A streaming DataFrame of ``rows``, in two files read one per micro-batch."""
    half = max(1, len(rows) // 2)
    for i, part in enumerate([rows[:half], rows[half:]]):
        if part:
            spark.createDataFrame(part, schema).coalesce(1).write.parquet(
                str(tmp / name / f"part={i}"))
    return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
            .parquet(str(tmp / name / "*")))


def written(spark: Any, tmp: Path, name: str, frame: Any) -> list[tuple[Any, ...]]:
    """Run the streaming ``frame`` with Spark's parquet sink; what it wrote."""
    assert frame.isStreaming
    query = (frame.writeStream.format("parquet").option("path", str(tmp / "out" / name))
             .option("checkpointLocation", str(tmp / "ckpt" / name))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return sorted(tuple(r) for r in spark.read.parquet(str(tmp / "out" / name)).collect())


@few
@given(rows=data)
def test_branches_of_a_static_dataframe_each_give_the_in_process_result(
        spark: Any, rows: list[tuple[str, int]]) -> None:
    got = frames(branches, spark.createDataFrame(rows, "key string, value long"))
    expected = in_process(branches, rows)
    assert {name: sorted(tuple(r) for r in df.collect()) for name, df in got.items()} == {
        name: as_set(values) for name, values in expected.items()}


@settings(few, max_examples=1)
@given(rows=data)
def test_branches_of_a_streaming_dataframe_each_give_the_in_process_result(
        spark: Any, tmp_path_factory: pytest.TempPathFactory,
        rows: list[tuple[str, int]]) -> None:
    tmp = tmp_path_factory.mktemp("branches")
    got = frames(branches, streaming(spark, tmp, "in", rows, "key string, value long"))
    expected = in_process(branches, rows)
    assert {name: written(spark, tmp, name, df) for name, df in got.items()} == {
        name: as_set(values) for name, values in expected.items()}


def test_a_branch_may_end_in_gather_next_to_a_dataframe(spark: Any) -> None:
    rows = [("a", 1), ("b", 4), ("a", 5)]
    source = Stream.from_spark(spark.createDataFrame(rows, "key string, value long"))
    pre = source.map(lambda r: r.value * 2)
    frame = pre.map(lambda v: v + 1).to_dataframe("v long")
    gathered = pre.scan(lambda a, b: a + b).gather().sink_to_list()
    source.start()
    assert sorted(gathered) == [2, 10, 20]  # the partial sums, whatever Spark's order
    assert sorted(r.v for r in frame.collect()) == [3, 9, 11]


@few
@given(left=data, right=numbers)
def test_a_union_of_static_dataframes_of_different_schemas_gives_the_in_process_result(
        spark: Any, left: list[tuple[str, int]], right: list[int]) -> None:
    got = frames(joined, spark.createDataFrame(left, "key string, value long"),
                 spark.createDataFrame([(n,) for n in right], "n long"))
    expected = in_process(joined, left, right)
    assert sorted(tuple(r) for r in got["union"].collect()) == as_set(expected["union"])


@settings(few, max_examples=1)
@given(left=data, right=numbers)
def test_a_union_of_streaming_dataframes_gives_the_in_process_result(
        spark: Any, tmp_path_factory: pytest.TempPathFactory,
        left: list[tuple[str, int]], right: list[int]) -> None:
    tmp = tmp_path_factory.mktemp("union")
    got = frames(joined, streaming(spark, tmp, "left", left, "key string, value long"),
                 streaming(spark, tmp, "right", [(n,) for n in right], "n long"))
    expected = in_process(joined, left, right)
    assert written(spark, tmp, "union", got["union"]) == as_set(expected["union"])


def test_the_schema_of_a_union_is_inferred_from_every_input(spark: Any) -> None:
    left = Stream.from_spark(spark.createDataFrame([(1,)], "n long"))
    right = Stream.from_spark(spark.createDataFrame([("x",)], "s string")).map(len)
    out = left.union(right).map(lambda n: n * 7).to_dataframe()
    assert sorted(r.value for r in out.collect()) == [7, 7]


def test_a_stateful_step_feeding_two_outputs_is_refused_when_built(spark: Any) -> None:
    df = spark.createDataFrame([("a", 1)], "key string, value long")
    total = Stream.from_spark(df).scan(lambda a, b: b)
    total.map(str).to_dataframe("value string")
    with pytest.raises(ValueError, match=r"second output below accumulate.*keeps state.*"
                                         r"from_spark\(\) for each branch"):
        total.to_dataframe("key string, value long")
    keyed = Stream.from_spark(df).map(tuple).scan(max, key=0)
    keyed.map(str)
    with pytest.raises(ValueError, match=r"map\(str\): a second output below accumulate"):
        keyed.map(str)
    windowed = Stream.from_spark(df).map(tuple).timed_window(5, time=lambda r: r[1])
    windowed.gather()
    with pytest.raises(ValueError, match="timed_window"):
        windowed.map(len)


def test_a_stateful_step_after_a_union_is_refused_when_built(spark: Any) -> None:
    a = Stream.from_spark(spark.createDataFrame([(1,)], "n long"))
    b = Stream.from_spark(spark.createDataFrame([(2,)], "n long"))
    union = a.union(b).map(abs)
    with pytest.raises(ValueError, match=r"accumulate.*keeps state after union.*unionByName"):
        union.scan(max)
    with pytest.raises(ValueError, match=r"gather\(\) cannot end a Spark segment with several"):
        union.gather()
    with pytest.raises(ValueError, match="one union per path"):
        union.union(Stream.from_spark(spark.createDataFrame([(3,)], "n long")))


def test_unions_and_branches_the_segment_cannot_run_are_refused_when_built(
        spark: Any, tmp_path: Path) -> None:
    head = Stream().to_spark()
    head.map(abs)
    with pytest.raises(ValueError, match=r"one linear chain, so gather\(\) first"):
        head.map(str)  # driver-fed segments stay one chain
    with pytest.raises(ValueError, match=r"only the segments of Stream.from_spark\(\) inputs"):
        Stream().to_spark().union(Stream().to_spark())
    static = Stream.from_spark(spark.createDataFrame([(1,)], "n long"))
    with pytest.raises(ValueError, match=r"runs in-process.*gather\(\) the Spark side"):
        static.union(Stream())
    with pytest.raises(TypeError, match=r"zip\(\) cannot run in a Spark segment.*arrival order"):
        static.zip(Stream.from_spark(spark.createDataFrame([(2,)], "n long")))
    spark.createDataFrame([(1,)], "n long").write.parquet(str(tmp_path / "in"))
    stream = Stream.from_spark(spark.readStream.schema("n long").parquet(str(tmp_path / "in")))
    with pytest.raises(ValueError, match="union of streaming and static DataFrames"):
        Stream.from_spark(spark.createDataFrame([(1,)], "n long")).union(stream).to_dataframe(
            "n long")


def closing_steps(source: Stream[Any]) -> Outputs:
    """Steps that let out what they hold when the stream ends: the end of a static input."""
    def clicks(n: int, r: Any) -> tuple[int, list[Any]]:
        return n + 1, []

    expiring = source.stateful_map(clicks, start=0, key=0, ttl=10, time=1,
                                   on_expire=lambda user, n: [{"key": user, "n": n}])
    pairs = source.map(lambda r: r[1]).partition(2).map(lambda p: {"n": len(p), "t": p[0]})
    return {"expiring": (expiring, "key string, n long"), "pairs": (pairs, "n long, t double")}


def in_order_window(source: Stream[Any]) -> Stream[Any]:
    window = source.timed_window(5, time=1)
    window.late.sink(lambda r: None)  # a window with its late stream runs in element order
    return window.map(lambda w: ",".join(r[0] for r in w))


def test_what_steps_hold_at_the_end_of_a_static_dataframe_comes_out(spark: Any) -> None:
    # A static DataFrame is a whole stream: its end closes the steps, as
    # close() does in-process (a ttl's on_expire of the keys still held, a
    # partition's last group, the last window of an in-order chain).
    rows = [("a", 0.0), ("b", 3.0), ("a", 5.0), ("b", 12.0), ("a", 30.0)]
    df = spark.createDataFrame(rows, "key string, t double").coalesce(1)
    expected = in_process(closing_steps, rows)
    got = {name: frame.collect() for name, frame in frames(closing_steps, df).items()}
    for name, values in expected.items():
        assert as_set(got[name]) == as_set(values), name
    assert ("a", 1) in as_set(expected["expiring"])  # a's state, let out at the end
    source = Stream.from_spark(df)
    windows = in_order_window(source).gather().sink_to_list()
    source.start()
    local = Stream()
    expected_windows = in_order_window(local).sink_to_list()
    for row in rows:
        local.emit(row)
    local.close()
    assert windows == expected_windows == ["a,b", "a", "b", "a"]
