"""Stream mode: one Structured Streaming query per segment.

Keyed scans and event-time windows need state that Spark manages across
micro-batches (its state store, versioned by batch id and saved with the
offsets in the checkpoint). Such a plan runs as one streaming query:

    file source (one Parquet file per micro-batch)
      -> mapInArrow (fused chain, routing columns)
      -> groupBy(k).applyInPandasWithState (keyed scan; applyInArrow on a
         static DataFrame, whose groups come once)
      -> withWatermark + groupBy(window(t, size, slide) or session_window(t, gap),
         key) (an event-time window)
      -> mapInArrow (the windows in order, and the chain after them)
      -> foreachBatch (results back to the driver, by batch id)

The driver writes a micro-batch as a file, runs the query until it has
processed everything available, and emits the results in batch order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from streams.spec import EventTime
from streams_spark.round_trips import select_expr

from .batch import encode_chunks
from .codec import (
    DATA,
    ERROR,
    FLUSH_MARK,
    WINDOW,
    WINDOW_ITEMS,
    mark_error,
    unpack,
    value_of,
)
from .column_names import renamed_for_pass
from .input_rows import carries
from .late import LateElements
from .node_failures import reraise_as_info
from .plan import ChainStage, KeyedStage, Plan, Route, WindowStage, route_of
from .route_columns import window_key_metadata
from .routing import FAR_FUTURE, MID_SCHEMA, MID_SPANS
from .sql_text import named
from .stages import (
    COLUMNS,
    WINDOWS,
    Rows,
    chain_task,
    collected_rows,
    keyed_scan,
    sequential_chain,
)
from .storage import location, scratch_location
from .time_sql import spark_window, timestamp_of, watermark_delay
from .typed_payloads import PAYLOADS, typed_batches
from .window_failures import SetAside, failure_accumulator, needs_accumulator, taken
from .window_sessions import sessions

__all__ = ["StreamRunner", "build_query_frame", "window_groups"]

#: The kinds of rows that reach ``gather()`` (or a node's error policy).
DELIVERED = (DATA, WINDOW, WINDOW_ITEMS, ERROR)

_INPUT = pa.schema([("seq", pa.int64()), ("p", pa.binary())])


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _carrying(route: Route | None, df: Any, first: bool | str,
              names: tuple[str, ...] | None = None) -> Route | None:
    """``route``, with the input rows carried by column where they can be.

    They can from a pass over a static DataFrame's own rows to a window
    (see :mod:`streams_spark.input_rows`). Only a keyed window's: without a
    key, a batch's rows share few windows, in large groups, which travel
    more cheaply pickled (Nexmark's q5 took 1.10x the time with its rows as
    columns, q7 0.99x; its packs of sliding windows are copied into each).
    Not from columns renamed for the pass (``names``, see
    :mod:`streams_spark.column_names`): the rows would carry Spark's names.
    """
    if route is None or route.kind != "window" or route.spec is None:
        return route
    event_time = route.spec.traits.event_time
    if (event_time is None or event_time.key is None or first != COLUMNS or df.isStreaming
            or names is not None or not carries(df.schema)):
        return route
    return replace(route, rows=df.schema)


def _setting_aside(route: Route | None, aside: SetAside | None) -> Route | None:
    """``route``, bound for a window, with where its failures are set aside."""
    if route is None or route.kind != "window" or aside is None:
        return route
    return replace(route, failures=aside)


def _routed_schema(route: Route | None) -> Any:
    """The Spark schema of the rows a pass routes for ``route``."""
    from pyspark.sql.types import ArrayType

    schema = _spark_schema(MID_SPANS if route is not None and route.spans else MID_SCHEMA)
    return (schema if route is None or route.rows is None
            else schema.add("r", ArrayType(route.rows, containsNull=False)))


def build_query_frame(df: Any, plan: Plan, first: bool | str = True,
                      output: tuple[Rows, Any] | None = None, failures: Any = None) -> Any:
    """Apply the plan's stages to the streaming DataFrame ``df``.

    ``df`` has ``seq`` and ``p`` (``first``), or the row columns, or is the
    user's DataFrame (``first`` is :data:`~streams_spark.stages.COLUMNS`). Returns a
    DataFrame of rows (``seq``, ``sub``, ``kind``, ``p``), or of windows
    (``start``, ``items``) when the plan ends with one; read either with
    :func:`~streams_spark.stages.collected_rows`. With ``output`` (a maker of
    the receiver of the last stage's outputs, and the Spark schema of what
    it makes), the last stage writes those rows instead (``to_dataframe()``).
    ``failures``: the accumulator of the failures set aside on the way to a
    window, which the driver reads (see :mod:`streams_spark.window_failures`).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    names = None  # the user's column names, where the pass needs others
    if first == COLUMNS:
        df, names = renamed_for_pass(df)
    mid = _routed_schema(None)  # rows routed for no stateful stage
    static = not df.isStreaming
    state = _spark_schema(pa.schema([("s", pa.binary())]))
    stages = list(plan.stages)
    aside = (SetAside(plan.specs, failures)
             if any(isinstance(s, WindowStage) for s in stages) else None)
    rows_of, out_schema = output if output is not None else (None, mid)
    # Rows reaching a stateful stage must carry its routing columns (k, t);
    # each stage computes them for the next one on the rows it emits, so no
    # pass is spent on routing alone (except before a first stateful stage).
    routed = False
    spans = False  # the rows carry spans (a pack's last time, ``u``)
    carried = False  # ... and input rows as columns (``r``)
    for i, stage in enumerate(stages):
        nxt = stages[i + 1] if i + 1 < len(stages) else None
        last = nxt is None and output is not None  # writes the output rows itself
        # A chain's mapInArrow pass over a static DataFrame may send spans.
        route = _setting_aside(route_of(nxt, static and isinstance(stage, ChainStage)
                                        and not stage.sequential), aside)
        if isinstance(stage, ChainStage) and not stage.sequential:
            route = _carrying(route, df, first, names)
            spans = route is not None and route.spans
            carried = route is not None and route.rows is not None
            df = df.mapInArrow(chain_task(stage.specs, route, first, rows_of if last else None,
                                          names),
                               out_schema if last else _routed_schema(route))
            first = False
            routed = True
            continue
        if not routed:
            route_in = _carrying(_setting_aside(route_of(stage, static), aside), df, first,
                                 names)
            spans = route_in is not None and route_in.spans
            carried = route_in is not None and route_in.rows is not None
            df = df.mapInArrow(chain_task([], route_in, first, None, names),
                               _routed_schema(route_in))
            first = False
        if nxt is not None and isinstance(nxt, ChainStage) and not nxt.sequential:
            route = None  # that chain routes its own outputs
        if isinstance(stage, ChainStage | KeyedStage):
            to = rows_of if last else None
            # A static DataFrame (a backfill): each group comes once, whole,
            # to applyInArrow, Arrow both ways.
            group = (sequential_chain(stage.specs, route, to, closes=static, arrow=static)
                     if isinstance(stage, ChainStage)
                     else keyed_scan(stage.spec, route, stage.after, to, stage.buckets,
                                     closes=static, arrow=static))
            if static:
                schema = out_schema if last else mid
                df = df.groupBy("k").applyInArrow(_once(group, _arrow_schema(schema, df)),
                                                  schema)
            elif last:
                # The typed rows cross pandas as payloads (see typed_payloads).
                df = df.groupBy("k").applyInPandasWithState(
                    group, PAYLOADS, state, "append", GroupStateTimeout.NoTimeout
                ).mapInArrow(typed_batches, out_schema)
            else:
                df = df.groupBy("k").applyInPandasWithState(
                    group, mid, state, "append", GroupStateTimeout.NoTimeout)
            routed = True
        else:
            event_time = stage.spec.traits.event_time
            assert event_time is not None
            # The end-of-stream row is aggregated too, into a far-future window
            # that never closes: a filter here would be pushed below the
            # watermark, which would then never see the row.
            df = df.withColumn("et", F.expr(timestamp_of("`t`")))
            if spans:
                df = df.withColumn("lt", F.expr(timestamp_of("coalesce(`u`, `t`)")))
            df = _windows(df.withWatermark("et", watermark_delay(event_time)), event_time,
                          "lt" if spans else None, carried)
            spans = carried = False
            if nxt is None and output is None:
                return df  # windows are put in order on the driver: collected_rows()
            if last:
                return df.mapInArrow(chain_task([], None, WINDOWS, rows_of), out_schema)
            # The chain after the window (stateless: a stateful step there is
            # refused) takes the aggregated windows itself, in one pass.
            first = WINDOWS
            routed = False
    if output is not None:
        if first:  # no stage at all: the input is the output
            df = df.mapInArrow(chain_task([], None, first, rows_of, names), out_schema)
        return df
    if first:
        df = df.mapInArrow(chain_task([], None, first, None, names), mid)
    return df.select("seq", "sub", "kind", "p")


