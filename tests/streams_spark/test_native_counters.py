"""A ``collections.Counter`` of a window's elements: Spark aggregates, Python's results."""

from __future__ import annotations

import collections
import functools
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
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

SCHEMA = "kind int, auction long, tag string, dt long"
#: Bids (kind 2) and persons (kind 1, no auction), in time order (dt: ms).
ROWS = [
    (2, 7, "a", 1_000), (2, 3, "b", 1_500), (1, None, "p", 2_000), (2, 7, "a", 3_000),
    (2, 3, "c", 4_200), (2, 5, "a", 6_000), (2, 5, "b", 9_999), (2, 5, "c", 10_000),
    (2, 9, "b", 12_000), (2, 1, "a", 12_500), (1, None, "q", 15_000), (2, 9, "a", 31_000),
]
BID = 2


def seconds(r: Any) -> float:
    return r.dt / 1000


def is_bid(r: Any) -> bool:
    return r.kind == BID  # type: ignore[no-any-return]


def hot_item(bids: list[Any]) -> tuple[Any, Any, Any]:
    """Nexmark q5: the first bid's time, the most bid auction (lowest on ties), its bids."""
    counts = Counter(b.auction for b in bids)
    top = max(counts.values())
    return min(b.dt for b in bids), min(a for a, c in counts.items() if c == top), top


def keyed_hot_item(key_bids: tuple[Any, list[Any]]) -> tuple[Any, ...]:
    return (key_bids[0], *hot_item(key_bids[1]))


def counts_summary(bids: list[Any]) -> tuple[Any, ...]:
    """Every aggregate of a Counter, beside aggregates of the elements."""
    counts = collections.Counter(b.tag for b in bids)
    most, least = max(counts.values()), min(counts.values())
    return (len(counts), len(bids), sum(counts.values()), most, least,
            min(counts.keys()), max(counts.keys()),
            max(t for t, n in counts.items() if n == most),
            min(t for t, n in counts.items() if n == least),
            max(t for t, n in counts.items() if n == least),
            max(n for t, n in counts.items()), min(t for t, n in counts.items()),
            sum(b.auction for b in bids), max(bids, key=lambda b: (b.auction, b.dt)).tag)


def sum_of_keys(bids: list[Any]) -> tuple[Any, ...]:
    counts = Counter(b.auction % 4 for b in bids)
    return (sum(counts.keys()), len(counts.items()), max(n for n in counts.values()))


#: Nexmark's queries module, as q5 calls it.
queries = types.ModuleType("q5_queries")
exec("from collections import Counter\n"
     "def hot_item(bids):\n"
     "    counts = Counter(b.auction for b in bids)\n"
     "    top = max(counts.values())\n"
     "    return min(a for a, c in counts.items() if c == top), top\n",
     queries.__dict__)


def q5(bids: list[Any]) -> tuple[Any, ...]:
    return (min(b.dt for b in bids), *queries.hot_item(bids))


#: ``check(spark, build, schema[, rows=, native=])``: ``build``'s windows on Spark
#: equal in-process, aggregated in the JVM if ``native``.
check = functools.partial(check_windows, rows=ROWS, columns=SCHEMA)


# -- the same windows -----------------------------------------------------------------------

@pytest.mark.parametrize(("build", "schema"), [
    (lambda s: s.filter(is_bid).timed_window(10, time=seconds).map(hot_item),
     "first long, auction long, bids long"),
    (lambda s: s.filter(is_bid).timed_window(10, slide=2, time=seconds).map(hot_item),
     "first long, auction long, bids long"),
    (lambda s: s.filter(is_bid).timed_window(10, time=seconds, key="tag").map(keyed_hot_item),
     "tag string, first long, auction long, bids long"),
    (lambda s: s.filter(is_bid).timed_window(10, slide=5, time=seconds, key=lambda r: r.tag)
     .map(keyed_hot_item), "tag string, first long, auction long, bids long"),
    (lambda s: s.filter(is_bid).timed_window(10, slide=5, time=seconds).map(counts_summary),
     "tags long, bids long, total long, most long, least long, low string, high string, "
     "top_high string, bottom_low string, bottom_high string, most2 long, low2 string, "
     "auctions long, last string"),
    (lambda s: s.filter(is_bid).timed_window(20, time=seconds).map(sum_of_keys),
     "keys long, n long, most long"),
])
def test_counters_aggregate_as_python_counts(spark: Any, build: Any, schema: str) -> None:
    assert check(spark, build, schema)


