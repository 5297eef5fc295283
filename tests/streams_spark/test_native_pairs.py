"""A window function pairing selections of its elements (Nexmark q8): a Spark join."""

from __future__ import annotations

import functools
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from streams_spark.column_values import Untraceable
from streams_spark.window_pairs import pairing
from tests.streams_spark.spark_plans import check_windows, filters, in_process, python_passes

pytestmark = pytest.mark.spark

SCHEMA = "kind int, id long, name string, seller long, dt long"
PERSON, AUCTION, BID = 0, 1, 2
#: Persons, auctions (by seller) and a bid, in time order (dt: ms); person 1
#: joins twice, a person without id and an auction without seller share the None key.
ROWS = [
    (PERSON, 1, "a", None, 1_000), (AUCTION, 10, None, 1, 1_500), (BID, 99, "x", 5, 2_000),
    (PERSON, None, "n", None, 3_000), (AUCTION, 11, None, None, 3_100),
    (AUCTION, 12, None, 1, 9_000), (AUCTION, 13, None, 1, 11_000), (PERSON, 1, "b", None, 12_000),
    (PERSON, 2, "c", None, 12_500), (AUCTION, 14, None, 2, 19_999), (AUCTION, 15, None, 2, 20_000),
]
OUT = "id long, name string, auction long"


def seconds(r: Any) -> float:
    return r.dt / 1000


def owner(r: Any) -> Any:
    return r.id if r.kind == PERSON else r.seller


def new_users(key_rows: tuple[Any, list[Any]]) -> list[tuple[Any, ...]]:
    """Nexmark q8: persons who opened auctions in the window they joined."""
    _, rows = key_rows
    persons = [r for r in rows if r.kind == PERSON]
    auctions = [r for r in rows if r.kind == AUCTION]
    return [(p.id, p.name, a.id) for p in persons for a in auctions]


def keyed_pairs(key_rows: tuple[Any, list[Any]]) -> list[tuple[Any, ...]]:
    key, rows = key_rows
    auctions = [r for r in rows if r.kind == AUCTION if r.id > 10]
    return [(key, a.id, b.id - a.id) for a in auctions for b in auctions]


def every_pair(rows: list[Any]) -> list[tuple[Any, ...]]:
    persons = [r for r in rows if r.kind == PERSON and r.id != 2]
    return [(p.name, e.kind, e.dt) for p in persons for e in rows]


def next_ids(key_rows: tuple[Any, list[Any]]) -> list[tuple[Any, ...]]:
    _, rows = key_rows
    persons = [r for r in rows if r.kind == PERSON]
    auctions = [r for r in rows if r.kind == AUCTION]
    return [(p.id, p.name, a.id + 1) for p in persons for a in auctions]


#: ``check(spark, build, schema[, rows=, native=])``: ``build``'s output on Spark
#: equals in-process, joined in the JVM if ``native``.
check = functools.partial(check_windows, rows=ROWS, columns=SCHEMA)


def q8(slide: float | None = None, key: Any = owner) -> Any:
    def build(s: Stream[Any]) -> Stream[Any]:
        return (s.filter(lambda r: r.kind != BID).timed_window(10, slide=slide, time=seconds,
                                                                  key=key)
                .map(new_users).flatten())
    return build


# -- the same pairs -------------------------------------------------------------------------

@pytest.mark.parametrize("slide", [None, 2, 10])
def test_q8_pairs_as_python_pairs_them(spark: Any, slide: float | None) -> None:
    got = check(spark, q8(slide), OUT)
    assert (1, "b", 13) in got and (None, "n", 11) in got  # the None key is one key


def test_pairs_of_one_selection_read_the_key(spark: Any) -> None:
    got = check(spark, lambda s: s.timed_window(30, time=seconds, key=owner).map(keyed_pairs)
                .flatten(), "key long, a long, d long")
    assert {(1, 12, 1), (1, 13, -1), (2, 14, 1), (2, 15, -1), (None, 11, 0)} <= set(got)
    assert (1, 10, 0) not in got  # both conditions hold


def test_an_unkeyed_window_pairs_a_selection_with_the_window(spark: Any) -> None:
    # Persons but 2, each with every element of its window (bids too).
    got = check(spark, lambda s: s.timed_window(10, time=seconds).map(every_pair).flatten(),
                "name string, kind int, dt long")
    assert ("a", BID, 2_000) in got and not any(name == "c" for name, _, _ in got)