def window_groups(rows: Any, event_time: EventTime, keys: list[str],
                  parts: list[tuple[str, str]], keyed: bool, time: str = "__et",
                  last: str | None = None) -> Any:
    """``rows`` by window (``__w``, Spark's struct) of the column ``time`` and ``keys``.

    Each group's row has each of ``parts`` (``(SQL, name)`` of aggregates)
    under its name. A static DataFrame's ``keyed`` sessions are cut from each
    key's rows in time order (:mod:`streams_spark.window_sessions`), the same
    sessions as Spark's ``session_window()``, where a row may be a span of
    elements ending at the time column ``last``; the rest are Spark's windows.
    """
    if event_time.session and keyed and not rows.isStreaming:
        return sessions(rows, event_time, keys, parts, time, last)
    assert last is None, "spans are cut by sessions() only"
    return rows.groupBy(spark_window(event_time, time).alias("__w"), *keys).agg(
        *[named(sql, name) for sql, name in parts])


def _windows(df: Any, event_time: EventTime, last: str | None = None,
             carried: bool = False) -> Any:
    """Spark's windows of ``event_time`` over the rows of ``df`` (watermarked ``et``).

    One row per window and key: ``start`` and ``end`` (microseconds), ``k``
    (the pickled key, with the key function in its metadata; null without a
    key) and ``items``, the window's rows;
    with ``bounds``, a ``bounds`` column too, which tells
    :func:`~streams_spark.stages.collected_rows` and the stage after the
    window to emit each window with its bounds. ``last``: the column of a
    row's last time, where rows are spans (see :func:`window_groups`).
    ``carried``: rows carry input rows as columns, ``r`` (see
    :mod:`streams_spark.input_rows`).
    """
    # By key always: null without one (Spark refuses a session window
    # without a grouping key; the end-of-stream row's b"" is a group apart).
    fields = "`seq`, `sub`, `kind`, `p`, `r`" if carried else "`seq`, `sub`, `kind`, `p`"
    groups = window_groups(df, event_time, ["k"], [(f"collect_list(struct({fields}))", "items")],
                           event_time.key is not None, time="et", last=last)
    columns = ["unix_micros(`__w`.`start`) AS `start`", "unix_micros(`__w`.`end`) AS `end`",
               "k", "items"]
    if event_time.bounds:
        columns.append("true AS `bounds`")
    windows = select_expr(groups, columns)
    if event_time.key is None:
        return windows
    # Whoever reads the windows emits each with its first element's key.
    return windows.withMetadata("k", window_key_metadata(event_time.key))