def test_q5_as_the_benchmark_writes_it(spark: Any) -> None:
    # Nexmark q5 calls another module's hot_item, whose Counter is a global there.
    check(spark, lambda s: s.filter(is_bid).timed_window(10, slide=2, time=seconds).map(q5),
          "first long, auction long, bids long")


# -- None: a key as any other, until min() compares it -------------------------------------

def test_a_none_counted_alone_or_outcounted_is_python_s_result(spark: Any) -> None:
    # Persons have no auction: counted, they are a None key. One window holds
    # only a None (min of one candidate: no comparison); in another, None is
    # outcounted (not a candidate).
    rows = [(1, None, "p", 1_000), (2, 4, "a", 11_000), (2, 4, "a", 12_000),
            (1, None, "q", 13_000)]
    got = check(spark, lambda s: s.timed_window(10, time=seconds).map(hot_item),
                "first long, auction long, bids long", rows=rows)
    assert (1_000, None, 1) in got


def _first_tag(bids: list[Any]) -> tuple[Any, ...]:
    counts = Counter(b.auction for b in bids)
    return (min(b.tag for b in bids), len(counts))


@pytest.mark.parametrize(("func", "rows", "error"), [
    # A None tied for the most counted: min() compares it with the other candidate.
    (hot_item, [(2, 4, "a", 1_000), (1, None, "p", 2_000)],
     "TypeError: '<' not supported between instances of 'NoneType' and 'int'"),
    # A None among the elements' values, computed in parts per entry.
    (_first_tag, [(2, 4, "a", 1_000), (2, 5, None, 2_000)],
     "TypeError: '<' not supported between instances of 'NoneType' and 'str'"),
])
def test_a_none_compared_fails_naming_the_node_and_window(spark: Any, func: Any,
                                                          rows: list[Any], error: str) -> None:
    df = spark.createDataFrame(rows, SCHEMA)
    out = (Stream.from_spark(df).timed_window(10, time=seconds).map(func)
           .to_dataframe("a long, b long, c long" if func is hot_item else "a string, b long"))
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=(rf'map\({func.__name__}\) failed on element '
                                         rf'\{{"start":.*\}}: {error}')):
        out.collect()
    with pytest.raises(TypeError, match=error.split(": ")[1]):
        in_process(df.collect(), lambda s: s.timed_window(10, time=seconds).map(func))


def _counts_of(key_rows: tuple[Any, list[Any]]) -> tuple[Any, ...]:
    key, rows = key_rows
    counts = Counter(r.auction for r in rows)
    most, least = max(counts.values()), min(counts.values())
    return (key, len(counts), most, min(a for a, c in counts.items() if c == most),
            max(a for a, c in counts.items() if c == least), sum(counts.values()),
            len(rows), min(r.dt for r in rows))


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(
    st.sampled_from([1, 2]), st.sampled_from([None, 0, 1, 2]),
    st.sampled_from(["a", "b"]), st.integers(0, 30_000)), max_size=25))
