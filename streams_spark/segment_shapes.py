"""The shapes a Spark segment refuses: state on a join's paths, two state stages in a query.

:class:`~streams_spark.segment.SparkSegment` admits a node after these
checks of the path it ends (its lineage), read from the nodes' traits:
:func:`state_kind` says what state a node keeps on Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams.core import Stream
from streams.graph import NodeSpec

if TYPE_CHECKING:
    from .segment import SparkSegment

__all__ = ["check_join_paths", "check_one_state_stage", "is_join", "state_kind"]


def state_kind(spec: NodeSpec) -> str | None:
    """The kind of state ``spec`` keeps on Spark (None: none)."""
    traits = spec.traits
    if traits.join is not None:
        return "join"
    if traits.key is not None and traits.stateful:
        return "keyed"
    if traits.event_time is not None:
        return "window"
    if traits.ticked:
        return "clock"
    if traits.stateful and not traits.identity_on_engine:
        return "sequential"
    return None


def is_join(node: Stream[Any]) -> bool:
    """Whether ``node`` is an interval join (Spark's stream-stream join)."""
    return node._traits().join is not None


def check_join_paths(segment: SparkSegment, node: Stream[Any],
                      lineage: list[Stream[Any]]) -> None:
    """Refuse what a join lowered to Spark's stream-stream join cannot run.

    Before the join, each side is one chain of steps without state from
    its ``from_spark()`` (a stateful step before it would be a second
    stateful operator in the query, whose state Spark keeps apart from
    the join's); after it, steps without state: Spark emits the pairs in
    no order, so a step whose result depends on their order has no
    in-process result.
    """
    joins = [n for n in lineage if is_join(n)]
    if not joins:
        return
    if len(joins) > 1:
        raise ValueError(
            f"{joins[-1]._label()}: one join per path in a Spark segment; end "
            f"{joins[0]._label()}'s path with to_dataframe(schema), write it, and read "
            "that back with Stream.from_spark() to join it again")
    (join,) = joins
    before = segment.lineage(join) if node is not join else lineage
    for n in before[:-1]:
        if len(n.upstreams) > 1:
            raise ValueError(
                f"{join._label()}: joins the output of {n._label()}; union the DataFrames "
                "in Spark (df1.unionByName(df2)) and start one Stream.from_spark() from "
                "that, or gather() and join in-process")
        if state_kind(n.describe()) is not None:
            raise ValueError(
                f"{join._label()}: {n._label()} keeps state before it; on Spark a join "
                "runs on steps without state from each Stream.from_spark(). Write "
                f"{n._label()}'s output with to_dataframe() and start the join from "
                "Stream.from_spark() of that, or gather() and join in-process")
    ahead = {id(n) for n in before}
    for n in lineage:
        if id(n) in ahead:
            continue
        if len(n.upstreams) > 1:
            raise ValueError(
                f"{n._label()}: combines the pairs of {join._label()} with another input; "
                "end the join with to_dataframe(schema) and union the DataFrames in Spark")
        if state_kind(n.describe()) is not None:
            raise ValueError(
                f"{n._label()}: keeps state after {join._label()}, whose pairs Spark emits "
                "in no defined order, so it has no in-process result; write the pairs "
                "with to_dataframe() and start a pipeline from them, or gather() each "
                "side and join in-process")


def check_one_state_stage(specs: list[NodeSpec], new: NodeSpec) -> None:
    """Refuse a second Spark-managed state stage in one streaming query.

    Spark runs at most one ``applyInPandasWithState`` per streaming query.
    With a keyed scan or an event-time window the segment runs as a query,
    so it can hold one keyed scan, or sequential steps, not both.
    """
    kinds = [(s, state_kind(s)) for s in [*specs, new]]
    window = next((s for s, k in kinds[:-1] if k == "window"), None)
    if window is not None and kinds[-1][1] is not None:
        # Spark emits a window once its watermark passes; a stateful step
        # after it would need a second watermark-driven stage in the query.
        raise TypeError(
            f"{new.operator}() cannot follow the event-time window {window.name} in a "
            f"Spark segment: {new.name} keeps state, and Spark runs it on the windows' "
            "output only as a second stateful stage of one query, which it refuses. Call "
            f"gather() after the window and run {new.operator}() in-process, or start a "
            "second Spark segment")
    streaming = any(k in ("keyed", "window") for _, k in kinds)
    clocked = [s for s, k in kinds if k == "clock"]
    if streaming and clocked:
        stream_only = next(s for s, k in kinds if k in ("keyed", "window"))
        raise TypeError(
            f"{new.name}: a processing-time {clocked[0].name} and {stream_only.name} cannot "
            "share a Spark segment: the first runs one Spark job per micro-batch with "
            "the driver's clock, the second needs a streaming query. Call gather() "
            "between them and start a second to_spark(), or give the window an "
            "event time (timed_window(interval, time=func, lateness=...))"
        )
    grouped = [s for s, k in kinds if k in ("keyed", "sequential")]
    if not streaming or new not in grouped:
        return
    keyed = [s for s, k in kinds if k == "keyed"]
    if len(keyed) > 1 or (keyed and len(grouped) > 1):
        other = next(s for s in grouped if s is not new)
        raise TypeError(
            f"{new.operator}() cannot run in this Spark segment after {other.name}: "
            "Spark runs one applyInPandasWithState per streaming query, so a segment "
            "with a keyed scan holds no other keyed scan or sequential step "
            f"(accumulate, partition, ...): call gather() before {new.operator}(), or "
            "start a second to_spark() after it"
        )
