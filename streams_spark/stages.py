"""The Spark operations of streaming plans: worker functions and DataFrame steps.

Rows between stages follow :data:`streams_spark.codec.ROW_SCHEMA` plus two
routing columns computed, once per element, by the chain before the stage
that needs them: ``k`` (the group of a keyed scan: a bucket of keys, see
:func:`key_bucket`) and ``t`` (the event time of a window, in seconds).
Data bound for a stateful stage travels packed, one row per group (see
:mod:`streams_spark.packs`). Rows of kind ``FLUSH`` are control rows: they
pass every step untouched; at the end of the stream one of them carries a
far-future event time that moves the watermark past every window.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from streams.operators._checks import key_function
from streams.spec import NodeSpec
from streams.stage import Stage

from .codec import (
    CHUNK,
    DATA,
    ERROR,
    FLUSH,
    FLUSH_MARK,
    PACK,
    STATE,
    WINDOW,
    WINDOW_ITEMS,
    carried_error,
    elements_of,
    pickled_output,
    unpack,
    value_of,
)
from .packs import opened, pack_payload, windows_of
from .plan import Route, by_id, by_position, chain_plan

__all__ = [
    "FLUSH", "FLUSH_MARK", "MID_SCHEMA", "ONE_GROUP", "Driver", "chain_task",
    "collected_rows", "keyed_scan", "sequential_chain", "window_items",
]

#: The key of the one group of a sequential stage (never a pickled key).
ONE_GROUP = b"\x01"
#: A time after every real event time (year 2200), for the end-of-stream row.
FAR_FUTURE = 7.3e9

MID_SCHEMA = pa.schema([
    ("seq", pa.int64()), ("sub", pa.int64()), ("kind", pa.int8()), ("p", pa.binary()),
    ("k", pa.binary()), ("t", pa.float64()),
])


class NodeFailure(Exception):
    """Raised in a worker to fail the query with a node's error.

    The message carries the pickled ``(node id, element, exception)`` after
    :data:`MARK`, so the driver can apply the node's policy.
    """

    MARK = "streams-spark-node-error:"


#: Keys of a keyed scan are spread over this many groups (each holding the
#: states of its keys): one group per key would cost PySpark ~2 ms per key
#: and micro-batch, and one row per key and window on the way to a window.
KEY_BUCKETS = 16


def key_bucket(kbytes: bytes) -> bytes:
    """The group of a pickled key (the same in every worker process).

    Examples
    --------
    >>> key_bucket(pickle.dumps("a", protocol=5)) == key_bucket(pickle.dumps("a", protocol=5))
    True
    """
    return b"%d" % (zlib.crc32(kbytes) % KEY_BUCKETS)


def _route(route: Route | None) -> Callable[[Any], tuple[bytes | None, float | None]]:
    """The routing columns ``k`` and ``t`` of an element bound for ``route``."""
    if route is None:
        return lambda x: (None, None)
    if route.kind == "group":
        return lambda x: (ONE_GROUP, None)
    assert route.spec is not None
    traits = route.spec.traits
    if route.kind == "key":
        keyf = key_function(traits.key)
        dumps = pickle.dumps
        # Keys repeat: pickle each once. Equal keys share one pickle, as they
        # share one state in-process (a dict: 1, 1.0 and True are one key).
        pickled: dict[Any, bytes] = {}

        def by_key(x: Any) -> tuple[bytes, None]:
            k = keyf(x)
            try:
                return pickled[k], None
            except KeyError:
                b = pickled[k] = dumps(k, protocol=5)
                return b, None
            # An unhashable key raises TypeError: an error of the node, as in-process.

        return by_key
    assert traits.event_time is not None
    timef = key_function(traits.event_time.time)

    def when(x: Any) -> tuple[None, float]:
        t = timef(x)
        # Seconds, or a datetime taken as its POSIX timestamp (as in-process).
        return None, float(t if isinstance(t, int | float) else t.timestamp())

    return when


class Router:
    """Rows for the next stage, routed: ``k`` and ``t`` computed once per element.

    Data bound for a stateful stage is packed (see :mod:`streams_spark.packs`):
    one row per key of a keyed scan, per window of an event-time window, or
    for the one group of a sequential stage, holding that group's elements.

    Parameters
    ----------
    route_to : Route, optional
        Where the rows go (None: no routing columns needed).
    last : NodeSpec, optional
        The node that produced the values (named when one cannot be pickled).
    """

    def __init__(self, route_to: Route | None, last: NodeSpec | None) -> None:
        self.route_to = route_to
        self.last = last
        self.route = _route(route_to)
        kind = route_to.kind if route_to is not None else None
        self.to_window = kind == "window"
        self.grouped = kind == "group"
        self.keyed = kind == "key"
        self.cols: dict[str, list[Any]] = {n: [] for n in MID_SCHEMA.names}
        self._appends = tuple(c.append for c in self.cols.values())
        # Group -> [seqs, subs, values, k, latest t]: the packs being filled.
        self.packs: dict[Any, list[Any]] = {}
        self.buckets: dict[bytes, bytes] = {}
        self.width = 0
        if self.to_window:
            assert route_to is not None and route_to.spec is not None
            event_time = route_to.spec.traits.event_time
            assert event_time is not None
            self.width = round(event_time.size * 1_000_000)

    def add(self, seq: int, sub: int, kind: int, value: Any) -> None:
        """A value (``kind`` DATA) or a pickled error record (``kind`` ERROR)."""
        if kind == ERROR:
            self._error(seq, sub, value)
            return
        try:
            k, t = self.route(value)
        except Exception as e:
            assert self.route_to is not None and self.route_to.spec is not None
            self._error(seq, sub, carried_error(self.route_to.spec.id, value, e))
            return
        if self.route_to is None:
            kind, p = pickled_output(kind, value, self.last)
            if kind == ERROR:
                self._error(seq, sub, p)
            else:
                self._append(seq, sub, kind, p, b"", None)
            return
        group: Any = k
        if self.keyed:
            assert k is not None
            group = self.buckets.get(k)
            if group is None:
                group = self.buckets[k] = key_bucket(k)
        elif self.to_window:
            assert t is not None
            # The window Spark will put the element in: timestamp_seconds()
            # truncates to microseconds, window() floors them by the width.
            # Before 1970 Spark's window start is not a floor: no packing.
            micros = int(t * 1_000_000) if 0.0 <= t < FAR_FUTURE else -1
            if micros < 0:
                self._pack_one(seq, sub, value, k, t)
                return
            group = micros // self.width
        pack = self.packs.get(group)
        if pack is None:
            self.packs[group] = [[seq], [sub], [value], group if self.keyed else k, t]
            return
        pack[0].append(seq)
        pack[1].append(sub)
        pack[2].append(value)
        if t is not None and t > pack[4]:
            # The pack's event time is its latest element's: Spark's
            # watermark (the latest event time seen) stays what it would be.
            pack[4] = t

    def _pack_one(self, seq: int, sub: int, value: Any, k: bytes | None,
                  t: float | None) -> None:
        kind, p = pickled_output(DATA, value, self.last)
        if kind == ERROR:
            self._error(seq, sub, p)
        else:
            self._append(seq, sub, kind, p, k, t)

    def _error(self, seq: int, sub: int, p: bytes) -> None:
        if self.to_window:
            # A window has no place for an error row: fail the query with the
            # first error in element order (an earlier element held in a pack
            # may be one that cannot be pickled).
            self._close_packs()
            raise NodeFailure(NodeFailure.MARK + bytes(p).hex())
        self._append(seq, sub, ERROR, p, b"", None)

    def passthrough(self, seq: int, sub: int, kind: int, p: bytes) -> None:
        """A control or error row of an earlier stage, going on unchanged."""
        if kind == ERROR and self.to_window:
            # Spark's window() drops a row without an event time: an error
            # row must not go on to one (see _error).
            self._error(seq, sub, p)
            return
        k, t = b"", None
        if kind == FLUSH:
            t = FAR_FUTURE
            if self.grouped:
                k = ONE_GROUP
        self._append(seq, sub, kind, p, k, t)

    def _append(self, seq: int, sub: int, kind: int, p: bytes, k: bytes | None,
                t: float | None) -> None:
        a = self._appends
        a[0](seq)
        a[1](sub)
        a[2](kind)
        a[3](p)
        a[4](k)
        a[5](t)

    def _close_packs(self) -> None:
        """Turn the packs being filled into rows."""
        packs, self.packs = self.packs, {}
        failed: list[tuple[int, int, bytes]] = []
        for seqs, subs, values, k, t in packs.values():
            try:
                p = pack_payload(seqs, subs, values)
            except Exception:
                # Some value cannot be pickled: it becomes an error row of the
                # step that returned it, in its place; the others stay packed.
                keep = []
                for i, x in enumerate(values):
                    kind, ep = pickled_output(DATA, x, self.last)
                    if kind == ERROR:
                        failed.append((seqs[i], subs[i], ep))
                    else:
                        keep.append(i)
                if not keep:
                    continue
                seqs, subs = [seqs[i] for i in keep], [subs[i] for i in keep]
                p = pack_payload(seqs, subs, [values[i] for i in keep])
            self._append(seqs[0], subs[0], PACK, p, k, t)
        failed.sort(key=lambda f: (f[0], f[1]))
        for seq, sub, ep in failed:
            self._error(seq, sub, ep)

    def batch(self) -> pa.RecordBatch:
        """The rows so far as a record batch (and start anew)."""
        self._close_packs()
        out = pa.RecordBatch.from_pydict(self.cols, schema=MID_SCHEMA)
        for v in self.cols.values():
            v.clear()
        return out

    def frame(self) -> pd.DataFrame:
        """The rows so far as a pandas frame of object columns (and start anew)."""
        self._close_packs()
        # Object columns: pandas would warn (FutureWarning) when PySpark
        # concatenates typed frames with its all-NA padding frames. Built from
        # object arrays: pd.Series(..., dtype=object) costs several times more.
        n = len(self.cols["seq"])
        out = pd.DataFrame({name: np.fromiter(v, dtype=object, count=n)
                            for name, v in self.cols.items()}, copy=False)
        for v in self.cols.values():
            v.clear()
        return out


class Driver:
    """Runs the stage program element by element, handing what comes out to a Router.

    Each output (or failure) of the element at ``(seq, sub)`` leaves at
    ``(seq, sub + i)``: the order of the in-process run.
    """

    def __init__(self, stage: Stage, rows: Any) -> None:
        self.stage = stage
        #: A :class:`Router`, or another receiver of ``add``/``passthrough``
        #: calls (``streams_spark.dataframe.TypedRows``, which takes ``extend``).
        self.rows = rows
        self.events = stage.events
        self._push = stage.root._pusher()  # after any restore(): it recompiles

    def push(self, seq: int, sub: int, x: Any) -> int:
        """Run ``x``; return the ``sub`` after its outputs."""
        self._push(x)
        return self.drain(seq, sub)

    def push_all(self, seq: int, items: list[Any]) -> None:
        """Run ``items``, the elements at ``seq``, ``seq + 1``...

        A receiver that keeps no positions (``bulk``: the typed rows of
        ``to_dataframe()``) takes all their outputs at once.
        """
        if getattr(self.rows, "bulk", False):
            push = self._push
            for x in items:
                push(x)
            self.rows.extend(self.events, self.stage.failed)
            self.events.clear()
            self.stage.failed.clear()
            return
        push_one = self.push
        for i, x in enumerate(items, seq):
            push_one(i, 0, x)

    def drain(self, seq: int, sub: int) -> int:
        """Hand the recorded outputs and failures on, numbered from ``sub``."""
        events = self.events
        if not events:
            return sub
        add = self.rows.add
        stage = self.stage
        if stage.failed:
            failed = set(stage.failed)
            for i, e in enumerate(events):
                if i in failed:
                    add(seq, sub, ERROR, carried_error(e.node_id, e.element, e.error))
                else:
                    add(seq, sub, DATA, e)
                sub += 1
            stage.failed.clear()
        else:
            for e in events:
                add(seq, sub, DATA, e)
                sub += 1
        events.clear()
        return sub


#: Makes the receiver of a stage's output: a :class:`Router` for the next
#: stage, or typed rows for ``to_dataframe()`` (``streams_spark.dataframe``).
Rows = Callable[[], Any]


#: ``first`` of :func:`chain_task` when its input is the user's DataFrame.
COLUMNS = "columns"


def _partition_base() -> int:
    """The ``seq`` of a partition's first row: the partition id, shifted."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return (context.partitionId() if context is not None else 0) << 40


