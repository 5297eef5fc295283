"""A keyed window on Spark is emitted with its first element's own key, as in-process.

Spark groups a keyed window's elements by one form of the keys a dict takes
as one (2.0 and 2, True and 1, -0.0 and 0.0, every NaN), and the windows
once came out with that form: 2 for 2.0, 1 for True, 0 for -0.0, which a
boolean column refused. In-process a window keeps the key of the element
that opened it.
"""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import streams_spark  # noqa: F401 - registers to_spark(), from_spark(), to_dataframe()
from streams import Stream
from streams.operators._checks import key_bytes

pytestmark = pytest.mark.spark

NAN = float("nan")
#: (time, key): keys a dict takes as one, in the same windows.
ELEMENTS = [(1, 2.0), (2, 2), (3, True), (4, "a"), (6, 1), (7, -0.0), (8, 0.0), (9, NAN),
            (9.5, NAN)]


def _key(k: Any) -> tuple[str, str, float]:
    """A key as its type, repr and sign: 2.0 is not 2, -0.0 is not 0.0."""
    return (type(k).__name__, repr(k), math.copysign(1.0, k) if isinstance(k, float) else 1.0)


def _keys(windows: list[Any]) -> list[Any]:
    return [(_key(k), [x[0] for x in w]) for k, w in windows]


def _run(build: Any, on_spark: bool, elements: list[Any]) -> list[Any]:
    source: Stream[Any] = Stream()
    node = build(source.to_spark() if on_spark else source)
    out = (node.gather() if on_spark else node).sink_to_list()
    for x in elements:
        source.emit(x)
    source.close()
    return out


@pytest.mark.parametrize("build", [
    lambda s: s.timed_window(10, time=0, key=1),
    lambda s: s.timed_window(10, slide=5, time=0, key=1),  # [5, 15) opens with the key 1
], ids=["tumbling", "sliding"])
def test_gathered_windows_keep_the_key_of_their_first_element(spark: Any, build: Any) -> None:
    expected = _keys(_run(build, False, ELEMENTS))
    assert ("bool", "True", 1.0) in [k for k, _ in expected]  # what the case is about
    assert _keys(_run(build, True, ELEMENTS)) == expected


def test_gathered_sessions_keep_their_key(spark: Any) -> None:
    # Each session's elements share one key: the one in-process emits.
    elements = [(1, 2.0), (2, 2.0), (3, True), (4, -0.0), (5, NAN), (6, NAN), (30, 2)]
    build = lambda s: s.session_window(3, time=0, key=1)
    expected = _keys(_run(build, False, elements))
    assert _keys(_run(build, True, elements)) == expected


ROWS = [(2.0, 1, 1.0), (2.0, 5, 2.0), (-0.0, 7, 3.0), (0.0, 3, 4.0)]
COLUMNS = "x double, n long, t double"


def _in_process(df: Any, build: Any) -> list[Any]:
    source: Stream[Any] = Stream()
    out = build(source).sink_to_list()
    for r in df.collect():
        source.emit(r)
    source.close()
    return out


def _by_bool(s: Stream[Any]) -> Stream[Any]:
    # A set: the function runs in Python (Spark would compute a count itself).
    return s.timed_window(10, time="t", key=lambda r: r.n > 4).map(
        lambda kw: {"k": kw[0], "n": len({r.n for r in kw[1]})})


def _by_float(s: Stream[Any]) -> Stream[Any]:
    return s.session_window(10, time="t", key="x").map(
        lambda kw: {"k": repr(kw[0]), "n": len(kw[1])})


def _by_double(s: Stream[Any]) -> Stream[Any]:
    return s.timed_window(10, time="t", key="x").map(lambda kw: {"k": kw[0], "n": len(kw[1])})


@pytest.mark.parametrize("build, schema", [
    (_by_bool, "k boolean, n long"), (_by_float, "k string, n long"),
    (_by_double, "k double, n long"),
], ids=["bool", "float", "negative-zero"])
def test_a_dataframe_of_windows_gets_each_windows_own_key(spark: Any, build: Any,
                                                           schema: str) -> None:
    df = spark.createDataFrame(ROWS, COLUMNS)
    got = [r.asDict() for r in build(Stream.from_spark(df)).to_dataframe(schema).collect()]
    expected = _in_process(df, build)
    assert sorted((_key(d["k"]), d["n"]) for d in got) == sorted(
        (_key(d["k"]), d["n"]) for d in expected)


