"""Event-time windows and their functions run as Spark aggregates, with Python's results."""

from __future__ import annotations

import functools
import re
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from tests.streams_spark.spark_plans import (
    check_or_fail_alike,
    check_windows,
    in_process,
    python_passes,
    written,
)

pytestmark = pytest.mark.spark

SCHEMA = "kind int, key string, n long, x double, ms long"
#: Rows in time order (``ms``: milliseconds), so in-process none is late.
ROWS = [
    (2, "a", 5, 0.5, 1_000),
    (1, "b", 7, 1.5, 1_500),
    (2, "a", 3, 2.5, 4_200),
    (2, "b", 9, -1.0, 9_999),
    (2, "a", 1, 0.0, 10_000),
    (2, "c", 4, 3.0, 12_000),
    (1, None, 8, 2.0, 15_000),
    (2, "b", 6, 1.0, 31_000),
]
BID = 2


def seconds(r: Any) -> float:
    return r.ms / 1000


def is_bid(r: Any) -> bool:
    return r.kind == BID  # type: ignore[no-any-return]


def rank(r: Any) -> tuple[Any, Any]:
    return (-r.n, r.ms)


def highest(rows: list[Any]) -> tuple[Any, Any, Any]:
    best = min(rows, key=rank)
    return (best.ms, best.key, best.n)


def span(rows: list[Any]) -> tuple[Any, Any, int, Any]:
    return (min(r.ms for r in rows), max(r.ms for r in rows), len(rows),
            sum(r.n * 2 for r in rows))


def per_key(key_rows: tuple[Any, list[Any]]) -> tuple[Any, Any, int]:
    key, rows = key_rows
    return (key, min(r.ms for r in rows), len(rows))


#: A module of functions, as a user's window function calls another module's.
helpers = types.ModuleType("window_helpers")
exec("def count_of(key_rows):\n    return (key_rows[0], len(key_rows[1]))\n",
     helpers.__dict__)


def session_count(key_rows: tuple[Any, list[Any]]) -> tuple[Any, ...]:
    return (min(r.ms for r in key_rows[1]), *helpers.count_of(key_rows))


#: ``check(spark, build, schema[, rows=, native=])``: ``build``'s windows on Spark
#: equal in-process, aggregated in the JVM if ``native``.
check = functools.partial(check_windows, rows=ROWS, columns=SCHEMA)


# -- the same windows -----------------------------------------------------------------

