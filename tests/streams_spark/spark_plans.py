"""What a Spark-resident segment's plan holds, and what a streaming one writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def python_passes(frame: Any) -> int:
    """How many passes of the frame's plan run Python code (streaming ones too)."""
    plan = frame._jdf.queryExecution().logical().toString()
    # FlatMapGroupsInPandas counts ...WithState too.
    return plan.count("MapInArrow") + plan.count("FlatMapGroupsInPandas")


def filters(frame: Any) -> list[list[str]]:
    """The filters of the frame's optimized plan, top down, each as its conjuncts in order."""
    found: list[list[str]] = []

    def conjuncts(e: Any) -> list[str]:
        if e.nodeName() == "And":
            return conjuncts(e.left()) + conjuncts(e.right())
        return [str(e.toString())]

    def walk(node: Any) -> None:
        if node.nodeName() == "Filter":
            found.append(conjuncts(node.condition()))
        children = node.children()
        for i in range(children.size()):
            walk(children.apply(i))

    walk(frame._jdf.queryExecution().optimizedPlan())
    return found


def in_process(rows: list[Any], build: Any) -> list[Any]:
    """What ``build(source)`` gives in-process for ``rows``, the open windows flushed."""
    from streams import Stream

    source = Stream()
    out = build(source).sink_to_list()
    for r in rows:
        source.emit(r)
    source.close()
    return out  # type: ignore[no-any-return]


def check_windows(spark: Any, build: Any, schema: str, *, rows: list[Any], columns: str,
                  native: bool = True) -> list[Any]:
    """``build``'s output on Spark equals in-process; aggregated in the JVM if ``native``.

    ``rows`` of ``columns`` (a DDL string) are the input; ``schema`` the output's.
    """
    from streams import Stream

    df = spark.createDataFrame(rows, columns)
    out = build(Stream.from_spark(df)).to_dataframe(schema)
    assert (python_passes(out) == 0) == native, out._jdf.queryExecution().logical()
    got = sorted((tuple(r) for r in out.collect()), key=repr)
    expected = [v if isinstance(v, tuple) else (v,) for v in in_process(df.collect(), build)]
    assert got == sorted(expected, key=repr)
    return got


def check_or_fail_alike(spark: Any, build: Any, schema: str, *, rows: list[Any],
                        columns: str) -> None:
    """``build``'s output on Spark, aggregated in the JVM, equals in-process, or both fail.

    In-process, a ``TypeError`` (a None compared); on Spark, its message.
    """
    import pytest

    from streams import Stream

    df = spark.createDataFrame(rows, columns)
    try:  # the pipeline's TypeError only, not one of this helper's own
        outputs = in_process(df.collect(), build)
    except TypeError as e:
        expected: Any = e
    else:
        expected = sorted((v if isinstance(v, tuple) else (v,) for v in outputs), key=repr)
    out = build(Stream.from_spark(df)).to_dataframe(schema)
    assert python_passes(out) == 0
    if isinstance(expected, TypeError):
        with pytest.raises(Exception, match="not supported between instances of 'NoneType'"):
            out.collect()
    else:
        assert sorted((tuple(r) for r in out.collect()), key=repr) == expected


def written(spark: Any, frame: Any, tmp_path: Path) -> list[tuple[Any, ...]]:
    """The rows a streaming ``frame`` writes to Parquet, run until its input is read."""
    query = (frame.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "out")).collect())


def both(xs: list[Any], build: Any, **kwargs: Any) -> tuple[list[Any], list[Any]]:
    """``build``'s outputs over ``xs`` through ``to_spark(**kwargs)``, and in-process."""
    from streams import Stream

    local = Stream()
    expected = build(local).sink_to_list()
    for x in xs:
        local.emit(x)
    local.close()
    source = Stream()
    out = build(source.to_spark(**kwargs)).gather().sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return list(out), list(expected)
