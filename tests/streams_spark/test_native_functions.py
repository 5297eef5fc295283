"""Simple map and filter functions run as Spark columns, with Python's results."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from streams_spark.native import pure
from tests.streams_spark.spark_plans import python_passes, written

pytestmark = pytest.mark.spark

SCHEMA = "k string, n long, x double, b boolean, i int"
NAN, INF = float("nan"), float("inf")
ROWS = [
    ("a", 1, 0.5, True, 1),
    ("b", -7, -1.5, False, 2),
    ("c", 0, 0.0, True, 3),
    ("a", 2 ** 53 + 1, NAN, False, -4),
    (None, None, None, None, None),
    ("", 3, INF, True, 0),
    ("é", -(2 ** 62), -0.0, False, 7),
]
BID = 2  # a global constant, as a module's constants are


def in_process(rows: list[Any], build: Any) -> list[Any]:
    source = Stream()
    out = build(source).sink_to_list()
    for r in rows:
        source.emit(r)
    return out


def same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN, a zero only to a zero of its sign (as ``repr`` tells)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if a == b == 0.0:
            return math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b and type(a) is type(b))


def check(spark: Any, build: Any, schema: str, rows: list[Any] = ROWS, native: bool = True
          ) -> list[Any]:
    """``build``'s output on Spark equals in-process; it ran in the JVM if ``native``."""
    df = spark.createDataFrame(rows, SCHEMA)
    out = build(Stream.from_spark(df)).to_dataframe(schema)
    assert python_passes(out) == (0 if native else 1), out._jdf.queryExecution().logical()
    got = [tuple(r) for r in out.collect()]
    names = [c.split()[0] for c in schema.split(", ")]
    expected = []
    for v in in_process(df.collect(), build):
        if isinstance(v, dict):
            v = tuple(v.get(n) for n in names)
        elif hasattr(v, "__fields__"):
            v = tuple(v[n] for n in names)
        elif not isinstance(v, tuple):
            v = (v,)
        expected.append(v)
    key = repr
    assert len(got) == len(expected)
    for g, e in zip(sorted(got, key=key), sorted(expected, key=key), strict=True):
        assert all(same(a, b) for a, b in zip(g, e, strict=True)), (g, e)
    return got


# -- which functions qualify --------------------------------------------------------

def test_pure_accepts_field_arithmetic_comparisons_and_branches_only() -> None:
    limit = 10
    assert pure(lambda r: r.kind == BID and r.auction % 123 == 0)
    assert pure(lambda r: (r.a, r.b * 0.9) if r.a > limit else None)
    assert pure(lambda r: {"k": r.k, "n": -r.n})
    refused = [
        lambda r: print(r),  # a call
        lambda r: len(r),  # a builtin
        lambda r: r is None,  # identity: no column form
        lambda r: [v for v in r],  # a comprehension (a loop)
        lambda r: f"{r.k}",  # formatting
        lambda r, s=0: r,  # a second argument
        lambda r: r.k.upper(),  # a method call
        lambda r: Path(r),  # a global object
        len, str.upper, abs,
    ]
    for f in refused:
        assert not pure(f), f
    seen: list[Any] = []
    assert not pure(lambda r: seen)  # a closure over a mutable object

    async def coroutine(r: Any) -> Any:
        return r

    def generator(r: Any) -> Any:
        yield r

    assert not pure(coroutine) and not pure(generator)


# -- the same results -------------------------------------------------------------------