@pytest.mark.parametrize(("build", "schema"), [
    (lambda s: s.filter(is_bid).timed_window(10, time=seconds).map(highest),
     "ms long, key string, n long"),
    (lambda s: s.timed_window(10, slide=5, time=seconds).map(span),
     "first long, last long, count long, twice long"),
    (lambda s: s.timed_window(10, time=seconds, key="key").map(per_key),
     "key string, first long, count long"),
    (lambda s: s.session_window(4, time=seconds, key=lambda r: r.key).map(per_key),
     "key string, first long, count long"),
    (lambda s: s.session_window(4.5, time=lambda r: r.ms / 1000, key="kind").map(
        lambda kr: (kr[0], len(kr[1]), max(r.key for r in kr[1]))),
     "kind int, count long, top string"),
    (lambda s: s.timed_window(6, time=lambda r: r.ms // 1000).map(len), "count long"),
    (lambda s: s.session_window(3, time=seconds, key="key").map(session_count),
     "first long, key string, count long"),
    (lambda s: s.filter(is_bid).timed_window(20, time=seconds).map(
        lambda rows: min(rows, key=lambda r: (r.n, r.ms)).key), "key string"),
])
def test_windows_aggregate_as_python_computes_them(spark: Any, build: Any, schema: str
                                                   ) -> None:
    rows = [r for r in ROWS if r[1] is not None] if "top" in schema else ROWS
    assert check(spark, build, schema, rows=rows)


def bounded(w: Any) -> tuple[float, float, int]:
    return (w.start, w.end, len(w.elements))


@pytest.mark.parametrize(("build", "schema"), [
    (lambda s: s.timed_window(10, time=seconds, bounds=True).map(bounded),
     "start double, end double, count long"),
    (lambda s: s.timed_window(10, slide=5, time=seconds, bounds=True).map(bounded),
     "start double, end double, count long"),
    # 6 * 0.7 is 4.199999999999999 as floats: the bounds are microseconds, 4.2.
    (lambda s: s.timed_window(0.7, time=seconds, key="key", bounds=True).map(
        lambda kw: (kw[0], *bounded(kw[1]))), "key string, start double, end double, n long"),
    (lambda s: s.session_window(4, time=seconds, key=lambda r: r.key, bounds=True).map(
        lambda kw: (kw[0], kw[1].start, kw[1].end, max(r.n for r in kw[1].elements))),
     "key string, start double, end double, top long"),
    # Microseconds as seconds: 1000001 / 1e6 is 1000000.9999999999 us, taken as 1000001.
    (lambda s: s.session_window(4, time=lambda r: (r.ms * 1000 + 1) / 1e6, key="key",
                                bounds=True).map(lambda kw: (kw[0], *bounded(kw[1]))),
     "key string, start double, end double, n long"),
    # Times with no exact microsecond: a session starts at its first one's nearest.
    (lambda s: s.session_window(0.5, time=lambda r: r.ms / 3000, key="kind", bounds=True).map(
        lambda kw: (kw[0], *bounded(kw[1]))), "kind int, start double, end double, n long"),
])
def test_a_windows_bounds_are_columns_of_the_aggregate(spark: Any, build: Any, schema: str
                                                       ) -> None:
    got = check(spark, build, schema)
    assert got, "no window"


def test_a_function_of_a_windows_bounds_beyond_aggregates_runs_in_python(spark: Any) -> None:
    check(spark, lambda s: s.session_window(0.5, time=lambda r: r.ms / 3000, key="kind",
                                            bounds=True).map(
        lambda kw: (kw[0], kw[1].start, kw[1].end, sorted(r.n for r in kw[1].elements)[0])),
        "kind int, start double, end double, least long", native=False)


def test_a_time_column_checked_before_the_window_may_be_a_key_item(spark: Any) -> None:
    # ms is nullable, but a row reaching the window passed seconds(), which
    # fails on a None: so rank()'s second item is never None there.
    df = spark.createDataFrame(ROWS, SCHEMA)
    assert df.schema["ms"].nullable
    check(spark, lambda s: s.timed_window(10, time=seconds).map(highest),
          "ms long, key string, n long")


@pytest.mark.parametrize(("func", "schema"), [
    (lambda rows: (min(r.x for r in rows),), "v double"),  # NaN: Python's min needs order
    (lambda rows: (print(rows),), "v long"),  # a call outside the namespace
    (lambda rows: (sorted(r.n for r in rows)[0],), "v long"),
    (lambda rows: (min(r.n for r in rows if r.n > 2),), "v long"),  # a branch on each element
    (lambda rows: (rows[0].n,), "v long"),  # by position: a window has no order on Spark
    (lambda rows: (len([r.n for r in rows]),), "v long"),  # a loop outside the aggregates
    (lambda rows: (min(r.n * len(rows) for r in rows),), "v long"),  # the window's in each
    (lambda rows: (min(r.n + max(q.n for q in rows) for r in rows),), "v long"),  # nested
    (lambda rows: (sum(r.n for r in rows if r.key is not None),), "v long"),  # identity
])
def test_window_functions_beyond_aggregates_run_in_python(spark: Any, func: Any, schema: str
                                                          ) -> None:
    check(spark, lambda s: s.filter(is_bid).timed_window(10, time=seconds).map(func), schema,
          rows=[r for r in ROWS if r[0] == BID], native=False)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(
    st.sampled_from([1, 2]), st.sampled_from(["a", "b", None]),
    st.one_of(st.none(), st.integers(-50, 50)), st.just(0.0),
    st.integers(0, 40_000)), max_size=25))
def test_any_rows_give_python_windows_or_python_failures(spark: Any, rows: list[Any]) -> None:
    rows = sorted(rows, key=lambda r: r[4]) or ROWS[:1]  # in time order: none late

    def build(s: Stream[Any]) -> Stream[Any]:
        return (s.filter(is_bid).timed_window(10, slide=5, time=seconds, key="key")
                .map(lambda kr: (kr[0], len(kr[1]), min(r.n for r in kr[1]),
                                 max(r.n for r in kr[1]))))

    schema = "key string, count long, low long, high long"
    check_or_fail_alike(spark, build, schema, rows=rows, columns=SCHEMA)


# -- failures where Python raises -----------------------------------------------------------

