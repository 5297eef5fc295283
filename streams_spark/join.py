"""An interval join of two Spark-resident inputs, lowered to Spark's stream-stream join.

``left.join(right, key=, within=, time=, lateness=)`` (see
:class:`streams.operators.joins.IntervalJoin`) between two inputs that start
at ``Stream.from_spark(df)`` and end in ``to_dataframe(schema)`` becomes:

    each side: mapInArrow (its steps, then p = the pickled element,
               k = its pickled canonical key, t = its event time in seconds)
               -> withWatermark(et = timestamp of t, lateness)
    inner join on k_l == k_r and et_l - within <= et_r <= et_l + within
    -> mapInArrow (the steps after the join on the pairs (l, r), typed rows out)

The time condition is the in-process one: each time's nearest microsecond
(:func:`~streams_spark.time_sql.timestamp_of`, as
:func:`~streams.operators.window_bounds.event_micros` takes it in Python),
at most ``within`` (in whole microseconds) apart, so a pair is joined
exactly when in-process. Written as a range on the timestamps, it also lets
Spark bound the state of each side by the other's watermark. Spark's
watermark is whole milliseconds behind its largest time seen, and it
forgets a held row at its bound, not only below: the delay given to Spark
is ``lateness`` rounded up to the millisecond plus one (:func:`spark_delay`),
so Spark forgets only rows that no element still on time in-process can
meet. So with event times in order on each side (or out of order by at
most ``lateness``) the pairs are the in-process ones, as a multiset.

Late elements differ. In-process a late element (below the watermark) is
not joined and goes to ``node.late`` (or the error policy). Spark's
stream-stream join (Spark 4) joins a row behind its watermark with the
partners its state still holds, and drops one at or behind the watermark of
the micro-batch before; an executor has no way to ``node.late``. That
watermark stands at the epoch until Spark has one, so rows at or before
1970-01-01T00:00:00 (an event time of 0 or less) are dropped in the first
micro-batches, where in-process they are joined. For a streaming input each
micro-batch that brings such rows is logged on the driver, as a warning
naming the join, the side and the earliest such element (see
:func:`watch_late`).
"""

from __future__ import annotations

import logging
import pickle
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from streams.core import Stream
from streams.operators._checks import key_function
from streams.operators._late import seconds_of
from streams.operators.window_bounds import micros_of, watermark_micros
from streams.spec import JoinTime, NodeSpec
from streams.stage import Stage

from .codec import DATA, ERROR, carried_error, fail_on_executor, pickled_output
from .column_names import renamed_for_pass
from .event_seconds import on_spark
from .listener import DroppingMarks, count_input, observed, watch_progress
from .plan import chain_plan
from .route_columns import window_key
from .stages import COLUMNS, Driver, Rows, chain_task
from .time_sql import interval, spark_delay, timestamp_of
from .worker_heap import freeze_worker_heap

__all__ = ["SIDE_SCHEMA", "SideMaxima", "SideRows", "join_frame", "pair_task",
           "watch_late"]

logger = logging.getLogger("streams")

#: The rows of one side, on their way to the join.
SIDE_SCHEMA = pa.schema([("p", pa.binary()), ("k", pa.binary()), ("t", pa.float64())])


class SideRows:
    """Receives one side's elements as join rows: pickled element, key and time.

    A failure of a step before the join, or of the join's key or time
    function (an error of the join), goes to its node's policy as in
    :class:`~streams_spark.dataframe.TypedRows`: ``skip`` logs it on the
    executor, ``raise`` fails the job naming the node and the element.
    """

    #: It keeps no positions: a stage hands it all its outputs at once.
    bulk = True

    def __init__(self, join: NodeSpec, side: int, last: NodeSpec | None,
                 nodes: dict[int, tuple[str, str]]) -> None:
        times = join.traits.join
        assert times is not None
        self.join_id = join.id
        self.key = key_function(times.key[side])
        self.time = key_function(times.time[side])
        self.last = last
        self.nodes = nodes
        self.cols: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
        # Keys repeat: pickle each once (canonical: 1, 1.0, True are one key).
        self.keys: dict[Any, bytes] = {}

    def extend(self, values: list[Any], failed: list[int]) -> None:
        """Outputs in order, some of them (at ``failed``) :class:`~streams.stage.Failure`."""
        bad = set(failed)
        ps, ks, ts = self.cols
        for i, x in enumerate(values):
            if i in bad:
                fail_on_executor(carried_error(x.node_id, x.element, x.error), self.nodes)
                continue
            try:
                k = self.key(x)
                t = on_spark(seconds_of(self.time(x)))
                kb = self.keys.get(k)
                if kb is None:
                    kb = self.keys[k] = window_key(k)
            except Exception as e:  # an unhashable key too: as in-process
                fail_on_executor(carried_error(self.join_id, x, e), self.nodes)
                continue
            kind, p = pickled_output(DATA, x, self.last)
            if kind == ERROR:
                fail_on_executor(p, self.nodes)
                continue
            ps.append(p)
            ks.append(kb)
            ts.append(t)

    def batch(self) -> pa.RecordBatch:
        """The rows so far (and start anew)."""
        out = pa.RecordBatch.from_arrays(
            [pa.array(c, f.type) for c, f in zip(self.cols, SIDE_SCHEMA, strict=True)],
            schema=SIDE_SCHEMA)
        for c in self.cols:
            c.clear()
        return out


