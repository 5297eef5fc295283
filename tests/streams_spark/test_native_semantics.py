"""Functions whose Spark columns would differ from Python run in Python, or fail as it does.

A value's text (``"%s" % r.n``), a field a ``Row`` answers itself
(``r.count``), a constant Spark would read as a variable (``"${x}"``), a
window's time or key function that is not plain arithmetic, and a check
before a step that keeps no row.
"""

from __future__ import annotations

from typing import Any

import pytest

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from tests.streams_spark.spark_plans import check_windows, python_passes
from tests.streams_spark.test_native_functions import SCHEMA, check

pytestmark = pytest.mark.spark

ROWS = [("a", 5, 0.5, True, 1), ("b", 7, 1.5, False, 2), (None, None, None, None, None)]


@pytest.mark.parametrize("func", [
    lambda r: "id-%s" % r.n,  # noqa: UP031 - what is tested
    lambda r: f"id-{r.n}",
    lambda r: f"{r.x!r}",
    lambda r: "{}".format(r.k),  # noqa: UP032
])
def test_a_value_s_text_is_python_s(spark: Any, func: Any) -> None:
    check(spark, lambda s: s.map(func), "v string", ROWS, native=False)


def test_a_filter_on_a_value_s_text_keeps_python_s_rows(spark: Any) -> None:
    got = check(spark, lambda s: s.filter(lambda r: "%s" % r.k == "a"),  # noqa: UP031
                SCHEMA, ROWS, native=False)
    assert [r[0] for r in got] == ["a"]


def test_a_field_a_row_answers_itself_is_read_as_python_reads_it(spark: Any) -> None:
    df = spark.createDataFrame([(0, 5), (1, 7)], "index long, count long")
    out = Stream.from_spark(df).filter(lambda r: r.index == 0).to_dataframe(
        "index long, count long")
    assert python_passes(out) == 1  # r.index is the Row's method in Python: no row is kept
    assert out.collect() == []
    ok = Stream.from_spark(df).filter(lambda r: r["index"] == 0).to_dataframe(
        "index long, count long")
    assert python_passes(ok) == 0 and [tuple(r) for r in ok.collect()] == [(0, 5)]


@pytest.mark.parametrize("text", ["${spark.app.name}", "${env:HOME}", "$${x}", "a$", "{b}"])
def test_a_constant_with_a_dollar_brace_reaches_spark_as_written(spark: Any, text: str) -> None:
    rows = [(text, 1, 0.0, True, 1), ("streams", 2, 0.0, True, 2), ("/root", 3, 0.0, True, 3)]
    got = check(spark, lambda s: s.filter(lambda r: r.k == text), SCHEMA, rows)
    assert [r[0] for r in got] == [text]
    written = check(spark, lambda s: s.map(lambda r: (r.n, text)), "n long, t string", rows)
    assert {r[1] for r in written} == {text}


@pytest.mark.parametrize("last", [
    lambda s: s.filter(lambda r: False),
    lambda s: s.remove(lambda r: True),
])
def test_a_check_before_a_step_that_keeps_no_row_still_fails(spark: Any, last: Any) -> None:
    df = spark.createDataFrame([("a", 1, 0.0, True, 1), ("b", None, 0.0, True, 2)], SCHEMA)
    out = last(Stream.from_spark(df).filter(lambda r: r.n > 0)).to_dataframe(SCHEMA)
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=r"'>' not supported between instances of 'NoneType'"):
        out.collect()


WINDOW_COLUMNS = "kind int, key string, n long, ms long"
WINDOW_ROWS = [(2, "a", 5, 1_000), (1, "b", 7, 1_500), (2, None, 3, 4_200), (1, "a", 9, 12_000)]


def per_key(key_rows: tuple[Any, list[Any]]) -> tuple[Any, int]:
    return (key_rows[0], len(key_rows[1]))


@pytest.mark.parametrize(("key", "schema"), [
    (lambda r: str(r.n), "key string, n long"),
    (lambda r: r.key if r.key is not None else "none", "key string, n long"),
    (lambda r: r.kind if isinstance(r.kind, int) else -1, "key long, n long"),
])
def test_a_window_key_beyond_field_arithmetic_is_python_s(spark: Any, key: Any,
                                                          schema: str) -> None:
    check_windows(spark, lambda s: s.timed_window(10, time=lambda r: r.ms / 1000, key=key)
                  .map(per_key), schema, rows=WINDOW_ROWS, columns=WINDOW_COLUMNS, native=False)


def test_a_window_time_beyond_field_arithmetic_is_python_s(spark: Any) -> None:
    rows = [(2, "c", 1, None), *WINDOW_ROWS]  # in time order: its time is 0.0
    check_windows(spark, lambda s: s.timed_window(
        10, time=lambda r: r.ms / 1000 if r.ms is not None else 0.0).map(len), "n long",
        rows=rows, columns=WINDOW_COLUMNS, native=False)
