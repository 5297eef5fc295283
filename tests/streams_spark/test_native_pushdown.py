"""A lowered filter's tests of columns reach Spark's source: it skips what they rule out.

The input is Parquet sorted by ``kind`` in row groups of one kind each, so
Spark reads only the row groups whose statistics a pushed-down filter
keeps; the scan's output rows count what it read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from streams_spark.checks import _kept_apart
from tests.streams_spark.spark_plans import filters, in_process, python_passes

pytestmark = pytest.mark.spark

PER_KIND = 50
SCHEMA = "kind long, price long"


def write_sorted(rows: list[tuple[Any, Any]], directory: Path, per_group: int) -> str:
    """``rows`` as one Parquet file, sorted by kind (None first), ``per_group`` rows a group."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows, key=lambda r: (r[0] is not None, r[0] or 0))
    table = pa.table({"kind": pa.array([r[0] for r in rows], pa.int64()),
                      "price": pa.array([r[1] for r in rows], pa.int64())})
    pq.write_table(table, directory / "part.parquet", row_group_size=per_group)
    return str(directory)


def scanned(frame: Any) -> int:
    """How many rows the (one) file scan of ``frame``'s last run gave."""
    plan = frame._jdf.queryExecution().executedPlan()
    if "Adaptive" in plan.getClass().getSimpleName():
        plan = plan.executedPlan()
    leaves = plan.collectLeaves()
    counts = [leaves.apply(i).metrics().apply("numOutputRows").value()
              for i in range(leaves.size())
              if leaves.apply(i).getClass().getSimpleName() == "FileSourceScanExec"]
    assert len(counts) == 1, counts
    return int(counts[0])


