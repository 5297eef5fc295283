"""The shape of Spark-resident plans: what crosses to Python, and how often."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from streams_spark.codec import row_class
from tests.streams_spark.spark_plans import python_passes

pytestmark = pytest.mark.spark

ROWS = [("a", 1, 0.5), ("b", 2, 1.5), ("a", 3, 2.5)]


def _frame(spark: Any) -> Any:
    return spark.createDataFrame(ROWS, "key string, n long, x double")


def test_a_segment_without_steps_is_a_projection_in_spark(spark: Any) -> None:
    out = Stream.from_spark(_frame(spark)).to_dataframe("x double, key string")
    assert python_passes(out) == 0
    assert sorted(tuple(r) for r in out.collect()) == [(0.5, "a"), (1.5, "b"), (2.5, "a")]
    assert out.schema.names == ["x", "key"]


def test_a_segment_without_steps_converts_in_python_when_types_differ(spark: Any) -> None:
    # n is a long; as a double each value is converted as any output is.
    out = Stream.from_spark(_frame(spark)).to_dataframe("n double, key string")
    assert python_passes(out) == 1
    assert sorted(tuple(r) for r in out.collect()) == [(1.0, "a"), (2.0, "b"), (3.0, "a")]
    # Columns by position when the schema does not name the input's.
    by_position = Stream.from_spark(_frame(spark)).to_dataframe("k string, m long, y double")
    assert python_passes(by_position) == 1
    assert sorted(tuple(r) for r in by_position.collect()) == sorted(ROWS)


@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(-5, 5), st.floats(-1, 1)),
                min_size=1, max_size=20),
       st.sampled_from(["x double, key string", "n long", "key string, n long, x double"]))
def test_input_rows_leave_by_name_as_in_process(spark: Any, data: list[Any],
                                                schema: str) -> None:
    df = spark.createDataFrame(data, "key string, n long, x double")
    out = Stream.from_spark(df).filter(lambda r: r.n % 2 == 0).to_dataframe(schema)
    names = [c.split()[0] for c in schema.split(", ")]
    expected = sorted(tuple(r[n] for n in names) for r in df.collect() if r.n % 2 == 0)
    assert sorted(tuple(r) for r in out.collect()) == expected


def _first_and_count(rows: list[Any]) -> tuple[int, int]:
    # sorted() keeps this window function in Python: min() and len() alone
    # would run as Spark aggregates (see test_native_windows.py).
    return sorted(r.n for r in rows)[0], len(rows)


def test_the_steps_after_a_window_run_in_the_pass_that_opens_it(spark: Any) -> None:
    df = spark.createDataFrame([(i, i * 0.5) for i in range(40)], "n long, t double")
    out = (Stream.from_spark(df).filter(lambda r: r.n != 3)
           .timed_window(4, time=lambda r: r.t).map(_first_and_count)
           .to_dataframe("first long, count long"))
    # The filter and key/time routing, then the windows with the map after them.
    assert python_passes(out) == 2
    expected = [(0, 7), (8, 8), (16, 8), (24, 8), (32, 8)]
    assert sorted(tuple(r) for r in out.collect()) == expected


def test_input_rows_unpickle_as_their_own_class() -> None:
    cls = row_class(("key", "n"))
    rows = [tuple.__new__(cls, ("a", i)) for i in range(3)]
    back = pickle.loads(pickle.dumps(rows, protocol=5))
    assert [type(r) for r in back] == [cls] * 3
    assert back == rows and [r.n for r in back] == [0, 1, 2]
