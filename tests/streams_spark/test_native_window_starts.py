"""A static DataFrame's windows are grouped by start, sliding ones by pane: Python's windows."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from tests.streams_spark.spark_plans import check_windows

pytestmark = pytest.mark.spark

COLUMNS = "key string, n long, ms long"


def seconds(r: Any) -> float:
    return r.ms / 1000


def summary(rows: list[Any]) -> tuple[Any, ...]:
    return (min(r.ms for r in rows), max(r.ms for r in rows), len(rows), sum(r.n for r in rows))


def keyed_summary(key_rows: tuple[Any, list[Any]]) -> tuple[Any, ...]:
    return (key_rows[0], *summary(key_rows[1]))


def top_key(rows: list[Any]) -> tuple[Any, ...]:
    counts = collections.Counter(r.key for r in rows)
    top = max(counts.values())
    return (min(r.ms for r in rows), min(k for k, c in counts.items() if c == top), top)


def physical_plan(frame: Any) -> str:
    return str(frame._jdf.queryExecution().executedPlan().toString())


#: (size, slide): a slide dividing the size, one that does not, a fraction of a second.
SHAPES = [(10, 2), (10, 4), (2.5, 0.5), (7, 3)]


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-9, 9),
                               st.integers(-25_000, 25_000)), min_size=1, max_size=30),
       shape=st.sampled_from(SHAPES), how=st.sampled_from(["plain", "keyed", "counter"]))
def test_sliding_windows_by_pane_are_pythons_windows(spark: Any, rows: list[Any],
                                                     shape: tuple[float, float], how: str
                                                     ) -> None:
    rows = sorted(rows, key=lambda r: r[2])  # in time order: none late in-process
    size, slide = shape

    def build(s: Stream[Any]) -> Stream[Any]:
        if how == "keyed":
            return s.timed_window(size, slide=slide, time=seconds, key="key").map(
                keyed_summary)
        return s.timed_window(size, slide=slide, time=seconds).map(
            top_key if how == "counter" else summary)

    schema = {"plain": "first long, last long, count long, total long",
              "keyed": "key string, first long, last long, count long, total long",
              "counter": "first long, key string, count long"}[how]
    # Every element in each window its time belongs to, as in-process, with
    # no row copied per window: the panes' partial results are.
    check_windows(spark, build, schema, rows=rows, columns=COLUMNS)
    out = build(Stream.from_spark(spark.createDataFrame(rows, COLUMNS))).to_dataframe(schema)
    plan = physical_plan(out)
    assert "Expand" not in plan and "Generate explode" in plan, plan


def test_tumbling_windows_group_by_start_and_streams_keep_sparks_window(spark: Any,
                                                                        tmp_path: Any) -> None:
    rows = [("a", 1, -1_000), ("b", 2, 3_000), ("a", 3, 12_000)]
    df = spark.createDataFrame(rows, COLUMNS)
    tumbling = Stream.from_spark(df).timed_window(10, time=seconds).map(summary).to_dataframe(
        "first long, last long, count long, total long")
    # window() is Spark's struct of two timestamps, made per row: not here.
    assert "precisetimestampconversion" not in physical_plan(tumbling)
    assert sorted(tuple(r) for r in tumbling.collect()) == [
        (-1_000, -1_000, 1, 1), (3_000, 3_000, 1, 2), (12_000, 12_000, 1, 3)]
    df.write.parquet(str(tmp_path / "in"))
    stream = spark.readStream.schema(df.schema).parquet(str(tmp_path / "in"))
    sliding = (Stream.from_spark(stream).timed_window(10, slide=5, time=seconds).map(summary)
               .to_dataframe("first long, last long, count long, total long"))
    logical = sliding._jdf.queryExecution().logical().toString()
    assert "explode" not in logical and "precisetimestampconversion" in logical


def test_a_failing_sliding_window_is_named_by_its_own_bounds(spark: Any) -> None:
    # min() meets the None in the windows holding 9 s (starting at 0, 4 and
    # 8 s): the message names one by its start and end, as Spark's window()
    # would have.
    rows = [("a", 1, 1_000), ("a", None, 9_000), ("a", 2, 13_000)]
    df = spark.createDataFrame(rows, COLUMNS)

    def low(rows: list[Any]) -> tuple[Any]:
        return (min(r.n for r in rows),)

    out = (Stream.from_spark(df).timed_window(10, slide=4, time=seconds).map(low)
           .to_dataframe("low long"))
    with pytest.raises(Exception, match=r'map\(low\) failed on element '
                       r'\{"start":"1970-01-01T00:00:0[048].000Z","end":"1970-01-01T00:00:1['
                       r'048].000Z"\}: TypeError: .<. not supported'):
        out.collect()