def chain_task(specs: list[NodeSpec], route_to: Route | None, first: bool | str,
               rows_of: Rows | None = None
               ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function running ``specs`` then routing for ``route_to``.

    ``first`` says the input is the raw micro-batch (``seq``, ``p``) rather
    than rows of an earlier stage; :data:`COLUMNS`, that it is the user's
    DataFrame, whose rows are the elements (see
    :func:`~streams_spark.codec.elements_of`). Errors of the routing functions (the key
    or time function) are errors of the ``route_to`` node. ``rows_of``
    replaces the routing with another receiver of the outputs.
    """
    plan = chain_plan(specs)
    last = specs[-1] if specs else None

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = rows_of() if rows_of is not None else Router(route_to, last)
        drive = Driver(Stage(plan), rows)
        push = drive.push
        loads = pickle.loads
        base = _partition_base() if first == COLUMNS else 0
        for batch in batches:
            if first == COLUMNS:
                # The user's DataFrame itself: its rows are the elements.
                drive.push_all(base, elements_of(batch))
                base += batch.num_rows
                yield rows.batch()
                continue
            names = batch.schema.names
            seqs = batch.column(names.index("seq")).to_pylist()
            ps = batch.column(names.index("p")).to_pylist()
            if first:
                # Input rows are packed chunks (typed Arrow inside): element
                # ``i`` of the chunk at ``seq`` is element ``seq + i``.
                kinds = [FLUSH if p == FLUSH_MARK else CHUNK for p in ps]
                subs = [0] * len(seqs)
            else:
                kinds = batch.column(names.index("kind")).to_pylist()
                subs = batch.column(names.index("sub")).to_pylist()
            for s, sb, kind, p in zip(seqs, subs, kinds, ps, strict=True):
                if kind == CHUNK:
                    drive.push_all(s, unpack(p))
                elif kind in (DATA, WINDOW):
                    # Children of a flatten rank below their parent's rank.
                    push(s, sb << 16, loads(p) if kind == DATA else value_of(kind, p))
                elif kind == PACK:
                    pseqs, psubs, values, _ = loads(p)
                    for ps_, psb, x in zip(pseqs, psubs, values, strict=True):
                        push(ps_, psb << 16, x)
                else:
                    rows.passthrough(s, sb, kind, p)
            yield rows.batch()

    return run


def keyed_scan(spec: NodeSpec, route_to: Route | None = None, after: list[NodeSpec] | None = None,
               rows_of: Rows | None = None
               ) -> Callable[[Any, Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The ``applyInPandasWithState`` function of a node with per-key state.

    Each group is a bucket of keys (see :func:`key_bucket`); the core's own
    node runs over the group's elements in input order, its state restored
    from and saved to the group's state in Spark's state store, followed by
    the stateless nodes ``after`` it. Its outputs leave as rows routed for
    ``route_to`` (so no pass of its own is needed to route them), or to
    ``rows_of()``. Control and error rows (key ``b""``) pass through.
    """
    specs = [spec, *(after or ())]
    plan = chain_plan(specs)

    def run(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        seqs, subs, kinds, ps = _columns(frames)
        rows = rows_of() if rows_of is not None else Router(route_to, specs[-1])
        if not key[0]:
            for s, sb, kind, pv in zip(seqs, subs, kinds, ps, strict=True):
                rows.passthrough(int(s), int(sb), int(kind), pv)
            yield rows.frame()
            return
        stage = Stage(plan)
        stage.restore(by_id(specs, pickle.loads(state.get[0]) if state.exists else None))
        drive = Driver(stage, rows)
        seqs, subs, _, xs, _ = opened(seqs, subs, kinds, ps)
        if getattr(rows, "bulk", False):
            drive.push_all(0, xs)
        else:
            for s, sb, x in zip(seqs, subs, xs, strict=True):
                drive.push(s, sb, x)
        state.update((pickle.dumps(by_position(specs, stage.snapshot()), protocol=5),))
        yield rows.frame()

    return run


def sequential_chain(specs: list[NodeSpec], route_to: Route | None = None,
                     rows_of: Rows | None = None) -> Callable[
        [Any, Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The ``applyInPandasWithState`` function of a chain with stateful nodes.

    All rows share one group (:data:`ONE_GROUP`); the nodes' states are the
    group's state. A ``FLUSH`` row flushes what the nodes hold. Output rows
    are routed for ``route_to``.
    """
    plan = chain_plan(specs)
    last = specs[-1] if specs else None

    def run(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        columns = _columns(frames)
        rows = rows_of() if rows_of is not None else Router(route_to, last)
        if key[0] != ONE_GROUP:  # error and control rows pass through
            for s, sb, kind, pv in zip(*columns, strict=True):
                rows.passthrough(int(s), int(sb), int(kind), pv)
            yield rows.frame()
            return
        stage = Stage(plan)
        stage.restore(by_id(specs, pickle.loads(state.get[0]) if state.exists else None))
        drive = Driver(stage, rows)
        for s, sb, kind, item, _ in zip(*opened(*columns), strict=True):
            if kind == DATA:
                drive.push(s, sb << 16, item)
            elif kind == FLUSH:
                stage.close()
                rows.passthrough(s, drive.drain(s, sb << 16), FLUSH, item)
        state.update((pickle.dumps(by_position(specs, stage.snapshot()), protocol=5),))
        yield rows.frame()

    return run


def _columns(frames: Iterator[pd.DataFrame]) -> tuple[list[Any], ...]:
    """The ``seq``, ``sub``, ``kind`` and ``p`` columns of a group's frames, as lists.

    Unordered: :func:`~streams_spark.packs.opened` puts the elements in order
    (a pandas concat and sort would cost more than the group's Python work).
    """
    cols: tuple[list[Any], ...] = ([], [], [], [])
    for frame in frames:
        for col, name in zip(cols, ("seq", "sub", "kind", "p"), strict=True):
            col.extend(frame[name].tolist())
    return cols


def window_items(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Turn aggregated windows into rows: one list of elements per window.

    Input columns: ``start`` (microseconds) and ``items`` (a list of
    ``(seq, sub, kind, p)``, data rows or packs). The window's elements are
    put back in input order; the row is of kind ``WINDOW``.
    """
    dumps = pickle.dumps
    for batch in batches:
        starts = batch.column(0).to_pylist()
        seqs, ps = [], []
        for start, values in zip(starts, windows_of(batch.column(1)), strict=True):
            if values:
                seqs.append(start)
                ps.append(dumps(values, protocol=5))
        n = len(seqs)
        yield pa.RecordBatch.from_arrays(
            [pa.array(seqs, pa.int64()), pa.array([0] * n, pa.int64()),
             pa.array([WINDOW] * n, pa.int8()), pa.array(ps, pa.binary())],
            names=["seq", "sub", "kind", "p"])


assert STATE == 2  # carried state rows never reach streaming stages


def collected_rows(table: pa.Table) -> list[tuple[int, Any]]:
    """The ``(kind, payload)`` rows a query delivered, in input order.

    A plan ending in an event-time window delivers its windows as Spark
    aggregated them (``start``, ``items``): they are put in order here, on
    the driver, rather than in a Python pass of their own on the executors.
    """
    if "items" not in table.column_names:
        if table.num_rows:
            table = table.sort_by([("seq", "ascending"), ("sub", "ascending")])
        return list(zip(table.column("kind").to_pylist(), table.column("p").to_pylist(),
                        strict=True))
    table = table.sort_by("start")
    return [(WINDOW_ITEMS, values) for values in windows_of(table.column("items")) if values]
