"""Input rows that reach a window unchanged travel as their own columns, and come back equal."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from streams.spec import NodeSpec
from streams_spark.codec import PACK, ROW, elements_of
from streams_spark.packs import opened
from streams_spark.plan import Route
from streams_spark.stages import COLUMNS, chain_task
from tests.streams_spark.spark_plans import in_process, python_passes

pytestmark = pytest.mark.spark

SCHEMA = ("k string, n long, x double, ok boolean, at timestamp, d decimal(10, 2), "
          "b binary, day date, ms long")
UTC = dt.UTC

ROWS = st.lists(st.tuples(
    st.sampled_from(["a", "b", "é", None]),
    st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
    st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
    st.one_of(st.none(), st.booleans()),
    st.one_of(st.none(), st.integers(0, 10**6).map(
        lambda s: dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=s, microseconds=7))),
    st.one_of(st.none(), st.integers(-10**8, 10**8).map(lambda c: Decimal(c) / 100)),
    st.one_of(st.none(), st.binary(max_size=4)),
    st.one_of(st.none(), st.dates(dt.date(1990, 1, 1), dt.date(2100, 1, 1))),
    st.integers(0, 60).map(lambda i: i * 500)), min_size=1, max_size=40)


def seconds(r: Any) -> float:
    return r.ms / 1000


def shown(v: Any) -> Any:
    # A time by its instant and offset: Spark's tasks name the session's
    # zone Etc/UTC where toArrow() names it UTC.
    return v.isoformat() if isinstance(v, dt.datetime) else v


def fields(w: Any) -> tuple[Any, ...]:
    """Every field of every element, as Python sees them: a set keeps this in Python."""
    elements = w[1] if isinstance(w, tuple) else w
    seen = {tuple(map(shown, r)) for r in elements}
    return (w[0] if isinstance(w, tuple) else None, len(elements), repr(sorted(seen, key=repr)),
            repr([type(v).__name__ for r in elements for v in r]))


OUT = "key string, count long, rows string, types string"


def _pipelines() -> Any:
    """``(build, keyed)``: only a keyed window's elements go alone often enough to carry."""
    return st.sampled_from([
        (lambda s: s.filter(lambda r: r.ok is not False).timed_window(5, time=seconds), False),
        (lambda s: s.timed_window(5, slide=2, time=seconds, key="k"), True),
        (lambda s: (s.filter(lambda r: r.n is None or r.n % 3 != 0)
                    .session_window(1.5, time=seconds, key="k")), True),
        (lambda s: s.session_window(1.5, time=seconds), False),
        # Some elements the steps make anew (not carried), some as they came.
        (lambda s: (s.map(lambda r: r if r.n is None or r.n % 2 else tuple(r))
                    .timed_window(5, time=lambda r: r[8] / 1000, key=lambda r: r[0])), True),
    ])


def carries(frame: Any) -> bool:
    plan = frame._jdf.queryExecution().analyzed().toString()
    return "collect_list(struct(seq, seq#" in plan and ", r, r#" in plan


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(ROWS, _pipelines())
def test_windows_of_carried_rows_are_python_s(spark: Any, rows: list[Any],
                                              pipeline: tuple[Any, bool]) -> None:
    build, keyed = pipeline
    rows = sorted(rows, key=lambda r: r[-1])  # in time order: in-process, none is late
    df = spark.createDataFrame(rows, SCHEMA)
    out = build(Stream.from_spark(df)).map(fields).to_dataframe(OUT)
    assert python_passes(out) == 2 and carries(out) == keyed
    # The elements as Spark's tasks make them of its Arrow batches (a
    # timestamp in the session's time zone), whether pickled or carried.
    elements = [x for b in df.toArrow().to_batches() for x in elements_of(b)]
    expected = in_process(elements, lambda s: build(s).map(fields))
    assert sorted((tuple(r) for r in out.collect()), key=repr) == sorted(expected, key=repr)


def test_a_table_with_a_list_column_keeps_its_rows_pickled(spark: Any) -> None:
    # A step may change a list in place: the window must see what it left.
    df = spark.createDataFrame([(1, [1], 0), (2, [2], 100)], "n long, xs array<long>, ms long")

    def build(s: Stream[Any]) -> Stream[Any]:
        return (s.filter(lambda r: r.xs.append(9) is None)
                .timed_window(5, time=seconds, key="n").map(lambda kw: (kw[0], kw[1][0].xs)))

    out = build(Stream.from_spark(df)).to_dataframe("n long, xs array<long>")
    assert not carries(out)
    assert sorted(tuple(r) for r in out.collect()) == [(1, [1, 9]), (2, [2, 9])]
    assert in_process(df.collect(), build) == [(1, [1, 9]), (2, [2, 9])]


def test_a_stream_keeps_its_rows_pickled(spark: Any, tmp_path: Any) -> None:
    # A stream's windows live in Spark's state store, whose schema a
    # checkpoint fixes: its rows keep the schema they always had.
    spark.createDataFrame([(1, 0)], "n long, ms long").write.parquet(str(tmp_path / "in"))
    df = spark.readStream.schema("n long, ms long").parquet(str(tmp_path / "in"))
    out = (Stream.from_spark(df).timed_window(5, time=seconds, key="n")
           .map(lambda kw: len({r.n for r in kw[1]})).to_dataframe("n long"))
    assert out.isStreaming and not carries(out)


def test_a_one_column_table_s_elements_come_back_as_plain_values(spark: Any) -> None:
    df = spark.createDataFrame([(v,) for v in (3, 1, 2, 1)], "v long")
    out = (Stream.from_spark(df).timed_window(5, time=lambda v: 0.0, key=lambda v: v)
           .map(lambda kw: repr([set(kw[1]), type(kw[1][0]).__name__])).to_dataframe("s string"))
    assert carries(out)
    assert sorted(r.s for r in out.collect()) == ["[{1}, 'int']", "[{2}, 'int']", "[{3}, 'int']"]


def test_the_first_pass_sends_input_rows_by_column_and_the_rest_pickled() -> None:
    batch = pa.RecordBatch.from_pydict({"n": [1, 2, 3, 4, 5],
                                        "ms": [0, 10, 12000, 13000, 20000]})
    source = Stream()
    window = (source.map(lambda r: r if r.n != 3 else ("made", r.ms))
              .timed_window(5, time=lambda r: r[1] / 1000, key=lambda r: 0))
    specs: list[NodeSpec] = [source.downstreams[0].describe()]
    route = Route("window", window.describe(), rows="n long, ms long")
    out = {r["seq"]: r for r in next(chain_task(specs, route, COLUMNS)(iter([batch]))).to_pylist()}
    # 1 and 2 share a window: one row of both input rows, their seqs in p.
    # ("made", 12000) was made by the map: pickled, with 4 that shares its
    # window. 5 is an input row alone in its window.
    assert {s: r["kind"] for s, r in out.items()} == {0: ROW, 2: PACK, 4: ROW}
    assert {s: r["r"] for s, r in out.items()} == {
        0: [{"n": 1, "ms": 0}, {"n": 2, "ms": 10}], 2: None, 4: [{"n": 5, "ms": 20000}]}
    assert out[0]["p"] == (0).to_bytes(8, "little") + (1).to_bytes(8, "little")
    assert out[4]["p"] is None
    made, row = opened([2], [0], [PACK], [out[2]["p"]])[3]
    assert (made, tuple(row)) == (("made", 12000), (4, 13000))
