"""Keyed session windows of a table cut from each key's rows in time order, as Python's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Row

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from tests.streams_spark.spark_plans import check_or_fail_alike, in_process, python_passes

pytestmark = pytest.mark.spark

SCHEMA = "kind int, key string, n long, ms long"


def seconds(r: Any) -> float:
    return r.ms / 1000


def keyed(kw: tuple[Any, Any]) -> tuple[Any, ...]:
    key, w = kw
    return (key, w.start, w.end, len(w.elements), min(r.n for r in w.elements),
            max(r.n for r in w.elements))


def unkeyed(w: Any) -> tuple[Any, ...]:
    return (w.start, w.end, len(w.elements), sum(r.n for r in w.elements))


#: Times on a 500 ms grid against gaps of 1.5 s and 1 s: rows exactly a gap
#: apart (one session), a grid step more (two), and rows at one time.
ROWS = st.lists(st.tuples(
    st.sampled_from([1, 2]), st.sampled_from(["a", "b", None]),
    st.one_of(st.none(), st.integers(-50, 50)),
    st.integers(0, 40).map(lambda i: i * 500)), min_size=1, max_size=30)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(ROWS, st.sampled_from([1.5, 1.0]))
def test_any_rows_give_python_sessions_or_python_failures(spark: Any, rows: list[Any],
                                                          gap: float) -> None:
    rows = sorted(rows, key=lambda r: r[3])  # in time order: in-process, none is late

    def build(s: Stream[Any]) -> Stream[Any]:
        return (s.filter(lambda r: r.kind == 2)
                .session_window(gap, time=seconds, key="key", bounds=True).map(keyed))

    check_or_fail_alike(spark, build, "key string, start double, end double, count long, "
                        "low long, high long", rows=rows, columns=SCHEMA)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(ROWS)
def test_unkeyed_sessions_are_python_s(spark: Any, rows: list[Any]) -> None:
    rows = sorted(((k, key, n or 0, ms) for k, key, n, ms in rows), key=lambda r: r[3])
    check_or_fail_alike(
        spark, lambda s: s.session_window(1.5, time=seconds, bounds=True).map(unkeyed),
        "start double, end double, count long, total long", rows=rows, columns=SCHEMA)


def _grouped_by_session_window(frame: Any) -> bool:
    """Whether ``frame`` groups by Spark's ``session_window()`` (not the checks' message)."""
    return "AS session_window#" in frame._jdf.queryExecution().analyzed().toString()


def test_a_tables_sessions_are_numbered_by_key_in_time_order(spark: Any) -> None:
    df = spark.createDataFrame([(2, "a", 1, 0), (2, "a", 2, 1500), (2, "a", 3, 3001)], SCHEMA)
    out = (Stream.from_spark(df).session_window(1.5, time=seconds, key="key", bounds=True)
           .map(keyed).to_dataframe("key string, start double, end double, count long, "
                                    "low long, high long"))
    assert python_passes(out) == 0
    assert not _grouped_by_session_window(out)
    assert "Window [lag(" in out._jdf.queryExecution().executedPlan().toString()
    # 0 and 1.5 are a gap apart (one session); 3.001 is more than a gap after 1.5.
    assert sorted(tuple(r) for r in out.collect()) == [
        ("a", 0.0, 3.0, 2, 1, 2), ("a", 3.001, 4.501, 1, 3, 3)]


def test_unkeyed_sessions_keep_session_window(spark: Any) -> None:
    # All rows are one key: a window function would hold them at once.
    df = spark.createDataFrame([(2, "a", 1, 0)], SCHEMA)
    out = (Stream.from_spark(df).session_window(1.5, time=seconds, bounds=True).map(unkeyed)
           .to_dataframe("start double, end double, count long, total long"))
    assert python_passes(out) == 0 and _grouped_by_session_window(out)
    assert [tuple(r) for r in out.collect()] == [(0.0, 1.5, 1, 1)]


def test_a_streams_sessions_keep_session_window(spark: Any, tmp_path: Path) -> None:
    # Spark runs no window function over a stream; its watermark closes sessions.
    spark.createDataFrame([(2, "a", 1, 0)], SCHEMA).write.parquet(str(tmp_path / "in"))
    df = spark.readStream.schema(SCHEMA).parquet(str(tmp_path / "in"))
    out = (Stream.from_spark(df).session_window(1.5, time=seconds, key="key", bounds=True)
           .map(keyed).to_dataframe("key string, start double, end double, count long, "
                                    "low long, high long"))
    assert out.isStreaming and python_passes(out) == 0
    assert _grouped_by_session_window(out)
    assert "lag(" not in out._jdf.queryExecution().analyzed().toString()


# -- the same sessions, their function run in Python ---------------------------------------

def keyed_in_python(kw: tuple[Any, Any]) -> tuple[Any, ...]:
    key, w = kw
    values = {r.n for r in w.elements if r.n is not None}  # a set: not traced, run in Python
    return (key, w.start, w.end, len(w.elements), len(values))


def copied(r: Any) -> Any:
    return Row(**r.asDict())  # a new element: it travels pickled, by span


def _in_python(gap: float, copy: bool = False) -> Any:
    return lambda s: ((s.filter(lambda r: r.kind == 2).map(copied) if copy
                       else s.filter(lambda r: r.kind == 2))
                      .session_window(gap, time=seconds, key="key", bounds=True)
                      .map(keyed_in_python))


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(ROWS, st.sampled_from([1.5, 1.0]), st.booleans())
def test_sessions_whose_function_runs_in_python_are_python_s(spark: Any, rows: list[Any],
                                                             gap: float, copy: bool) -> None:
    # The table's rows go to the window by column, one row each; elements
    # a step made go pickled, a key's within one gap as one span.
    rows = sorted(rows, key=lambda r: r[3])
    df = spark.createDataFrame(rows, SCHEMA)
    out = _in_python(gap, copy)(Stream.from_spark(df)).to_dataframe(
        "key string, start double, end double, count long, distinct long")
    assert python_passes(out) > 0 and not _grouped_by_session_window(out)
    expected = in_process(df.collect(), _in_python(gap, copy))
    assert sorted((tuple(r) for r in out.collect()), key=repr) == sorted(expected, key=repr)


def test_spans_of_tasks_that_overlap_in_time_make_python_s_sessions(spark: Any) -> None:
    # Each task packs a key's elements within one gap of each other as a
    # span. The first task's span (0-9 s) holds the second's two spans
    # (3.5 s and 6.5 s, more than a gap apart): one session, as in-process,
    # since each comes within a gap of the latest end before it.
    first = [(2, "a", n, n * 1000) for n in range(10)]
    second = [(2, "a", 20, 3500), (2, "a", 21, 6500), (2, "b", 22, 5000)]
    tasks = spark.sparkContext.parallelize([first, second], 2).flatMap(lambda rows: rows)
    df = spark.createDataFrame(tasks, SCHEMA)
    assert df.rdd.glom().map(len).collect() == [10, 3]  # a task each
    # Elements a step made: the table's own rows would go one row each.
    out = _in_python(1.5, copy=True)(Stream.from_spark(df)).to_dataframe(
        "key string, start double, end double, count long, distinct long")
    plan = out._jdf.queryExecution().analyzed().toString()
    # Sessions cut from spans: the latest end of the rows before each row.
    assert "coalesce(u#" in plan and "unboundedpreceding$(), -1)" in plan
    assert sorted(tuple(r) for r in out.collect()) == [
        ("a", 0.0, 10.5, 12, 12), ("b", 5.0, 6.5, 1, 1)]
    assert sorted(in_process(sorted(df.collect(), key=lambda r: r.ms),
                             _in_python(1.5, copy=True))) == [
        ("a", 0.0, 10.5, 12, 12), ("b", 5.0, 6.5, 1, 1)]