@pytest.fixture
def by_kind(spark: Any, tmp_path: Path) -> Any:
    """Kinds 0, 1 and 2 with prices 0..149, a row group each."""
    rows = [(i // PER_KIND, i) for i in range(3 * PER_KIND)]
    return spark.read.parquet(write_sorted(rows, tmp_path / "events", PER_KIND))


@pytest.mark.parametrize(("build", "groups"), [
    (lambda s: s.filter(lambda r: r.kind == 2).map(lambda r: r.price * 2), 1),
    (lambda s: s.remove(lambda r: r.kind != 2).map(lambda r: r.price * 2), 1),
    (lambda s: s.filter(lambda r: r.kind == 0 or r.kind == 1).map(lambda r: r.price), 2),
    # The test before the check of price (None in arithmetic) is pushed.
    (lambda s: s.filter(lambda r: r.kind == 1 and r.price % 3 == 0).map(lambda r: r.price), 1),
    # An ordering fails on a None kind: those rows are read too (none here).
    (lambda s: s.filter(lambda r: r.kind >= 2).map(lambda r: r.price), 1),
    (lambda s: s.filter(lambda r: r.kind == 1).filter(lambda r: r.price % 2 == 0)
     .map(lambda r: r.price), 1),
    # A None kind fails the first filter before the second tests it: only
    # the first filter's test is pushed.
    (lambda s: s.filter(lambda r: r.kind >= 1).filter(lambda r: r.kind != 2)
     .map(lambda r: r.price), 2),
])
def test_a_filter_s_tests_of_columns_skip_the_row_groups_they_rule_out(
        by_kind: Any, build: Any, groups: int) -> None:
    out = build(Stream.from_spark(by_kind)).to_dataframe("v long")
    assert python_passes(out) == 0
    got = sorted(r[0] for r in out.collect())
    assert got == sorted(in_process(by_kind.collect(), build))
    assert scanned(out) == groups * PER_KIND


def test_a_filter_without_such_a_test_reads_every_row(by_kind: Any) -> None:
    out = (Stream.from_spark(by_kind).filter(lambda r: r.price % 2 == 0)
           .map(lambda r: r.kind).to_dataframe("v long"))
    assert len(out.collect()) == 3 * PER_KIND // 2
    assert scanned(out) == 3 * PER_KIND


def test_partitions_a_filter_rules_out_are_not_listed(spark: Any, tmp_path: Path) -> None:
    rows = [(i % 3, i) for i in range(30)]
    spark.createDataFrame(rows, SCHEMA).write.partitionBy("kind").parquet(str(tmp_path / "p"))
    df = spark.read.parquet(str(tmp_path / "p"))
    out = (Stream.from_spark(df).filter(lambda r: r.kind == 1).map(lambda r: r.price)
           .to_dataframe("v long"))
    assert sorted(r[0] for r in out.collect()) == [p for k, p in rows if k == 1]
    plan = str(out._jdf.queryExecution().executedPlan())
    assert "PartitionFilters: [isnotnull(kind" in plan or "PartitionFilters: [(kind" in plan, plan


# -- a row Python fails on still fails ---------------------------------------------------

def _fails_alike(df: Any, build: Any) -> None:
    with pytest.raises(TypeError) as raised:
        in_process(df.collect(), build)
    out = build(Stream.from_spark(df)).to_dataframe("v long")
    assert python_passes(out) == 0
    # The same step fails, with Python's error (the element is shown as JSON).
    step, error = str(raised.value).split(" failed on element ")[0], str(raised.value).split(
        ": ", 1)[1]
    with pytest.raises(Exception, match=re.escape(step) + ".*" + re.escape(error)):
        out.collect()


@pytest.mark.parametrize("build", [
    # price + 1 fails on a None before the kind is tested: in every kind's rows.
    lambda s: s.filter(lambda r: (r.price + 1, r.kind == 2)[1]).map(lambda r: r.price),
    lambda s: s.filter(lambda r: r.price + 1 > 0).filter(lambda r: r.kind == 2)
    .map(lambda r: r.price),
    lambda s: s.map(lambda r: (r.price + 1, r.kind)).filter(lambda t: t[1] == 2)
    .map(lambda t: t[0]),
    # A None price fails the ordering before the kind is tested.
    lambda s: s.filter(lambda r: r.price > 3 and r.kind == 2).map(lambda r: r.price),
])
def test_a_row_failing_before_the_test_of_its_kind_still_fails(
        spark: Any, tmp_path: Path, build: Any) -> None:
    rows = [(0, None)] + [(k, p) for k in (0, 1, 2) for p in range(PER_KIND)]
    df = spark.read.parquet(write_sorted(rows, tmp_path / "events", PER_KIND))
    _fails_alike(df, build)


_PIPELINES = [
    lambda s: s.filter(lambda r: r.kind == 1 and r.price > 10).map(lambda r: r.price),
    lambda s: s.filter(lambda r: r.kind == 2 or r.price < 5).map(lambda r: r.price),
    lambda s: s.filter(lambda r: r.kind != None and r.kind < 2)  # noqa: E711
    .map(lambda r: r.price * 2),
    lambda s: s.filter(lambda r: (r.price - 1, r.kind == 0)[1]).map(lambda r: r.kind),
    lambda s: s.filter(lambda r: r.kind == 0).filter(lambda r: r.price + 1 > 3)
    .map(lambda r: r.kind),
    lambda s: s.filter(lambda r: r.kind > 1 and r.price == 3).map(lambda r: r.kind),
    lambda s: s.filter(lambda r: r.price < 0 or r.kind == 1).map(lambda r: r.kind),
    # Tests the scan makes, met again after it (streams_spark.pushdown.certain).
    lambda s: s.filter(lambda r: r.kind == 2).filter(lambda r: r.kind == 2 and r.price > 0)
    .map(lambda r: r.price),
    lambda s: s.filter(lambda r: r.kind == 1).map(lambda r: (r.kind, r.price))
    .filter(lambda t: t[0] == 1 and t[1] + 1 > 0).map(lambda t: t[1]),
    lambda s: s.remove(lambda r: r.kind == 0).map(lambda r: r.price + 1 if r.kind == 0
                                                  else 7),
    # Either kind, so neither is known: the map still branches on it.
    lambda s: s.filter(lambda r: r.kind == 0 or r.kind == 1).map(
        lambda r: r.price + 1 if r.kind == 0 else r.kind),
]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 3)),
                               st.one_of(st.none(), st.integers(-20, 20))),
                     min_size=1, max_size=25),
       which=st.integers(0, len(_PIPELINES) - 1))
@example(rows=[(None, -1), (None, -1)], which=6)  # two None outputs: sorted() would fail
def test_rows_or_the_failure_are_python_s_over_skipped_row_groups(
        spark: Any, tmp_path_factory: Any, rows: list[tuple[Any, Any]], which: int) -> None:
    df = spark.read.parquet(write_sorted(rows, tmp_path_factory.mktemp("rows"), 2))
    _rows_or_the_failure_alike(df, _PIPELINES[which], "v long", lambda r: r[0])


