"""Values at the edges of what Spark's types hold: they cross exactly, or fail naming the node.

A str with a lone surrogate (not UTF-8) crosses pickled; a float is not
written to an integer column; an integer window sum is exact whatever
Spark's partitions; a lowered output beyond a narrow integer column fails
as the Python path does, naming the step and the element.
"""

from __future__ import annotations

import operator
from typing import Any

import pytest

import streams_spark  # noqa: F401 - registers to_spark(), from_spark(), to_dataframe()
from streams import Stream
from streams_spark.codec import pack, unpack
from tests.streams_spark.spark_plans import in_process, python_passes

pytestmark = pytest.mark.spark

#: Text as ``os.fsdecode`` makes it of bytes that are not UTF-8.
SURROGATES = ["a", "b\udcff", "c", "d"]


def through_spark(values: list[Any], build: Any, **kwargs: Any) -> list[Any]:
    source: Stream[Any] = Stream()
    out = build(source.to_spark(**kwargs)).gather().sink_to_list()
    for x in values:
        source.emit(x)
    source.close()
    return out  # type: ignore[no-any-return]


# -- a str with a lone surrogate ------------------------------------------------------

def test_a_lone_surrogate_is_packed_pickled_alone_and_in_a_tuple() -> None:
    assert unpack(pack(SURROGATES)) == SURROGATES
    pairs = [("\udc80", 1), ("x", 2)]
    assert unpack(pack(pairs)) == pairs


def test_lone_surrogates_cross_to_the_executors(spark: Any) -> None:
    def upper(s: Stream[Any]) -> Stream[Any]:
        return s.map(lambda x: x.upper())

    # Before, "b\udcff" failed the emit and took "a", buffered with it, along.
    assert through_spark(SURROGATES, upper, batch_size=2) == in_process(SURROGATES, upper)


def test_lone_surrogates_cross_back_from_the_executors(spark: Any) -> None:
    def surrogate(s: Stream[Any]) -> Stream[Any]:
        return s.map(lambda x: "a" + chr(0xDC80 + x))

    assert through_spark([0, 1, 2], surrogate) == in_process([0, 1, 2], surrogate) == [
        "a\udc80", "a\udc81", "a\udc82"]


def test_a_lone_surrogate_for_a_string_column_fails_naming_the_node(spark: Any) -> None:
    df = spark.createDataFrame([(1,)], "n long")
    out = Stream.from_spark(df).map(lambda n: chr(0xDC80 + n)).to_dataframe("s string")
    with pytest.raises(Exception, match=r"OutputError: to_dataframe\(\): column 's' \(string\) "
                                        r"cannot hold what map\(<lambda>\) returned: .*surrogat"):
        out.collect()


# -- a float for an integer column ----------------------------------------------------

@pytest.mark.parametrize("rows", [[(3,), (5,), (4,)], [(4,)]], ids=["fraction", "integral"])
def test_a_float_for_an_integer_column_fails_naming_the_node(spark: Any, rows: Any) -> None:
    # Arrow's conversion wrote 1.5 as 1. Python takes no float as an integer,
    # not even 2.0 (range(2.0)): the first float fails, whatever its value.
    df = spark.createDataFrame(rows, "a long")
    out = Stream.from_spark(df).map(lambda x: float(x) / 2).to_dataframe("v long")
    with pytest.raises(Exception, match=r"OutputError: to_dataframe\(\): column 'v' \(int64\) "
                                        r"cannot hold what map\(<lambda>\) returned: "
                                        r"[12]\.[05] is a float, not an integer"):
        out.collect()


def test_integers_for_integer_columns_are_written_and_checked_for_range(spark: Any) -> None:
    df = spark.createDataFrame([(3,), (None,), (-(2 ** 31),)], "a long")
    out = Stream.from_spark(df).map(lambda x: x if x is None else -x).to_dataframe("v long")
    assert sorted(r.v for r in out.collect() if r.v is not None) == [-3, 2 ** 31]
    beyond = spark.createDataFrame([(3,), (-(2 ** 31),)], "a long")
    narrow = Stream.from_spark(beyond).map(operator.neg).to_dataframe("v int")
    with pytest.raises(Exception, match=r"column 'v' \(int32\) cannot hold what "
                                        r"map\(neg\) returned: .*2147483648"):
        narrow.collect()