@pytest.mark.parametrize("predicate", [
    lambda r: r.k == "a",
    lambda r: r.n != 3,  # null-safe: a null row passes, as None != 3
    lambda r: r.x == r.x,  # NaN is not itself; None is
    lambda r: r.x != r.x,
    lambda r: r.k == "a" or r.n == 0,
    lambda r: not r.b,  # None is false
    lambda r: r.i in (1, 2, 7),
    lambda r: r.k,  # truth of a string: None and "" are false
    lambda r: r.x,  # truth of a float: NaN is true, 0.0 and -0.0 false
    lambda r: r.n if r.b else r.i,
    lambda r: r.k != None and r.k >= "b",  # noqa: E711 - the comparison Python makes
    lambda r: r.n != None and r.n % 3 == 1,  # noqa: E711 - Python's modulo of negatives
    lambda r: r.n != None and r.n % 7 == 0,  # noqa: E711 - -7 and 0
    lambda r: r.n != None and 0 != r.n % 2,  # noqa: E711, SIM300 - odd; the constant first
    lambda r: r.x != None and r.x > 0.25,  # noqa: E711
    lambda r: r.n != None and r.n > 0.5,  # noqa: E711 - a float constant below 2 ** 53
    lambda r: r.i == BID or r.b == True,  # noqa: E712
    lambda r: r.b != None and r.b > False,  # noqa: E711 - booleans order
])
def test_filters_keep_the_rows_python_keeps(spark: Any, predicate: Any) -> None:
    check(spark, lambda s: s.filter(predicate), SCHEMA)
    check(spark, lambda s: s.remove(predicate), SCHEMA)


@pytest.mark.parametrize(("func", "schema"), [
    (lambda r: (r.k, r.i, r.x), "k string, i int, x double"),
    (lambda r: {"n": r.n, "k": r.k}, "k string, n long, missing long"),
    (lambda r: (r.x * 2, r.x / 4.0, r.x - r.x, -r.x), "a double, b double, c double, d double"),
    (lambda r: (r.i * 2, r.i + 1, -r.i, r.i - 10, r.i % 5, r.i * 0.5),
     "a long, b long, c long, d int, e long, f double"),
    (lambda r: r.n == 1 if r.k == "a" else None, "value boolean"),
    (lambda r: ("big" if r.n > 10 else "small", r.n), "size string, n long"),
    (lambda r: r.i == 3, "value boolean"),
])
def test_maps_write_the_columns_python_writes(spark: Any, func: Any, schema: str) -> None:
    rows = [r for r in ROWS if r[1] is not None]  # Python raises on None (tested below)
    check(spark, lambda s: s.filter(lambda r: r.i != None).map(func), schema,  # noqa: E711
          rows=rows)


#: Constants whose SQL text must read back as the very same value.
CONSTANTS = (-0.0, 1 / 3, -2.5, 5e-324, 1.7976931348623157e308, -(2 ** 63), 2 ** 63 - 1,
             "it's", "a\\b", "é ☃\n", "")


def test_constants_reach_spark_exactly(spark: Any) -> None:
    def func(r: Any) -> Any:
        return (r.i, -0.0, 1 / 3, -2.5, 5e-324, 1.7976931348623157e308, -(2 ** 63),
                2 ** 63 - 1, "it's", "a\\b", "é ☃\n", "")

    types = {float: "double", int: "long", str: "string"}
    names = ", ".join(f"c{n} {types[type(c)]}" for n, c in enumerate(CONSTANTS))
    got = check(spark, lambda s: s.filter(lambda r: r.i != None).map(func),  # noqa: E711
                f"i int, {names}")
    assert all(math.copysign(1, row[1]) == -1 for row in got)  # -0.0 stays negative
    # A quote and a backslash in a comparison.
    for text, keep in (("it's", lambda r: r.k == "it's"), ("a\\b", lambda r: r.k == "a\\b")):
        rows = [(text, *ROWS[0][1:]), ROWS[1]]
        kept = check(spark, lambda s, keep=keep: s.filter(keep), SCHEMA, rows=rows)
        assert [row[0] for row in kept] == [text]


def test_passed_through_columns_are_not_cast(spark: Any) -> None:
    df = spark.createDataFrame(ROWS, SCHEMA)
    out = (Stream.from_spark(df).filter(lambda r: r.i == BID).map(lambda r: (r.n, r.x, r.k))
           .to_dataframe("n long, x double, k string"))
    plan = out._jdf.queryExecution().analyzed().toString()
    project, condition = plan.splitlines()[0], plan.splitlines()[1]
    assert "cast" not in project.lower(), project  # long, double and string as they are
    assert "coalesce" not in condition, condition  # == is never null: no coalesce


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(st.none(), st.integers(-(2 ** 63), 2 ** 63 - 1),
                          st.integers(-500, 500)), max_size=30),
       st.sampled_from([1, 2, 3, 123, 2 ** 62, 2 ** 63 - 1]))