def test_windows_of_a_dataframe_gathered_keep_their_key(spark: Any) -> None:
    df = spark.createDataFrame(ROWS, COLUMNS)
    source = Stream.from_spark(df)
    got = source.session_window(10, time="t", key="x").gather().sink_to_list()
    source.start()
    expected = _in_process(df, lambda s: s.session_window(10, time="t", key="x"))
    assert sorted((_key(k), len(w)) for k, w in got) == sorted(
        (_key(k), len(w)) for k, w in expected) == [
        (("float", "-0.0", -1.0), 2), (("float", "2.0", 1.0), 2)]


def _by_bool_from(s: Stream[Any]) -> Stream[Any]:
    return s.timed_window(10, time="t", key=lambda r: r.n > 4).map(
        lambda kw: {"k": kw[0], "n": len(kw[1]), "t": kw[1][0].t})


def test_a_streaming_dataframe_of_windows_gets_each_windows_own_key(
        spark: Any, tmp_path: Path) -> None:
    # Micro-batches of one file each: the later two move the watermark past
    # the first one's windows, which a batch after that emits.
    for i, rows in enumerate([ROWS, [(1.0, 1, 100.0)], [(1.0, 1, 200.0)]]):
        spark.createDataFrame(rows, COLUMNS).coalesce(1).write.parquet(str(tmp_path / f"in/{i}"))
    df = (spark.readStream.schema(COLUMNS).option("maxFilesPerTrigger", 1)
          .parquet(str(tmp_path / "in/*")))
    query = (_by_bool_from(Stream.from_spark(df)).to_dataframe("k boolean, n long, t double")
             .writeStream.format("memory").queryName("window_keys")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
        got = sorted(tuple(r) for r in spark.table("window_keys").where("t < 50").collect())
    finally:
        query.stop()
        spark.catalog.dropTempView("window_keys")
    expected = _in_process(spark.createDataFrame(ROWS, COLUMNS), _by_bool_from)
    assert got == sorted((d["k"], d["n"], d["t"]) for d in expected) == [
        (False, 2, 1.0), (True, 2, 2.0)]


def test_collected_windows_take_the_first_elements_key_by_the_key_columns_metadata() -> None:
    from streams_spark.route_columns import window_key_metadata
    from streams_spark.stages import collected_rows

    item = pa.struct([("seq", pa.int64()), ("sub", pa.int64()), ("kind", pa.int8()),
                      ("p", pa.binary())])
    items = pa.array([[{"seq": 2, "sub": 0, "kind": 0, "p": pickle.dumps((1, "y"))},
                       {"seq": 1, "sub": 0, "kind": 0, "p": pickle.dumps((True, "x"))}]],
                     pa.list_(item))
    table = pa.table({"start": [0], "end": [10_000_000], "k": [key_bytes(True)],
                      "items": items})
    # Without the metadata (a table of another version's query): the bytes' key.
    assert [w for _, w in collected_rows(table)] == [(1, [(True, "x"), (1, "y")])]
    meta = {b"SPARK::metadata::json": json.dumps(window_key_metadata(0)).encode()}
    schema = table.schema.set(2, table.schema.field("k").with_metadata(meta))
    keyed = pa.Table.from_arrays(table.columns, schema=schema)
    assert [w for _, w in collected_rows(keyed)] == [(True, [(True, "x"), (1, "y")])]


@pytest.mark.parametrize("build", [
    lambda s: s.timed_window(10, time="t", key=lambda r: (r.x, 1)),
    lambda s: s.session_window(10, time="t", key=lambda r: (r.x, 1)),
], ids=["tumbling", "session"])
def test_a_tuple_key_holding_a_nan_is_a_key_of_its_own_for_each_element(
        spark: Any, build: Any) -> None:
    # In-process a dict finds (nan, 1) only by identity: each element's NaN
    # there opens windows of its own. Spark grouped them by their pickled
    # form, where every NaN is one.
    df = spark.createDataFrame([(NAN, 1, 0.5), (NAN, 2, 0.6), (1.0, 3, 0.7), (1.0, 4, 0.8)],
                               COLUMNS)
    counts = lambda s: build(s).map(lambda kw: (len(kw[1]),))
    out = counts(Stream.from_spark(df)).to_dataframe("n long")
    expected = _in_process(df, counts)
    assert sorted(tuple(r) for r in out.collect()) == sorted(expected) == [(1,), (1,), (2,)]