@example([(2, 1, "a", 0), (1, None, "a", 1), (2, 1, "a", 2), (1, None, "a", 3)])  # a tie
@example([(1, None, "a", 0), (2, 1, "b", 1), (1, None, "a", 2), (2, 0, "a", 3)])
def test_any_rows_give_python_counts_or_python_failures(spark: Any, rows: list[Any]) -> None:
    rows = sorted(rows, key=lambda r: r[3]) or ROWS[:1]  # in time order: none late

    def build(s: Stream[Any]) -> Stream[Any]:
        return s.timed_window(10, slide=5, time=seconds, key="tag").map(_counts_of)

    schema = ("tag string, keys long, most long, hot long, cold long, n long, rows long, "
              "first long")
    check_or_fail_alike(spark, build, schema, rows=rows, columns=SCHEMA)


# -- what stays in Python ---------------------------------------------------------------------

def _most_common(bids: list[Any]) -> Any:
    return Counter(b.auction for b in bids).most_common(1)[0]  # ties: the first inserted


def _first_key(bids: list[Any]) -> Any:
    return (next(iter(Counter(b.auction for b in bids))),)


def _not_none(bids: list[Any]) -> Any:
    counts = Counter(b.auction for b in bids)
    return (min(a for a, c in counts.items() if a is not None),)  # `is` cannot be traced


def _counted_not_none(bids: list[Any]) -> Any:
    return (len(Counter(b.auction for b in bids if b.auction is not None)),)


def _topped(bids: list[Any]) -> Any:
    counts = Counter(b.auction for b in bids)
    top = max(counts.values())
    return (min(a if c == top else 100 for a, c in counts.items()),)  # not a filter


def _of_rows(bids: list[Any]) -> Any:
    return (len(Counter(bids)),)


def _by_key(bids: list[Any]) -> Any:
    counts = Counter(b.auction for b in bids)
    return (counts[max(b.dt for b in bids) % 10],)  # 0 where the key is missing


def _of_floats(bids: list[Any]) -> Any:
    counts = Counter(b.dt / 2 for b in bids)  # floats: NaN is no key a dict groups
    return (max(counts.values()),)


def _two_counters(bids: list[Any]) -> Any:
    return (len(Counter(b.auction for b in bids)), len(Counter(b.tag for b in bids)))


@pytest.mark.parametrize(("func", "schema"), [
    (_most_common, "auction long, bids long"),
    (_first_key, "auction long"),
    (_not_none, "auction long"),
    (_counted_not_none, "n long"),
    (_topped, "auction long"),
    (_of_rows, "n long"),
    (_by_key, "n long"),
    (_two_counters, "auctions long, tags long"),
    (_of_floats, "n long"),
])
def test_counter_uses_beyond_aggregates_run_in_python(spark: Any, func: Any, schema: str
                                                      ) -> None:
    rows = [(2, 7, "a", 1_000), (1, None, "p", 1_100), (2, 3, "b", 1_500),
            (2, 7, "a", 3_000), (2, 3, "c", 4_200), (2, 5, "b", 12_000)]
    check(spark, lambda s: s.timed_window(10, time=seconds).map(func), schema, rows=rows,
          native=False)


def test_a_counter_over_session_windows_runs_in_python(spark: Any) -> None:
    # Sessions form per grouping key: grouped by value too, they would split.
    check(spark, lambda s: s.filter(is_bid).session_window(3, time=seconds).map(hot_item),
          "first long, auction long, bids long", native=False)


def test_a_streaming_source_counts_in_python(spark: Any, tmp_path: Path) -> None:
    spark.createDataFrame(ROWS, SCHEMA).coalesce(1).write.parquet(str(tmp_path / "in"))
    df = spark.readStream.schema(SCHEMA).parquet(str(tmp_path / "in"))
    build = lambda s: s.filter(is_bid).timed_window(10, time=seconds).map(hot_item)
    out = build(Stream.from_spark(df)).to_dataframe("first long, auction long, bids long")
    assert out.isStreaming and python_passes(out) > 0
    expected = in_process(spark.createDataFrame(ROWS, SCHEMA).collect(), build)
    # Append mode writes a window once the watermark passes its end: the
    # last window stays open (in-process, close() flushes it).
    assert written(spark, out, tmp_path) == sorted(expected)[:-1]