@example([-(2 ** 63), -7, 7, 2 ** 63 - 1, None], 2 ** 63 - 1)
@example([-(2 ** 63), -7, 7, 2 ** 63 - 1, None], 3)
def test_remainders_are_python_s_for_any_signs(spark: Any, ns: list[Any], divisor: int
                                               ) -> None:
    # Python's remainder has the divisor's sign, Java's % the dividend's;
    # Python's quotient is the floor, Java's truncated; near -2 ** 63 too.
    rows = [("a", n, 0.0, True, 1) for n in ns] or ROWS[:1]
    check(spark, lambda s: s.filter(lambda r: r.n != None)  # noqa: E711
          .map(lambda r: (r.n % divisor, r.n // divisor, r.n % divisor == 0)),
          "r long, q long, divides boolean", rows=rows)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(
    st.one_of(st.none(), st.text("abé", max_size=2)),
    st.one_of(st.none(), st.integers(-(2 ** 62), 2 ** 62)),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    st.one_of(st.none(), st.booleans()),
    st.one_of(st.none(), st.integers(-(2 ** 31), 2 ** 31 - 1))), max_size=30))
def test_a_filter_map_pipeline_equals_in_process_on_any_rows(spark: Any, rows: list[Any]
                                                              ) -> None:
    def build(s: Stream[Any]) -> Stream[Any]:
        return (s.filter(lambda r: (r.k != None and r.k >= "b") or r.n == 3 or r.b)  # noqa: E711
                .map(lambda r: (r.k, r.n + 1 if r.n != None else -1,  # noqa: E711
                                r.x * 2 if r.x != None else 0.0, r.x != r.x)))  # noqa: E711
    check(spark, build, "k string, n long, x double, nan boolean", rows=rows or ROWS[:1])


def test_a_function_beyond_columns_still_runs_in_python_after_native_filters(
        spark: Any) -> None:
    def build(s: Stream[Any]) -> Stream[Any]:
        return s.filter(lambda r: r.k != None).map(lambda r: (r.k.upper(), r.n))  # noqa: E711
    check(spark, build, "k string, n long", native=False)
    df = spark.createDataFrame(ROWS, SCHEMA)
    plan = str(build(Stream.from_spark(df)).to_dataframe("k string, n long")
               ._jdf.queryExecution().executedPlan())
    assert plan.index("MapInArrow") < plan.index("Filter")  # the filter runs below Python


def test_a_step_skipping_its_failures_runs_in_python(spark: Any) -> None:
    check(spark, lambda s: s.map(lambda r: (r.k, r.n * 2)).on_error("skip"),
          "k string, n long", native=False)


def test_integer_arithmetic_stays_in_python_without_ansi_mode(spark: Any) -> None:
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:  # Spark would wrap an overflow around; Python's integers grow
        rows = [r for r in ROWS if r[1] is not None]
        check(spark, lambda s: s.map(lambda r: (r.k, r.n * 2)), "k string, n long",
              rows=rows[:3], native=False)
        check(spark, lambda s: s.filter(lambda r: r.n != 0), SCHEMA, rows=rows)
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")


# -- failures where Python raises --------------------------------------------------------

def test_a_null_in_arithmetic_fails_as_python_raises_naming_node_and_element(
        spark: Any) -> None:
    df = spark.createDataFrame([("a", 1, 0.5, True, 1), ("b", None, 1.0, False, 2)], SCHEMA)
    out = Stream.from_spark(df).map(lambda r: (r.k, r.n * 0.5)).to_dataframe(
        "k string, v double")
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=(
            r'map\(<lambda>\) failed on element \{"k":"b","n":null\}: TypeError: '
            r"unsupported operand type\(s\) for \*: 'NoneType' and 'float'")):
        out.collect()
    with pytest.raises(TypeError, match=r"for \*: 'NoneType' and 'float'"):
        in_process(df.collect(), lambda s: s.map(lambda r: (r.k, r.n * 0.5)))