def test_the_benchmark_s_q8_joins_in_the_jvm(spark: Any) -> None:
    import sys

    here = str(Path(__file__).parents[2] / "benchmarks" / "nexmark")
    sys.path.insert(0, here)
    try:
        import spark_queries as sq
    finally:
        sys.path.remove(here)
    # dt in microseconds; no None key (PySpark's join drops it, a dict groups it).
    rows = [(k, i, n, s, dt * 1000) for k, i, n, s, dt in ROWS if (i, s, 0)[k] is not None]
    df = spark.createDataFrame(rows, SCHEMA)
    out = sq.streams_query("q8", df)
    assert python_passes(out) == 0
    # Each row's window start is computed once, in the projection: no not-null
    # filter on the join key computes it again. Each side has two filters: the
    # kinds the query keeps, for a source to skip the rest, leading the checks,
    # built once for both sides; the side's selection.
    found = filters(out)
    assert len(found) == 4 and not any("pmod" in c for f in found for c in f), found
    checks = [f for f in found if len(f) == 2]
    assert len(checks) == 2 and all(
        re.fullmatch(r"\(\(kind#\d+ = 0\) OR \(kind#\d+ = 1\)\)", f[0])
        and "raise_error" in f[1] for f in checks), found
    assert sorted(re.sub(r"#\d+", "", c) for f in found if len(f) == 1 for c in f) == [
        "(kind <=> 0)", "(kind <=> 1)"], found
    assert sorted(map(tuple, out.collect()), key=repr) == sorted(
        map(tuple, sq.pyspark_query("q8", df).collect()), key=repr)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(
    st.sampled_from([PERSON, AUCTION, BID]), st.sampled_from([None, 0, 1, 2, 3]),
    st.sampled_from([None, "", "p", "q"]), st.sampled_from([None, 0, 1, 2]),
    st.integers(0, 30_000)),
    max_size=25), st.sampled_from([None, 3, 10]), st.sampled_from(["owner", "name"]))
@example([(PERSON, None, None, None, 0), (AUCTION, 1, None, None, 5)], None, "owner")
@example([(PERSON, 1, None, None, 0), (AUCTION, 2, "", None, 5)], None, "name")
@example([(PERSON, None, "a", None, 0), (AUCTION, 2, None, 0, 5)], None, "owner")
def test_any_rows_pair_as_python_pairs_them(spark: Any, rows: list[Any], slide: int | None,
                                            key: str) -> None:
    # A long key or a string one, None among them: a None key is one key.
    rows = sorted(rows, key=lambda r: r[4]) or ROWS[:1]  # in time order: none late
    check_windows(spark, q8(slide, key=owner if key == "owner" else "name"), OUT, rows=rows,
                  columns=SCHEMA)


# -- every row routed is checked ---------------------------------------------------------------

def test_a_row_in_neither_selection_is_still_checked(spark: Any) -> None:
    # A bid without time: selected by neither condition, but Python routes it.
    rows = [(PERSON, 1, "a", None, 1_000), (BID, 9, "x", 1, None)]
    df = spark.createDataFrame(rows, SCHEMA)
    build = lambda s: s.timed_window(10, time=seconds, key=owner).map(new_users).flatten()
    out = build(Stream.from_spark(df)).to_dataframe(OUT)
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=r'failed on element \{"kind":2,"id":9,.*"dt":null\}: '
                                        r"TypeError: unsupported operand type\(s\) for /"):
        out.collect()
    with pytest.raises(TypeError, match="unsupported operand"):
        in_process(df.collect(), build)


def two_conditions(key_rows: tuple[Any, list[Any]]) -> list[tuple[Any, ...]]:
    _, rows = key_rows
    big = [r for r in rows if r.id > 10]
    named = [r for r in rows if r.name > "m"]
    return [(a.id, b.name, a.id) for a in big for b in named]


def test_a_row_failing_both_conditions_fails_on_the_first_as_python_does(spark: Any) -> None:
    # Python selects ``big`` from the whole window before ``named``: a row
    # without id or name fails on ``>`` of an int first. Both conditions are
    # checked in one filter, the first selection's first.
    rows = [(PERSON, 11, "z", None, 1_000), (AUCTION, None, None, 11, 1_500)]
    df = spark.createDataFrame(rows, SCHEMA)
    build = lambda s: s.timed_window(10, time=seconds, key=owner).map(two_conditions).flatten()
    out = build(Stream.from_spark(df)).to_dataframe(OUT)
    assert python_passes(out) == 0
    first = r"'>' not supported between instances of 'NoneType' and 'int'"
    with pytest.raises(Exception, match=r"map\(two_conditions\) failed on element \{.*\}: "
                       "TypeError: " + first):
        out.collect()
    with pytest.raises(TypeError, match=first):
        in_process(df.collect(), build)