class _NoState:
    """The group state of a static DataFrame: empty, and nothing to keep."""

    exists = False

    def update(self, value: Any) -> None:
        return None


def _once(group: Any, schema: pa.Schema) -> Any:
    """A group-state function of Arrow (``arrow=True``) as an ``applyInArrow`` function.

    For a static input, whose groups come once: with no state to keep. The
    output is cast to ``schema`` (see :func:`_arrow_schema`).
    """

    def run(key: tuple[pa.Scalar, ...], table: pa.Table) -> pa.Table:
        out = pa.Table.from_batches(list(group(tuple(k.as_py() for k in key), iter([table]),
                                               _NoState())))
        return out if out.schema == schema else out.cast(schema)

    return run


def _arrow_schema(schema: Any, df: Any) -> pa.Schema:
    """The Spark ``schema`` as the Arrow schema ``applyInArrow`` requires of ``df``'s groups.

    It casts nothing: a time column must be in UTC (typed rows are in the
    session's time zone, the same instants), strings and binaries of the
    size the session's ``useLargeVarTypes`` says.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    large = df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
    return to_arrow_schema(schema, timezone="UTC", prefers_large_types=large.lower() == "true")


class StreamRunner:
    """Run a plan as one streaming query fed micro-batch by micro-batch.

    Parameters
    ----------
    session : SparkSession
    plan : Plan
    checkpoint : str, optional
        The query's checkpoint location, a path or URI as Spark reads it
        (``file://``, ``hdfs://``, ``s3a://``); the micro-batches wait there
        for the query, in ``inbox``, which executors on every node read. If
        None, a scratch directory (see
        :func:`~streams_spark.storage.scratch_location`), removed by :meth:`stop`.
    owner : Stream, optional
        The node that starts the segment: the query is named after it.
    """

    def __init__(self, session: Any, plan: Plan, checkpoint: str | None = None,
                 owner: Any = None) -> None:
        from pyspark.sql.types import StructType

        self.session = session
        self.plan = plan
        self._scratch = scratch_location(session) if checkpoint is None else None
        self.checkpoint = (location(checkpoint, session) if checkpoint is not None
                           else self._scratch.child("checkpoint"))  # type: ignore[union-attr]
        self.inbox = self.checkpoint.child("inbox")
        self.inbox.makedirs()
        files = sorted(f for f in self.inbox.names() if f.endswith(".parquet"))
        self.files = len(files)
        # Dense, across restarts too: a window's row keeps the low bits of
        # its first element's seq (streams_spark.stages.FIRST_BITS).
        self.next_seq = 0
        for name in reversed(files):  # the last one may be the empty one of a close
            after = _seq_after(self.inbox.read(name))
            if after is not None:
                self.next_seq = after
                break
        self.results: dict[int, list[tuple[int, bytes]]] = {}
        self.delivered = -1
        windows = any(isinstance(s, WindowStage) for s in plan.stages)
        #: Names the elements Spark's watermark drops (see streams_spark.late).
        self.late = LateElements(plan) if windows else None
        src = (session.readStream.schema(StructType.fromJson(_spark_schema(_INPUT).jsonValue()))
               .option("maxFilesPerTrigger", 1).parquet(self.inbox.uri))
        #: The failures set aside on the way to the window (None: none can be).
        self.failures = (failure_accumulator(session)
                         if windows and needs_accumulator(plan.specs) else None)
        frame = build_query_frame(src, plan, failures=self.failures)
        self.query = (frame.writeStream.foreachBatch(self._collect)
                      .queryName(query_name(owner) if owner is not None
                                 else f"streams_{id(self)}")
                      .outputMode("append")
                      .option("checkpointLocation", self.checkpoint.child("query").uri)
                      .trigger(processingTime="0 seconds").start())

    def _collect(self, df: Any, batch_id: int) -> None:
        rows = collected_rows(df.toArrow())  # runs the micro-batch's job
        self.results[batch_id] = [*taken(self.failures), *rows]

    def _write(self, table: pa.Table, elements: list[Any] | None = None) -> None:
        if elements and self.late is not None:
            self.late.feed(self.files, elements)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        # Not fsync'ed: a lost inbox file is a micro-batch the driver reruns.
        self.inbox.write_atomic(f"batch-{self.files:012d}.parquet",
                                sink.getvalue().to_pybytes(), fsync=False)
        self.files += 1

    def _drain(self) -> list[tuple[int, bytes]]:
        try:
            self.query.processAllAvailable()
        except Exception as e:
            reraise_as_info(e)
            raise
        out: list[tuple[int, bytes]] = self._late_rows()
        for bid in sorted(self.results):
            if bid > self.delivered:
                out.extend(r for r in self.results.pop(bid) if r[0] in DELIVERED)
                self.delivered = bid
        return out

    def _late_rows(self) -> list[tuple[int, bytes]]:
        """Error rows for elements Spark's watermark dropped (never silently)."""
        if self.late is None:
            return []
        return self.late.rows(self.query.recentProgress)

    def run(self, elements: list[Any], flush: bool = False) -> list[Any]:
        """Run one micro-batch (and, with ``flush``, the end of stream).

        Returns its outputs in order, errors as marked records (see
        :func:`streams_spark.codec.is_error`).
        """
        return [mark_error(p) if kind == ERROR else value_of(kind, p)
                for kind, p in self._run(elements, flush)]

    def _run(self, elements: list[Any], flush: bool) -> list[tuple[int, Any]]:
        out: list[tuple[int, Any]] = []
        if elements:
            chunks = encode_chunks(elements, self.next_seq, parts=1)
            self.next_seq += len(elements)
            self._write(chunks.rename_columns(_INPUT.names), elements)
            out.extend(self._drain())
        windows = any(isinstance(s, WindowStage) for s in self.plan.stages)
        holds = windows or any(isinstance(s, ChainStage) and s.sequential
                               for s in self.plan.stages)
        if flush and holds:
            # One control row flushes sequential steps and moves the watermark
            # past every window; the empty batch after it lets Spark emit the
            # windows that closed. Plans that hold nothing skip both batches.
            self._write(_control_table(self.next_seq))
            out.extend(self._drain())
            if windows:
                self._write(pa.table({"seq": pa.array([], pa.int64()),
                                      "p": pa.array([], pa.binary())}, schema=_INPUT))
                out.extend(self._drain())
        return out

    def stop(self) -> None:
        """Stop the query and remove temporary files."""
        self.query.stop()
        if self._scratch is not None:
            self._scratch.delete()


def _seq_after(parquet: bytes) -> int | None:
    """The ``seq`` after the elements of an inbox file (None: it has no rows)."""
    table = pq.read_table(pa.BufferReader(parquet))
    if not table.num_rows:
        return None
    last = pc.index(table.column("seq"), pc.max(table.column("seq"))).as_py()
    seq, p = table.column("seq")[last].as_py(), table.column("p")[last].as_py()
    # A chunk holds the elements seq, seq + 1...; the control row of a close
    # takes no seq of its own.
    return int(seq) if p == FLUSH_MARK else int(seq) + len(unpack(p))


def _control_table(seq: int) -> pa.Table:
    # The control row enters as an element would; the first chain turns any
    # row whose payload is this marker into a FLUSH row.
    return pa.table({"seq": pa.array([seq], pa.int64()),
                     "p": pa.array([FLUSH_MARK], pa.binary())}, schema=_INPUT)


_names: dict[str, int] = {}


def query_name(node: Any) -> str:
    """A name for the Spark query of ``node``'s segment, unique in this process.

    Spark shows it in its UI and in ``StreamingQueryListener`` events.
    """
    base = "".join(c if c.isalnum() else "_" for c in f"streams_{node._label()}")[:60]
    _names[base] = _names.get(base, 0) + 1
    return base if _names[base] == 1 else f"{base}_{_names[base]}"


assert FAR_FUTURE > 0