def _rows_or_the_failure_alike(df: Any, build: Any, schema: str, value: Any) -> None:
    """``build``'s rows on Spark (each as ``value(row)``) are Python's, or both fail alike."""
    try:
        expected: Any = in_process(df.collect(), build)
    except TypeError:
        expected = None
    out = build(Stream.from_spark(df)).to_dataframe(schema)
    assert python_passes(out) == 0
    if expected is None:
        with pytest.raises(Exception, match="TypeError"):
            out.collect()
    else:  # by repr: the outputs may hold None
        assert sorted(map(value, out.collect()), key=repr) == sorted(expected, key=repr)


# -- a source that takes no pushed filter ---------------------------------------------------

def _rows_source() -> Any:
    """A Python data source of a person (no price) and two bids that takes no filter."""
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class Reader(DataSourceReader):
        def pushFilters(self, filters: list[Any]) -> Any:
            yield from filters  # none taken: Spark tests them after the scan

        def read(self, partition: Any) -> Any:
            yield from [(0, None), (2, 5), (2, 7)]

    class Rows(DataSource):
        @classmethod
        def name(cls) -> str:
            return "streams_test_untaken_filters"

        def schema(self) -> str:
            return SCHEMA

        def reader(self, schema: Any) -> Any:
            return Reader()

    return Rows


def test_the_checks_see_only_the_rows_the_pushed_tests_keep_on_a_source_that_takes_none(
        spark: Any) -> None:
    # The source declines kind <=> 2, so Spark tests it after the scan, where
    # the checks are too: the check of the price must not reach the person.
    conf = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(conf)
    spark.conf.set(conf, "true")
    try:
        spark.dataSource.register(_rows_source())
        df = spark.read.format("streams_test_untaken_filters").load()
        out = (Stream.from_spark(df).filter(lambda r: r.kind == 2).map(lambda r: r.price * 2)
               .to_dataframe("v long"))
        assert python_passes(out) == 0
        assert sorted(r.v for r in out.collect()) == [10, 14]
    finally:
        spark.conf.set(conf, before)


# -- a filter the user adds to the output -------------------------------------------------

@pytest.mark.parametrize("where", ["kind = 2", "kind <=> 2", "kind = 2 AND auction > 0"])
def test_a_filter_on_the_output_leaves_the_checks_python_s(spark: Any, where: str) -> None:
    # Spark would put the output filter's constant (kind 2) into the checks and
    # test a person's missing auction, which Python never does.
    df = spark.createDataFrame([(0, None, 5), (2, 246, 7), (2, 7, 8)],
                               "kind int, auction long, price long")
    out = (Stream.from_spark(df).filter(lambda r: r.kind == 2 and r.auction % 123 == 0)
           .map(lambda r: (r.kind, r.auction)).to_dataframe("kind long, auction long"))
    assert python_passes(out) == 0
    assert [tuple(r) for r in out.where(where).collect()] == [(2, 246)]


def test_a_filter_on_a_window_s_output_leaves_its_checks_python_s(spark: Any) -> None:
    df = spark.createDataFrame([(0, None, 1_000), (2, 5, 2_000), (2, 9, 3_000)],
                               "kind int, price long, dt long")
    out = (Stream.from_spark(df).filter(lambda r: r.kind == 2)
           .timed_window(10, time=lambda r: r.dt / 1000, key=lambda r: r.kind)
           .map(lambda kw: (kw[0], max(r.price for r in kw[1])))
           .to_dataframe("kind long, top long"))
    assert python_passes(out) == 0
    assert [tuple(r) for r in out.where("kind = 2").collect()] == [(2, 9)]


def test_only_a_filter_holding_checks_is_kept_apart(spark: Any) -> None:
    df = spark.createDataFrame([(0, None, 5), (2, 246, 7)], "kind int, auction long, price long")

    def plan(build: Any) -> list[list[str]]:
        return filters(build(Stream.from_spark(df)).to_dataframe("v long"))

    # No check: one filter, merged with the pushed test.
    [plain] = plan(lambda s: s.filter(lambda r: r.kind == 2).map(lambda r: r.price))
    assert not any("SPARK_PARTITION_ID" in c.upper() for c in plain)
    # A check: one filter too, the pushed test first, the check kept apart by
    # its partition test (Spark merges no other filter into it).
    [checked] = plan(lambda s: s.filter(lambda r: r.kind == 2).map(lambda r: r.auction * 2))
    assert re.fullmatch(r"\(kind#\d+ = 2\)", checked[-2]), checked
    assert checked[-1].upper().startswith("CASE WHEN (SPARK_PARTITION_ID() < 0) THEN FALSE")