def test_a_none_in_a_windows_min_fails_naming_the_node_and_window(spark: Any) -> None:
    rows = [(2, "a", 5, 0.0, 1_000), (2, "a", None, 0.0, 2_000)]
    df = spark.createDataFrame(rows, SCHEMA)

    def low(rows: list[Any]) -> tuple[Any]:
        return (min(r.n for r in rows),)

    out = Stream.from_spark(df).timed_window(10, time=seconds).map(low).to_dataframe(
        "low long")
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=(r'map\(low\) failed on element \{"start":.*\}: '
                                         r"TypeError: '<' not supported between instances "
                                         r"of 'NoneType' and 'int'")):
        out.collect()
    with pytest.raises(TypeError, match="'<' not supported"):
        in_process(df.collect(), lambda s: s.timed_window(10, time=seconds).map(low))
    # One None alone is no comparison: min() gives it back, in both.
    check(spark, lambda s: s.timed_window(10, time=seconds).map(low), "low long",
          rows=rows[1:])


def test_an_element_without_a_time_fails_naming_the_window_node(spark: Any) -> None:
    df = spark.createDataFrame([(2, "a", 5, 0.0, None)], SCHEMA)
    out = Stream.from_spark(df).timed_window(10, time=seconds).map(len).to_dataframe(
        "n long")
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=(r"timed_window\(10.0\) failed on element "
                                         r'\{"ms":null\}: TypeError: unsupported '
                                         r"operand type\(s\) for /: 'NoneType' and 'int'")):
        out.collect()


@pytest.mark.parametrize(("x", "error"), [
    (float("nan"), "ValueError: an event time must be a finite number of seconds, got nan"),
    (float("-inf"), "ValueError: an event time must be a finite number of seconds, got -inf"),
    (float("inf"), "ValueError: an event time must be a finite number of seconds, got inf"),
    (None, "TypeError: an event time must be a number of seconds or a datetime, got None"),
])
def test_a_time_that_is_not_a_finite_number_fails_as_in_process(spark: Any, x: Any,
                                                               error: str) -> None:
    df = spark.createDataFrame([(2, "a", 5, 1.0, 0), (2, "a", 5, x, 0)], SCHEMA)
    out = Stream.from_spark(df).timed_window(10, time="x").map(len).to_dataframe("n long")
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=r"timed_window\(10.0\) failed on element .*" + error):
        out.collect()
    with pytest.raises(Exception, match=error.split(": ")[1]):
        in_process(df.collect(), lambda s: s.timed_window(10, time="x").map(len))


def test_a_time_beyond_sparks_timestamps_fails_saying_so(spark: Any) -> None:
    # In-process takes any float as seconds; Spark's timestamps end in 9999.
    df = spark.createDataFrame([(2, "a", 5, 1.0, 0), (2, "a", 5, 1e15, 0)], SCHEMA)
    out = Stream.from_spark(df).timed_window(10, time="x").map(len).to_dataframe("n long")
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=(r"timed_window\(10.0\) failed on element .*1.0E15.*"
                                         r"beyond Spark's timestamps \(years 1 to 9999\)")):
        out.collect()
    assert in_process(df.collect(), lambda s: s.timed_window(10, time="x").map(len)) == [1, 1]


def test_a_time_beyond_sparks_timestamps_fails_saying_so_in_python_too(spark: Any) -> None:
    # A window function that runs in Python: the routing names the time, where
    # Spark's timestamp_seconds() failed with an overflow naming nothing.
    df = spark.createDataFrame([(2, "a", 5, 1.0, 0), (2, "a", 5, 1e15, 0)], SCHEMA)
    out = (Stream.from_spark(df).timed_window(10, time="x", key="key")
           .map(lambda kr: (sorted(r.n for r in kr[1])[0],)).to_dataframe("n long"))
    assert python_passes(out) > 0
    with pytest.raises(Exception, match=(r"timed_window\(10.0\) failed on element "
                                         r".*x=1000000000000000\.0.*"
                                         r"beyond Spark's timestamps \(years 1 to 9999\)")):
        out.collect()


def test_the_time_is_computed_once_with_no_not_null_filter(spark: Any) -> None:
    df = spark.createDataFrame(ROWS, SCHEMA)
    out = (Stream.from_spark(df).filter(is_bid).timed_window(10, time=seconds).map(len)
           .to_dataframe("n long"))
    plan = out._jdf.queryExecution().optimizedPlan().toString()
    # The filters' condition alone filters; the checked time is projected once.
    # The one not-null test is the kind's, which Spark infers from kind = 2.
    assert plan.count("rint(") == 1
    assert [c.split("#")[0] for c in re.findall(r"isnotnull\(([^)]*)\)", plan)] == ["kind"]