@pytest.mark.parametrize(("func", "op"), [(lambda r: (r.k, r.n * 4), "*"),
                                        (lambda r: (r.k, r.n + -(2 ** 62)), "+"),
                                        (lambda r: (r.k, -r.n), "-")])
def test_an_integer_beyond_64_bits_fails_naming_node_and_element(
        spark: Any, func: Any, op: str) -> None:
    # Python's integer grows; Spark's plain overflow named neither the step
    # nor the element, and told to set spark.sql.ansi.enabled off.
    df = spark.createDataFrame([("a", 1, 0.5, True, 1), ("b", -(2 ** 63), 1.0, False, 2)],
                               SCHEMA)
    out = Stream.from_spark(df).map(func).to_dataframe("k string, v long")
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=(
            r'map\(<lambda>\) failed on element \{"k":"b","n":-9223372036854775808\}: '
            rf"OverflowError: the result of \{op} is beyond Spark's 64-bit integers")):
        out.collect()


def test_a_wide_table_is_read_only_in_the_columns_the_functions_read(
        spark: Any, tmp_path: Path) -> None:
    # The checks name the element by the fields read: naming the whole row
    # made Spark read every column, where the hand-written query reads three.
    wide = spark.createDataFrame(
        [(2, 7, None, "x" * 50, 1.5, 9), (1, 8, 3, "y", 2.5, 9), (2, 9, 4, "z", 3.5, 9)],
        "kind int, a long, n long, text string, y double, other long")
    wide.write.parquet(str(tmp_path / "wide"))
    df = spark.read.parquet(str(tmp_path / "wide"))
    build = lambda s: s.filter(lambda r: r.kind == 1).map(lambda r: (r.a, r.n * 2.0))
    out = build(Stream.from_spark(df)).to_dataframe("a long, v double")
    assert python_passes(out) == 0
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert "ReadSchema: struct<kind:int,a:bigint,n:bigint>" in plan, plan
    assert sorted(tuple(r) for r in out.collect()) == [(8, 6.0)]
    # Without the filter, the row with no n fails: named by the fields read.
    bad = Stream.from_spark(df).map(lambda r: (r.a, r.n * 2.0)).to_dataframe("a long, v double")
    with pytest.raises(Exception, match=(r'map\(<lambda>\) failed on element '
                                         r'\{"a":7,"n":null\}: TypeError')):
        bad.collect()


@pytest.mark.parametrize("row", [
    (-3, 0, True, None), (-(2 ** 63), -7, False, None), (None, None, None, None)])
def test_a_row_of_integers_and_booleans_is_named_as_to_json_names_it(
        spark: Any, row: tuple[Any, ...]) -> None:
    # Such a row's text is a format_string; it must read as to_json's does.
    schema = "`a%s` long, `q\"t` int, `é` boolean, n long"
    df = spark.createDataFrame([row], schema)
    func = lambda r: (r["a%s"], r['q"t'], r["é"], r.n * 2)
    out = Stream.from_spark(df).map(func).to_dataframe("a long, q long, e boolean, v long")
    assert python_passes(out) == 0
    with pytest.raises(Exception) as failed:
        out.collect()
    named = re.search(r"failed on element (\{.*?\}): TypeError", str(failed.value))
    assert named is not None, str(failed.value)
    json_text = df.selectExpr("to_json(struct(*), map('ignoreNullFields', 'false'))").first()[0]
    assert named.group(1) == json_text


def _times(r: Any) -> Any:
    return r.n * r.x


def _half(r: Any) -> Any:
    return 0.5 * r.n


@pytest.mark.parametrize(("func", "row", "names"), [
    (_times, ("b", None, 1.0, False, 2), "'NoneType' and 'float'"),
    (_times, ("b", 3, None, False, 2), "'int' and 'NoneType'"),
    (_times, ("b", None, None, False, 2), "'NoneType' and 'NoneType'"),
    (_half, ("b", None, 1.0, False, 2), "'float' and 'NoneType'"),  # one of them may be None
])
def test_the_type_error_names_the_operand_that_is_none(spark: Any, func: Any, row: Any,
                                                       names: str) -> None:
    df = spark.createDataFrame([("a", 1, 0.5, True, 1), row], SCHEMA)
    out = Stream.from_spark(df).map(func).to_dataframe("v double")
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=r"TypeError: unsupported operand type\(s\) for \*: "
                                        + names):
        out.collect()
    with pytest.raises(TypeError, match=names):
        in_process(df.collect(), lambda s: s.map(func))