@pytest.mark.parametrize("where", [None, "kind = 2", "kind <=> 2", "v > 0"])
@pytest.mark.parametrize("per_group", [1, 2])
def test_a_check_in_one_filter_with_its_tests_never_sees_a_row_they_rule_out(
        spark: Any, tmp_path: Path, where: str | None, per_group: int) -> None:
    # A person without a price and a bid, in one Parquet row group or two: the
    # check of the price runs on the bid only, whatever filter the user adds.
    df = spark.read.parquet(write_sorted([(0, None), (2, 7)], tmp_path / "two", per_group))
    out = (Stream.from_spark(df).filter(lambda r: r.kind == 2)
           .map(lambda r: (r.kind, r.price * 2)).to_dataframe("kind long, v long"))
    assert len(filters(out)) == 1
    assert [tuple(r) for r in (out if where is None else out.where(where)).collect()] == [
        (2, 14)]


def test_a_condition_that_may_overflow_is_tested_only_where_python_tests_it(
        spark: Any) -> None:
    # auction * 2 is beyond 64 bits on the person's row, which Python never
    # tests: the product (NULL there, never an error) may go with the pushed
    # tests, its check only after them, in the CASE that tests the kind first.
    df = spark.createDataFrame([(0, 2 ** 62), (2, 5), (2, 1)],
                               "kind long NOT NULL, auction long NOT NULL")
    out = (Stream.from_spark(df).filter(lambda r: r.kind == 2)
           .filter(lambda r: r.auction * 2 > 6).map(lambda r: r.auction).to_dataframe("v long"))
    [conjuncts] = filters(out)
    checks = [c for c in conjuncts if "raise_error" in c]
    assert len(checks) == 1 and checks[0] == conjuncts[-1], conjuncts
    # (A NOT NULL kind's coalesce is simplified away.)
    assert re.match(r"CASE WHEN \(SPARK_PARTITION_ID\(\) < 0\) THEN false "
                    r"WHEN NOT \(kind#\d+L = 2\) THEN false ", checks[0]), checks
    assert [r.v for r in out.collect()] == [5]
    assert [r.v for r in out.where("v > 0").collect()] == [5]


@pytest.mark.parametrize("guard", ["kind = 2", "(kind = 2) AND (price > 6)"])
def test_a_check_evaluated_before_the_tests_it_follows_sees_only_their_rows(
        spark: Any, guard: str) -> None:
    # Spark promises no order among an AND's operands: the check's CASE, even
    # evaluated first (here alone), neither keeps nor fails a row its tests
    # rule out, NULL (a missing kind) included.
    # (2, None, 5) fails the check unless the guard's second test drops it.
    rows = [(0, None, 5), (None, None, 6), (2, 246, 7), (2, 5, 6)]
    if " AND " in guard:
        rows.append((2, None, 5))
    df = spark.createDataFrame(rows, "kind int, auction long, price long")
    check = "CASE WHEN auction IS NULL THEN raise_error('failed') ELSE auction > 6 END"
    alone = df.where(_kept_apart(check, guard))
    assert [tuple(r) for r in alone.collect()] == [(2, 246, 7)]
    failing = spark.createDataFrame([(2, None, 7)], "kind int, auction long, price long")
    with pytest.raises(Exception, match="failed"):
        failing.where(_kept_apart(check, guard)).collect()


def test_the_checks_test_again_what_the_scan_s_filter_tests_only_as_their_guard(
        spark: Any) -> None:
    df = spark.createDataFrame([(0, None, 5), (2, 246, 7)], "kind int, auction long, price long")
    out = (Stream.from_spark(df).filter(lambda r: r.kind == 2 and r.auction % 123 == 0)
           .map(lambda r: r.price * 2).to_dataframe("v long"))
    [conjuncts] = filters(out)
    # kind = 2 leads the filter, for the source; the check's CASE tests it
    # again first, whatever order Spark evaluates the AND in, then the auction.
    # Spark put no constant into the CASE: the guard is there after optimising.
    check = conjuncts[-1]
    assert any(re.fullmatch(r"\(kind#\d+ = 2\)", c) for c in conjuncts[:-1]), conjuncts
    assert re.match(r"CASE WHEN \(SPARK_PARTITION_ID\(\) < 0\) THEN false "
                    r"WHEN NOT coalesce\(\(kind#\d+ = 2\), false\) THEN false WHEN ", check), check
    assert len(re.findall(r"kind#\d+ (?:=|<=>) 2\)", check)) == 1, check
    assert "isnull(auction" in check
    assert [r.v for r in out.collect()] == [14]
    # A filter that keeps every row its pushed test keeps leaves no filter of its own.
    out = (Stream.from_spark(df).filter(lambda r: r.kind == 2).map(lambda r: r.price)
           .to_dataframe("v long"))
    plan = str(out._jdf.queryExecution().optimizedPlan().toString())
    assert plan.count("Filter ") == 1 and len(re.findall(r"kind#\d+ (?:=|<=>) 2\)", plan)) == 1


