"""What a stateful step of a Spark-resident segment writes reaches its columns exactly.

The keyed and sequential stages' output once crossed pandas: a long column
holding a null went through float64 (2**53 + 1 became 2**53), every NaN
became a null, and a map column failed. These run the same pipelines
in-process and on Spark, static and streaming, and compare the values to
the bit.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from tests.streams_spark.spark_plans import in_process

pytestmark = pytest.mark.spark

NAN = float("nan")
INPUT = "k string, n long, x double"
#: Values pandas changed: a big long beside a null, NaN beside a null, -0.0.
ROWS = [("a", 2**53 + 1, 1.0), ("a", None, NAN), ("a", 2**62 + 1, None), ("b", -(2**63), -0.0),
        ("b", 3, NAN)]
#: The columns written: flat, and nested (arrays, maps and structs carry their values).
OUTPUTS = {
    "flat": "k string, n long, x double, at timestamp",
    "nested": ("k string, xs array<double>, ns array<long>, m map<string, double>, "
               "s struct<n: long, x: double>"),
}
#: Times outside pandas' datetime64[ns] (years 1677 to 2262).
AT = {"a": datetime(2300, 1, 1, 0, 0, 0, 1, tzinfo=UTC), "b": datetime(1600, 1, 1, tzinfo=UTC)}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _exact(value: Any) -> Any:
    """``value`` with every float as its bits (NaN equals NaN, -0.0 is not 0.0)."""
    if isinstance(value, float):
        return ("float", math.copysign(1.0, value), repr(value))
    if isinstance(value, datetime):
        return ("time", value - EPOCH)
    if isinstance(value, dict):
        return sorted((k, _exact(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    return value


def _row(kx: tuple[str, int | None, float | None]) -> dict[str, Any]:
    k, n, x = kx
    return {"k": k, "n": n, "x": x, "xs": [x, None, NAN], "ns": [n, None],
            "m": {"x": x, "nan": NAN}, "s": {"n": n, "x": x}, "at": AT[k]}


def _keyed(s: Stream[Any]) -> Stream[Any]:
    # The latest element of each key, with the one before it: a keyed stage.
    return (s.map(lambda r: (r.k, r.n, r.x))
            .stateful_map(lambda prev, x: (x, [x]), start=None, key=0).map(_row))


def _sequential(s: Stream[Any]) -> Stream[Any]:
    # An unkeyed scan: the sequential stage, in one group.
    return s.map(lambda r: (r.k, r.n, r.x)).scan(lambda _, x: x, start=None).map(_row)


def _written(rows: list[Any], spark: Any) -> list[Any]:
    # Spark gives the times as wall times of its session's time zone.
    zone = ZoneInfo(spark.conf.get("spark.sql.session.timeZone"))
    return sorted((_exact({n: v.replace(tzinfo=zone) if n == "at" else v for n, v in d.items()})
                   for d in (r.asDict(recursive=True) for r in rows)), key=repr)


def _expected(df: Any, pipeline: Any, names: list[str]) -> list[Any]:
    return sorted((_exact({n: d[n] for n in names}) for d in in_process(df.collect(), pipeline)),
                  key=repr)


@pytest.mark.parametrize("columns", OUTPUTS)
@pytest.mark.parametrize("pipeline", [_keyed, _sequential], ids=["keyed", "sequential"])
def test_a_static_stateful_stage_writes_big_longs_nan_and_nulls_as_they_are(
        spark: Any, pipeline: Any, columns: str) -> None:
    df = spark.createDataFrame(ROWS, INPUT).coalesce(1)  # in order: the sequential scan's
    out = pipeline(Stream.from_spark(df)).to_dataframe(OUTPUTS[columns])
    assert _written(out.collect(), spark) == _expected(df, pipeline, out.columns)


@pytest.mark.parametrize("columns", OUTPUTS)
def test_a_streaming_stateful_stage_writes_big_longs_nan_and_nulls_as_they_are(
        spark: Any, tmp_path: Path, columns: str) -> None:
    spark.createDataFrame(ROWS, INPUT).coalesce(1).write.parquet(str(tmp_path / "in"))
    df = spark.readStream.schema(INPUT).parquet(str(tmp_path / "in"))
    out = _keyed(Stream.from_spark(df)).to_dataframe(OUTPUTS[columns])
    query = (out.writeStream.format("memory").queryName("exact_values")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
        got = spark.table("exact_values").collect()
    finally:
        query.stop()
        spark.catalog.dropTempView("exact_values")
    expected = _expected(spark.read.parquet(str(tmp_path / "in")), _keyed, out.columns)
    assert _written(got, spark) == expected


def test_a_payload_stands_for_its_bytes_in_rows_and_gives_its_batches_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from streams_spark import typed_payloads
    from streams_spark.typed_payloads import payload_frame, typed_batches

    batch = pa.RecordBatch.from_pydict({"n": [2**53 + 1, None] * 50, "x": [NAN, None] * 50})
    # Cut into payloads of about 200 bytes (of 1,700), each a row per 100 bytes.
    monkeypatch.setattr(typed_payloads, "PAYLOAD_BYTES", 200)
    frame = payload_frame(batch, batch_rows=typed_payloads.BATCH_BYTES // 100)
    cells = frame.payload.tolist()
    payloads = [c for c in cells if c is not None]
    assert len(payloads) > 1
    assert len(cells) >= sum(len(p) for p in payloads) // 100
    back = pa.Table.from_batches(list(typed_batches(iter([pa.RecordBatch.from_pandas(frame)]))))
    assert _exact(back.to_pylist()) == _exact(batch.to_pylist())
    assert back.column("x").null_count == 50  # the NaNs stay NaN