@pytest.mark.parametrize(("func", "schema"), [
    (lambda r: -r.n, "v long"),
    (lambda r: -r.x, "v double"),
])
def test_negating_a_null_fails_with_pythons_message(spark: Any, func: Any, schema: str
                                                    ) -> None:
    df = spark.createDataFrame([("a", 1, 0.5, True, 1), ("b", None, None, False, 2)], SCHEMA)
    out = Stream.from_spark(df).map(func).to_dataframe(schema)
    assert python_passes(out) == 0
    message = "TypeError: bad operand type for unary -: 'NoneType'"
    # The element is named by the fields the function reads.
    with pytest.raises(Exception, match=r'failed on element \{"[nx]":null\}: ' + message):
        out.collect()
    with pytest.raises(TypeError, match=message.removeprefix("TypeError: ")):
        in_process(df.collect(), lambda s: s.map(func))


def test_ordering_a_null_and_dividing_by_zero_fail_as_in_python(spark: Any) -> None:
    df = spark.createDataFrame([("a", None, 0.0, True, 1)], SCHEMA)
    order = Stream.from_spark(df).filter(lambda r: r.n < 3).to_dataframe(SCHEMA)
    with pytest.raises(Exception, match=r"'<' not supported between instances of 'NoneType' "
                                        r"and 'int'"):
        order.collect()
    # Written the other way round, Python calls the column's mirrored method;
    # its message still names the operator and the operands as written.
    reflected = Stream.from_spark(df).filter(lambda r: 3 > r.n).to_dataframe(SCHEMA)  # noqa: SIM300
    with pytest.raises(Exception, match=r"'>' not supported between instances of 'int' "
                                        r"and 'NoneType'"):
        reflected.collect()
    with pytest.raises(TypeError, match="'>' not supported between instances of 'int' "
                                        "and 'NoneType'"):
        3 > None  # noqa: B015  (what Python says)
    divide = Stream.from_spark(df).map(lambda r: 1.0 / r.x).to_dataframe("v double")
    with pytest.raises(Exception, match=r"ZeroDivisionError: float division by zero"):
        divide.collect()


def test_later_steps_see_only_the_rows_earlier_filters_keep(spark: Any) -> None:
    # Python never orders the null: the first filter drops it.
    check(spark, lambda s: s.filter(lambda r: r.n != None).filter(  # noqa: E711
        lambda r: r.n > 1), SCHEMA)


def test_a_value_python_computes_and_a_later_step_drops_still_fails(spark: Any) -> None:
    df = spark.createDataFrame([("a", None, 0.5, True, 1)], SCHEMA)
    out = (Stream.from_spark(df).map(lambda r: (r.n * 2, r.k)).map(lambda t: t[1])
           .to_dataframe("k string"))
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=r"unsupported operand type\(s\) for \*"):
        out.collect()


# -- streams ----------------------------------------------------------------------------

def test_a_streaming_source_runs_native_steps_under_spark_checkpoints(
        spark: Any, tmp_path: Path) -> None:
    rows = [r for r in ROWS if r[1] is not None and r[0] is not None]
    spark.createDataFrame(rows, SCHEMA).coalesce(1).write.parquet(str(tmp_path / "in"))
    df = spark.readStream.schema(SCHEMA).parquet(str(tmp_path / "in"))
    out = (Stream.from_spark(df).filter(lambda r: r.k >= "b")
           .map(lambda r: (r.k, r.n * 2)).to_dataframe("k string, n long"))
    assert out.isStreaming and python_passes(out) == 0
    assert written(spark, out, tmp_path) == sorted((k, n * 2) for k, n, *_ in rows if k >= "b")