@pytest.mark.parametrize(("slide", "starts"), [(None, {10}), (5, {5, 10})])
def test_a_pair_that_fails_names_its_window_and_key(spark: Any, slide: float | None,
                                                    starts: set[int]) -> None:
    # Person 1 and an auction of theirs without id, both in [10 s, 20 s)
    # (and [5 s, 15 s) when sliding): None + 1 fails on that window's pair.
    rows = [(PERSON, 1, "a", None, 11_000), (AUCTION, None, None, 1, 12_500)]
    df = spark.createDataFrame(rows, SCHEMA)

    def build(s: Stream[Any]) -> Stream[Any]:
        return s.timed_window(10, slide=slide, time=seconds, key=owner).map(next_ids).flatten()

    out = build(Stream.from_spark(df)).to_dataframe(OUT)
    assert python_passes(out) == 0
    with pytest.raises(Exception, match=r"map\(next_ids\) failed on element \{.*\}: TypeError: "
                       r"unsupported operand type\(s\) for \+: 'NoneType' and 'int'") as failed:
        out.collect()
    named = re.search(r"failed on element (\{.*?\}):", str(failed.value))
    assert named is not None
    window = json.loads(named.group(1))
    start = datetime.fromisoformat(window["start"]).timestamp()
    assert window["key"] == 1 and start in starts
    assert datetime.fromisoformat(window["end"]).timestamp() == start + 10
    with pytest.raises(TypeError, match="unsupported operand"):
        in_process(df.collect(), build)


# -- what stays in Python -----------------------------------------------------------------------

LIMIT = 3


def _with_extra_statement(key_rows: tuple[Any, list[Any]]) -> list[Any]:
    _, rows = key_rows
    persons = [r for r in rows if r.kind == PERSON]
    auctions = [r for r in rows if r.kind == AUCTION]
    persons = persons[:LIMIT]
    return [(p.id, p.name, a.id) for p in persons for a in auctions]


def _with_a_pair_condition(key_rows: tuple[Any, list[Any]]) -> list[Any]:
    _, rows = key_rows
    persons = [r for r in rows if r.kind == PERSON]
    return [(p.id, p.name, a.id) for p in persons for a in rows if a.id != p.id]


def _with_a_call(key_rows: tuple[Any, list[Any]]) -> list[Any]:
    _, rows = key_rows
    persons = [r for r in rows if str(r.kind) == "0"]
    return [(p.id, p.name, a.id) for p in persons for a in rows]


def _reading_the_key_in_a_selection(key_rows: tuple[Any, list[Any]]) -> list[Any]:
    key, rows = key_rows
    persons = [r for r in rows if r.id == key]
    return [(p.id, p.name, a.id) for p in persons for a in rows]


def _testing_identity(key_rows: tuple[Any, list[Any]]) -> list[Any]:
    _, rows = key_rows
    persons = [r for r in rows if r.id is not None]  # a stand-in is never None
    return [(p.id, p.name, a.id) for p in persons for a in rows]


def _closure() -> Any:
    kinds = [PERSON]

    def pairs(key_rows: tuple[Any, list[Any]]) -> list[Any]:
        _, rows = key_rows
        persons = [r for r in rows if r.kind in kinds]
        return [(p.id, p.name, a.id) for p in persons for a in rows]
    return pairs


_defined = {"PERSON": PERSON}
exec("def _no_source(key_rows):\n"
     "    _, rows = key_rows\n"
     "    persons = [r for r in rows if r.kind == PERSON]\n"
     "    return [(p.id, p.name, a.id) for p in persons for a in rows]\n", _defined)


@pytest.mark.parametrize("func", [_with_extra_statement, _with_a_pair_condition, _with_a_call,
                                  _reading_the_key_in_a_selection, _testing_identity, _closure(),
                                  _defined["_no_source"]])
def test_other_shapes_run_in_python_with_python_s_result(spark: Any, func: Any) -> None:
    check(spark, lambda s: s.timed_window(10, time=seconds, key=owner).map(func).flatten(),
          OUT, native=False)


def test_session_windows_and_streams_run_in_python(spark: Any, tmp_path: Path) -> None:
    check(spark, lambda s: s.session_window(5, time=seconds, key=owner).map(new_users)
          .flatten(), OUT, native=False)
    df = spark.createDataFrame(ROWS, SCHEMA)
    df.write.parquet(str(tmp_path / "in"))
    stream = spark.readStream.schema(SCHEMA).parquet(str(tmp_path / "in"))
    out = q8()(Stream.from_spark(stream)).to_dataframe(OUT)
    assert python_passes(out) > 0


def test_pairing_reads_the_shape_from_the_source() -> None:
    p = pairing(new_users)
    assert p.key == "_" and list(p.selections) == ["rows", "persons", "auctions"]
    assert p.loops == (("p", "persons"), ("a", "auctions"))
    for func in (_with_extra_statement, _with_a_pair_condition, _closure(),
                 _defined["_no_source"], lambda w: [(a, b) for a in w for b in w]):
        with pytest.raises(Untraceable):
            pairing(func)