def pair_task(specs: list[NodeSpec], rows_of: Rows
              ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function running ``specs`` on the joined pairs ``(l, r)``.

    Its input has the pickled left and right elements (``lp``, ``rp``); its
    output is the rows of ``to_dataframe()``'s schema.
    """
    plan = chain_plan(specs)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        rows = rows_of()
        drive = Driver(Stage(plan), rows)
        loads = pickle.loads
        for batch in batches:
            lefts = batch.column(0).to_pylist()
            rights = batch.column(1).to_pylist()
            drive.push_all(0, [(loads(a), loads(b)) for a, b in zip(lefts, rights, strict=True)])
            yield rows.batch()

    return run


class SideMaxima:
    """The largest time each side of a streaming join brought, micro-batch by micro-batch.

    In-process the join's watermark is the smaller of the two sides' largest
    times seen, minus ``lateness``: from the micro-batches before one, it is
    a watermark that an element of that micro-batch certainly finds (it only
    grows within it), to the microsecond, where Spark's is whole milliseconds.

    >>> m = SideMaxima(lateness=0.5)
    >>> m.take(0, ("q", 0), 10.0), m.take(1, ("q", 0), 12.0), m.take(0, ("q", 1), 11.0)
    (None, None, 9500000)
    """

    def __init__(self, lateness: float) -> None:
        self._late_us = micros_of("join", "lateness", lateness, zero=True)
        self._lock = threading.Lock()
        # query id -> per side: [max of the micro-batches done, this micro-batch's id, its max]
        self._queries: dict[str, list[list[Any]]] = {}

    def take(self, side: int, batch: tuple[str, int], max_t: float) -> int | None:
        """Record ``side``'s largest time in ``batch`` (query id, batch id); the in-process
        watermark before that micro-batch, in microseconds (None: no partner side yet)."""
        query, bid = batch
        with self._lock:
            sides = self._queries.setdefault(query, [[None, -1, None], [None, -1, None]])
            for s in sides:  # fold in the micro-batches before this one
                if s[1] < bid and s[2] is not None:
                    s[0] = s[2] if s[0] is None else max(s[0], s[2])
                    s[2] = None
            maxima = [s[0] for s in sides]
            me = sides[side]
            me[1], me[2] = bid, max_t if me[2] is None else max(me[2], max_t)
        if None in maxima:
            return None
        return int(watermark_micros(min(maxima), self._late_us))  # as IntervalJoin's


def _side(df: Any, plan: Any, prefix: str, times: JoinTime, label: str,
          maxima: tuple[SideMaxima, int], join: Stream[Any]) -> Any:
    """The rows of one side as columns ``{prefix}p``, ``k``, ``et`` (watermarked; ``et`` the
    timestamp of ``t``, its nearest microsecond).

    A streaming side is observed for the rows it brings behind the watermark
    (see :func:`watch_late`, for as long as ``join`` may need it): ``maxima``
    and the side's index in it.
    """
    from pyspark.sql import functions as F

    frame = df.mapInArrow(plan, "p binary, k binary, t double")  # SIDE_SCHEMA
    if frame.isStreaming:
        frame, name = observed(frame, label, F.min("t").alias("min_t"),
                               F.min_by("p", "t").alias("first"), F.max("t").alias("max_t"))
        watch_late(frame.sparkSession, name, label, maxima, join)
    return (frame.select(F.col("p").alias(f"{prefix}p"), F.col("k").alias(f"{prefix}k"),
                         F.expr(timestamp_of("t")).alias(f"{prefix}et"))
            .withWatermark(f"{prefix}et", spark_delay(times.lateness)))


def join_frame(segment: Any, join: Stream[Any], output: Stream[Any], after: list[NodeSpec],
               rows_of: Rows, schema: Any, nodes: dict[int, tuple[str, str]]) -> Any:
    """The DataFrame of ``output.to_dataframe()`` through ``join``: each side, the join,
    ``after`` (the steps from the join to ``output``).

    ``segment`` is the join's :class:`~streams_spark.segment.SparkSegment`;
    ``rows_of`` makes the receiver of the typed output rows (of ``schema``).
    """
    from pyspark.sql import functions as F

    spec = join.describe()
    times = spec.traits.join
    assert times is not None
    sides = []
    steps = segment.side_nodes(join, output)
    maxima = SideMaxima(times.lateness)
    for side, (up, prefix) in enumerate(zip(join.upstreams, ("l", "r"), strict=True)):
        ((entry, specs),) = segment.paths(up)  # one path: a union before a join is refused
        rows = _side_rows(spec, side, specs[-1] if specs else None, nodes)
        df, names = renamed_for_pass(count_input(entry.df, steps[side], entry._label))
        plan = chain_task(specs, None, COLUMNS, rows, names)
        label = f"{join._label()} ({('left', 'right')[side]} side, from {entry._label()})"
        sides.append(_side(df, plan, prefix, times, label, (maxima, side), join))
    left, right = sides
    within = f"INTERVAL {interval(times.within)}"
    condition = ((F.col("lk") == F.col("rk"))
                 & F.expr(f"ret >= let - {within}") & F.expr(f"ret <= let + {within}"))
    pairs = left.join(right, condition, "inner").select("lp", "rp")
    return pairs.mapInArrow(pair_task(after, rows_of), schema)


def _side_rows(spec: NodeSpec, side: int, last: NodeSpec | None,
               nodes: dict[int, tuple[str, str]]) -> Rows:
    def make() -> SideRows:
        return SideRows(spec, side, last, nodes)
    return make


def watch_late(session: Any, name: str, label: str, maxima: tuple[SideMaxima, int],
               join: Stream[Any]) -> None:
    """Log, on the driver, each micro-batch that brings a side's rows behind the watermark.

    ``name`` is the metric observed on the side (its rows, earliest, latest
    time and earliest element per micro-batch), ``maxima`` the join's
    :class:`SideMaxima` and the side's index. Spark's join joins such a row with
    the partners its state still holds (those further back are gone), or
    drops it behind the micro-batch before's watermark, where in-process the
    element is late, unjoined, and goes to ``node.late``. A row is reported
    when its time is below Spark's watermark plus the millisecond
    :func:`spark_delay` adds, or below the in-process watermark the
    micro-batches before set (to the microsecond): late in-process too. Spark's first watermark,
    at the epoch, is no watermark yet: a row at or before it (a time of 0 or
    less) is then dropped by Spark, and reported, while in-process it is
    joined.
    """
    marks = DroppingMarks()
    sides, side = maxima

    def report(progress: Any) -> None:
        seen = (progress.observedMetrics or {}).get(name)
        previous, watermark = marks.take(progress)  # microseconds
        if seen is None or not seen["rows"] or seen["min_t"] is None:
            return
        in_process = sides.take(side, (str(progress.id), int(progress.batchId)), seen["max_t"])
        # In whole microseconds: a row at the in-process watermark is on time.
        earliest = round(seen["min_t"] * 1_000_000)
        at_epoch = earliest <= 0 and previous is not None and previous <= 0
        late = ((watermark and earliest < watermark + 1000)
                or (in_process is not None and earliest < in_process))
        if not at_epoch and not late:
            return
        try:
            first: Any = pickle.loads(seen["first"])
        except Exception:  # a class the driver cannot import: say so, not fail
            first = "<an element the driver cannot unpickle>"
        shown = (progress.eventTime or {}).get("watermark")
        if not at_epoch:
            if in_process is not None and earliest < in_process:
                shown = f"{in_process / 1_000_000!r} s (Spark's: {shown})"
            what = ("behind the join's watermark %s, the earliest at %r: %.120r. In-process "
                    "such a late element is not joined (it goes to node.late); Spark joins it "
                    "with the partners its state still holds, or drops it behind the micro-"
                    "batch before's watermark. Raise lateness= to cover the disorder")
        else:
            what = ("at or before the epoch, where Spark's watermark stood for this micro-batch "
                    "(it is %s now), the earliest at %r: %.120r. Spark's join drops them; "
                    "in-process they are joined. Give times after 1970-01-01 (time= plus an "
                    "offset), or join in Python (gather() before the join)")
        logger.warning("%s: micro-batch %d of query %s brought rows " + what, label,
                       progress.batchId, progress.name or progress.id, shown, seen["min_t"],
                       first)

    watch_progress(session, name, report, [join])