# -- the rows a check keeps or fails on, before it reads its message's columns -------------

WIDE = "kind int, auction long, price long, name string"
_SELECTIONS = [
    # One check that drops rows: a filter of where it keeps or fails comes first,
    # merged with the tests where it cannot fail on any row.
    (lambda s: s.filter(lambda r: r.auction % 3 == 0).map(lambda r: (r.name, r.price)),
     "merged"),
    (lambda s: s.remove(lambda r: r.auction % 3 != 0).map(lambda r: (r.name, r.price)),
     "merged"),
    # After a step that cannot fail, inside its CASE.
    (lambda s: s.filter(lambda r: r.kind == 1 or r.kind == 2)
     .filter(lambda r: r.auction % 3 == 0).map(lambda r: (r.name, r.price)), "merged"),
    # One whose own test may fail (Spark's division): kept apart from the tests.
    (lambda s: s.filter(lambda r: r.auction / 2 > 3).map(lambda r: (r.name, r.price)),
     "apart"),
    # An integer's product cannot fail (NULL beyond 64 bits, where the check fails).
    (lambda s: s.filter(lambda r: r.auction * 2 > 6).map(lambda r: (r.name, r.price)),
     "merged"),
    # After a step that can fail: a failure in a CASE's condition is not where
    # the prefilter would be true, so there is none.
    (lambda s: s.filter(lambda r: r.kind > 0).filter(lambda r: r.auction % 3 == 0)
     .map(lambda r: (r.name, r.price)), None),
    # A check that drops nothing: nothing to filter first.
    (lambda s: s.map(lambda r: (r.name, r.auction * 2)), None),
]


@pytest.mark.parametrize(("build", "prefilter"), _SELECTIONS)
def test_a_check_reads_its_message_s_columns_only_on_the_rows_it_keeps_or_fails_on(
        spark: Any, build: Any, prefilter: str | None) -> None:
    df = spark.createDataFrame([(2, 6, 7, "a")], WIDE)
    out = build(Stream.from_spark(df)).to_dataframe("name string, v long")
    plan = filters(out)
    [checking] = [f for f in plan if "raise_error" in f[-1]]
    # Spark reads a conjunct's columns just before testing it: a prefilter
    # before the check spares the check's message columns the rows it drops.
    prefilters = [(f, c) for f in plan for c in f if "auction#" in c and "raise_error" not in c]
    assert len(prefilters) == (prefilter is not None), plan
    # It reads what the tests read, not the columns only the message names.
    assert not any("name#" in c or "price#" in c for _, c in prefilters), prefilters
    # One that may fail is a filter kept apart below, as the check is; the
    # others lead the check's filter.
    for f, c in prefilters:
        assert ("SPARK_PARTITION_ID" in c) == (prefilter == "apart") == (f is not checking), plan


def test_a_failure_behind_a_prefilter_still_names_the_whole_element(spark: Any) -> None:
    df = spark.createDataFrame([(2, 6, 7, "a"), (2, None, 9, "b"), (2, 4, 1, "c")], WIDE)
    out = (Stream.from_spark(df).filter(lambda r: r.auction % 3 == 0)
           .map(lambda r: (r.name, r.price)).to_dataframe("name string, v long"))
    with pytest.raises(Exception, match=re.escape(
            'failed on element {"auction":null,"price":9,"name":"b"}: TypeError')):
        out.collect()


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 3)),
                               st.one_of(st.none(), st.integers(-9, 9)),
                               st.one_of(st.none(), st.integers(-9, 9)),
                               st.one_of(st.none(), st.sampled_from(["a", "b"]))),
                     min_size=1, max_size=20),
       which=st.integers(0, len(_SELECTIONS) - 1))
def test_rows_or_the_failure_are_python_s_with_a_prefilter(
        spark: Any, rows: list[Any], which: int) -> None:
    _rows_or_the_failure_alike(spark.createDataFrame(rows, WIDE), _SELECTIONS[which][0],
                               "name string, v long", tuple)