# -- an integer sum of a window -------------------------------------------------------

SUMMED = [(0.5, 2 ** 62), (0.6, 2 ** 62), (0.7, -(2 ** 62))]


@pytest.mark.parametrize("slide", [None, 0.5])
def test_a_window_sum_is_exact_whatever_the_order_spark_adds_in(spark: Any,
                                                                slide: float | None) -> None:
    # One partition adds 2 ** 62 + 2 ** 62 first: a sum of longs overflowed
    # there (ARITHMETIC_OVERFLOW), though the total fits.
    df = spark.createDataFrame(SUMMED, "t double, v long").coalesce(1)

    def build(s: Stream[Any]) -> Stream[Any]:
        return (s.timed_window(1, slide=slide, time=lambda r: r.t)
                .map(lambda w: sum((r.v for r in w), 7)))

    out = build(Stream.from_spark(df)).to_dataframe("v long")
    assert python_passes(out) == 0
    expected = in_process(df.collect(), build)
    assert sorted(r.v for r in out.collect()) == sorted(expected)
    assert 2 ** 62 + 7 in expected


def test_a_window_sum_beyond_64_bits_fails_naming_the_node_and_the_window(spark: Any) -> None:
    df = spark.createDataFrame([(0.5, 2 ** 62), (0.6, 2 ** 62), (0.7, 2 ** 62)],
                               "t double, v long")
    out = (Stream.from_spark(df).timed_window(1, time=lambda r: r.t)
           .map(lambda w: sum(r.v for r in w)).to_dataframe("v long"))
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=(
            r'map\(<lambda>\) failed on element \{"start":"1970-01-01T00:00:00.000Z",'
            r'"end":"1970-01-01T00:00:01.000Z"\}: OverflowError: sum\(\) is '
            f"{3 * 2 ** 62}, beyond Spark's 64-bit integers")):
        out.collect()


# -- a lowered output for a narrow integer column -------------------------------------

def test_a_lowered_output_beyond_an_int_column_fails_naming_the_node_and_element(
        spark: Any) -> None:
    df = spark.createDataFrame([("a", 1), ("b", 2 ** 31 - 1)], "k string, i int")
    out = Stream.from_spark(df).map(lambda r: r.i + 1).to_dataframe("v int")
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=(
            r'map\(<lambda>\) failed on element \{"i":2147483647\}: OutputError: '
            r"to_dataframe\(\): column 'v' \(int\) cannot hold what map\(<lambda>\) "
            r"returned: 2147483648 is not in range: -2147483648 to 2147483647")):
        out.collect()
    fits = spark.createDataFrame([("a", 1), ("b", None), ("c", -(2 ** 31) + 1)],
                                 "k string, i int")
    out = Stream.from_spark(fits).map(lambda r: {"v": r.i - 1 if r.k != "b" else None}
                                      ).to_dataframe("v int")
    assert python_passes(out) == 0
    assert sorted((r.v for r in out.collect()), key=repr) == [-(2 ** 31), 0, None]


def test_a_windows_result_beyond_an_int_column_fails_naming_the_node_and_window(
        spark: Any) -> None:
    df = spark.createDataFrame([(0.5, 2 ** 31 - 1), (0.6, 2 ** 31 - 1)], "t double, v long")

    def window(s: Stream[Any]) -> Stream[Any]:
        return s.timed_window(1, time=lambda r: r.t)

    fits = window(Stream.from_spark(df)).map(lambda w: len(w)).to_dataframe("n int")
    assert python_passes(fits) == 0
    assert [r.n for r in fits.collect()] == [2]
    beyond = (window(Stream.from_spark(df)).map(lambda w: max(r.v for r in w) + 1)
              .to_dataframe("n int"))
    assert python_passes(beyond) == 0
    with pytest.raises(Exception, match=(
            r'map\(<lambda>\) failed on element \{"start":"1970-01-01T00:00:00.000Z",'
            r'"end":"1970-01-01T00:00:01.000Z"\}: OutputError: to_dataframe\(\): column '
            r"'n' \(int\) cannot hold what map\(<lambda>\) returned: 2147483648 is not in "
            r"range")):
        beyond.collect()
