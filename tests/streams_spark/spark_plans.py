"""What a Spark-resident segment's plan holds, and what a streaming one writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def python_passes(frame: Any) -> int:
    """How many passes of the frame's plan run Python code (streaming ones too)."""
    plan = frame._jdf.queryExecution().logical().toString()
    # FlatMapGroupsInPandas counts ...WithState too.
    return plan.count("MapInArrow") + plan.count("FlatMapGroupsInPandas")


def in_process(rows: list[Any], build: Any) -> list[Any]:
    """What ``build(source)`` gives in-process for ``rows``, the open windows flushed."""
    from streams import Stream

    source = Stream()
    out = build(source).sink_to_list()
    for r in rows:
        source.emit(r)
    source.close()
    return out  # type: ignore[no-any-return]


def written(spark: Any, frame: Any, tmp_path: Path) -> list[tuple[Any, ...]]:
    """The rows a streaming ``frame`` writes to Parquet, run until its input is read."""
    query = (frame.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "out")).collect())