def test_an_unkeyed_window_of_a_table_plans_as_one_would_write_it(spark: Any) -> None:
    df = spark.createDataFrame(ROWS, SCHEMA)
    out = (Stream.from_spark(df).filter(is_bid).timed_window(10, time=seconds).map(highest)
           .to_dataframe("ms long, key string, n long"))
    analyzed = out._jdf.queryExecution().analyzed().toString()
    # Grouped by its window alone; no watermark on a table (Spark would drop it).
    assert "__k" not in analyzed and "EventTimeWatermark" not in analyzed
    # One raise_error names the element for every check of a row; a long time
    # divided by a constant is within Spark's timestamps, unchecked.
    assert analyzed.count("raise_error") == 1 and analyzed.count("to_json") == 1
    # highest() reads n, which its key holds negated: n is not stored twice.
    assert "k0" in analyzed and "f_ms" not in analyzed and "f_n" not in analyzed


@pytest.mark.parametrize(("divisor", "checked"), [(1_000, True), (1_000_000, False)])
def test_a_time_known_within_sparks_timestamps_is_not_checked_against_them(
        spark: Any, divisor: int, checked: bool) -> None:
    # A long within 2 ** 53 (checked) by 10 ** 6 is within years 1 to 9999; by 10 ** 3 not.
    df = spark.createDataFrame(ROWS, SCHEMA)
    build = lambda s: s.timed_window(10, time=lambda r: r.ms / divisor).map(len)
    out = build(Stream.from_spark(df)).to_dataframe("n long")
    plan = out._jdf.queryExecution().optimizedPlan().toString()  # messages folded to text
    assert python_passes(out) == 0 and "integer beyond 2**53" in plan
    assert ("beyond Spark's timestamps" in plan) == checked
    assert sorted(r.n for r in out.collect()) == sorted(in_process(df.collect(), build))


def test_the_first_step_whose_check_fails_is_named(spark: Any) -> None:
    # No time (the window's check) and no n (the function's): the window is named.
    build = lambda s: s.timed_window(10, time=seconds).map(highest)
    for row, node in [((2, "a", None, 0.0, None), r"timed_window\(10.0\)"),
                      ((2, "a", None, 0.0, 1_000), r"map\(highest\)")]:
        df = spark.createDataFrame([ROWS[0], row], SCHEMA)
        out = build(Stream.from_spark(df)).to_dataframe("ms long, key string, n long")
        assert python_passes(out) == 0
        with pytest.raises(Exception, match=node + " failed on element .*TypeError"):
            out.collect()
        with pytest.raises(TypeError):
            in_process(df.collect(), build)


def test_rows_a_filter_drops_are_not_checked_as_python_never_routes_them(spark: Any) -> None:
    rows = [(1, "p", None, 0.0, None), *[r for r in ROWS if r[0] == BID]]
    check(spark, lambda s: s.filter(is_bid).timed_window(10, time=seconds).map(highest),
          "ms long, key string, n long", rows=rows)


def test_an_integer_beyond_2_53_divided_fails_rather_than_round_twice(spark: Any) -> None:
    big = 2 ** 53 + 1  # Python: big / 10 exactly rounded; as a double, rounded twice
    df = spark.createDataFrame([(2, "a", big, 0.0, 0), (2, "a", 10, 0.0, 0)], SCHEMA)
    out = Stream.from_spark(df).map(lambda r: (r.n / 10,)).to_dataframe("v double")
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=r"ValueError: an integer beyond 2\*\*53 divided by 10"):
        out.collect()
    small = Stream.from_spark(df.where("n = 10")).map(lambda r: (r.n / 4,))
    assert [tuple(r) for r in small.to_dataframe("v double").collect()] == [(2.5,)]


# -- a stream ------------------------------------------------------------------------------

def test_a_streaming_source_aggregates_under_its_watermark(spark: Any, tmp_path: Path
                                                         ) -> None:
    spark.createDataFrame(ROWS, SCHEMA).coalesce(1).write.parquet(str(tmp_path / "in"))
    df = spark.readStream.schema(SCHEMA).parquet(str(tmp_path / "in"))
    out = (Stream.from_spark(df).filter(is_bid).timed_window(10, time=seconds)
           .map(highest).to_dataframe("ms long, key string, n long"))
    assert out.isStreaming and python_passes(out) == 0
    rows = written(spark, out, tmp_path)
    expected = in_process(spark.createDataFrame(ROWS, SCHEMA).collect(),
                          lambda s: s.filter(is_bid).timed_window(10, time=seconds)
                          .map(highest))
    # Append mode writes a window once the watermark passes its end: the
    # last window stays open (in-process, close() flushes it).
    assert rows == sorted(expected)[:len(rows)] and len(rows) == len(expected) - 1
