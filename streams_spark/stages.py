"""The Spark operations of streaming plans: worker functions and DataFrame steps.

Rows between stages follow :data:`streams_spark.codec.ROW_SCHEMA` plus two
routing columns computed, once per element, by the chain before the stage
that needs them: ``k`` (the pickled key of a keyed scan) and ``t`` (the
event time of a window, in seconds). Rows of kind ``FLUSH`` are control
rows: they pass every step untouched; at the end of the stream one of them
carries a far-future event time that moves the watermark past every window.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .chain import ERROR, Chain, Step, carried_error, pickled_output
from .codec import DATA, STATE, WINDOW, WINDOW_ITEMS, unpack, value_of

__all__ = [
    "FLUSH", "FLUSH_MARK", "MID_SCHEMA", "ONE_GROUP", "SEQUENTIAL_STAGE", "chain_task",
    "collected_rows", "keyed_scan", "sequential_chain", "window_items",
]

FLUSH = 3
#: An input row holding a packed chunk of elements (never leaves a task).
CHUNK = 5
#: The payload of the end-of-stream row in a plan's input files.
FLUSH_MARK = b"streams-spark:flush"
#: The key of the one group of a sequential stage (never a pickled key).
ONE_GROUP = b"\x01"
#: The operator name of the routing step before a sequential stage.
SEQUENTIAL_STAGE = "sequential stage"
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


def _route(step: Step | None) -> Callable[[Any], tuple[bytes | None, float | None]]:
    """The routing columns for the stage ``step``: ``k`` and ``t``."""
    if step is None:
        return lambda x: (None, None)
    if step.operator == SEQUENTIAL_STAGE:
        return lambda x: (ONE_GROUP, None)
    if step.operator == "accumulate":
        key = step.params["key"]
        keyf = key if callable(key) else (lambda x, k=key: x[k])
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
            # An unhashable key raises TypeError: an error of the scan, as in-process.

        return by_key
    time = step.params["time"]
    timef = time if callable(time) else (lambda x, k=time: x[k])

    def when(x: Any) -> tuple[None, float]:
        t = timef(x)
        # Seconds, or a datetime taken as its POSIX timestamp (as in-process).
        return None, float(t if isinstance(t, int | float) else t.timestamp())

    return when


class Router:
    """Rows for the next stage, routed: ``k`` and ``t`` computed once per element.

    Parameters
    ----------
    route_to : Step, optional
        The stage the rows go to (None: no routing columns needed).
    last : Step, optional
        The step that produced the values (named when one cannot be pickled).
    """

    def __init__(self, route_to: Step | None, last: Step | None) -> None:
        self.route_to = route_to
        self.last = last
        self.route = _route(route_to)
        self.to_window = route_to is not None and route_to.operator == "timed_window"
        self.grouped = route_to is not None and route_to.operator == SEQUENTIAL_STAGE
        self.cols: dict[str, list[Any]] = {n: [] for n in MID_SCHEMA.names}
        self._appends = tuple(c.append for c in self.cols.values())

    def add(self, seq: int, sub: int, kind: int, value: Any) -> None:
        """A value (``kind`` DATA) or a pickled error record (``kind`` ERROR)."""
        k: bytes | None = b""
        t: float | None = None
        if kind == ERROR:
            p = value
        else:
            try:
                k, t = self.route(value)
            except Exception as e:
                assert self.route_to is not None
                kind, p = ERROR, carried_error(self.route_to, value, e)
            else:
                kind, p = pickled_output(kind, value, self.last)
        if kind == ERROR and self.to_window:
            # A window has no place for an error row: fail the query with it.
            raise NodeFailure(NodeFailure.MARK + bytes(p).hex())
        self._append(seq, sub, kind, p, k, t)

    def passthrough(self, seq: int, sub: int, kind: int, p: bytes) -> None:
        """A control or error row of an earlier stage, going on unchanged."""
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

    def batch(self) -> pa.RecordBatch:
        """The rows so far as a record batch (and start anew)."""
        out = pa.RecordBatch.from_pydict(self.cols, schema=MID_SCHEMA)
        for v in self.cols.values():
            v.clear()
        return out

    def frame(self) -> pd.DataFrame:
        """The rows so far as a pandas frame of object columns (and start anew)."""
        # Object columns: pandas would warn (FutureWarning) when PySpark
        # concatenates typed frames with its all-NA padding frames.
        out = pd.DataFrame({n: pd.Series(v, dtype=object) for n, v in self.cols.items()})
        for v in self.cols.values():
            v.clear()
        return out


def chain_task(steps: list[Step], route_to: Step | None, first: bool
               ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function running ``steps`` then routing for ``route_to``.

    ``first`` says the input is the raw micro-batch (``seq``, ``p``) rather
    than rows of an earlier stage. Errors of the routing functions (the key
    or time function) are errors of the ``route_to`` node.
    """
    last = steps[-1] if steps else None

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        chain = Chain(steps)
        rows = Router(route_to, last)
        loads = pickle.loads
        cur = [0, 0]

        def sink(kind: int, value: Any) -> None:
            rows.add(cur[0], cur[1], kind, value)
            cur[1] += 1

        for batch in batches:
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
                    for cur[0], x in enumerate(unpack(p), s):
                        cur[1] = 0
                        chain.push(x, sink)
                elif kind in (DATA, WINDOW):
                    # Children of a flatten rank below their parent's rank.
                    cur[0], cur[1] = s, sb << 16
                    chain.push(loads(p) if kind == DATA else value_of(kind, p), sink)
                else:
                    rows.passthrough(s, sb, kind, p)
            yield rows.batch()

    return run


def keyed_scan(step: Step, route_to: Step | None = None
               ) -> Callable[[Any, Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The ``applyInPandasWithState`` function of ``scan(func, key=...)``.

    Emits ``(key, output)`` (or ``(state, (key, output))`` with
    ``with_state``) per element, as the in-process keyed scan does, as rows
    routed for ``route_to`` (so no pass of its own is needed to route them).
    Control and error rows (key ``b""``) pass through.
    """
    p = step.params
    f = step.func
    assert f is not None
    kwargs = p.get("kwargs") or {}
    returns_state, with_state = p.get("returns_state", False), p.get("with_state", False)
    start = p.get("start")
    no_start = type(start).__name__ == "_NoDefault"

    def run(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        kbytes = key[0]
        frame = pd.concat(list(frames), ignore_index=True)
        frame = frame.sort_values(["seq", "sub"], kind="stable")
        rows = Router(route_to, step)
        if not kbytes:
            for s, sb, kind, pv in zip(frame["seq"], frame["sub"], frame["kind"],
                                       frame["p"], strict=True):
                rows.passthrough(int(s), int(sb), int(kind), pv)
            yield rows.frame()
            return
        k = pickle.loads(kbytes)
        if state.exists:
            acc = pickle.loads(state.get[0])
        else:
            acc = _NOTHING if no_start else copy.deepcopy(start)
        loads = pickle.loads
        for s, sb, pv in zip(frame["seq"].tolist(), frame["sub"].tolist(),
                             frame["p"].tolist(), strict=True):
            x = loads(pv)
            try:
                if acc is _NOTHING:
                    new = out = x
                elif returns_state:
                    new, out = f(acc, x, **kwargs)
                else:
                    new = out = f(acc, x, **kwargs)
            except Exception as e:
                rows.add(s, sb, ERROR, carried_error(step, x, e))
            else:
                acc = new
                rows.add(s, sb, DATA, (new, (k, out)) if with_state else (k, out))
        state.update((pickle.dumps(acc, protocol=5),))
        yield rows.frame()

    return run


def sequential_chain(steps: list[Step], route_to: Step | None = None) -> Callable[
        [Any, Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The ``applyInPandasWithState`` function of a chain with sequential steps.

    All rows share one group (:data:`ONE_GROUP`); the chain's states are the
    group's state. A ``FLUSH`` row flushes what the steps hold. Output rows
    are routed for ``route_to``.
    """
    last = steps[-1] if steps else None

    def run(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(frames), ignore_index=True)
        frame = frame.sort_values(["seq", "sub"], kind="stable")
        rows = Router(route_to, last)
        columns = (frame["seq"], frame["sub"], frame["kind"], frame["p"])
        if key[0] != ONE_GROUP:  # error and control rows pass through
            for s, sb, kind, pv in zip(*columns, strict=True):
                rows.passthrough(int(s), int(sb), int(kind), pv)
            yield rows.frame()
            return
        chain = Chain(steps, pickle.loads(state.get[0]) if state.exists else None)
        cur = [0, 0]
        loads = pickle.loads

        def sink(kind: int, value: Any) -> None:
            rows.add(cur[0], cur[1], kind, value)
            cur[1] += 1

        for s, sb, kind, pv in zip(*columns, strict=True):
            cur[0], cur[1] = int(s), int(sb) << 16
            if kind == DATA:
                chain.push(loads(pv), sink)
            elif kind == FLUSH:
                chain.flush(sink)
                rows.passthrough(int(s), cur[1], FLUSH, pv)
        state.update((pickle.dumps(chain.states, protocol=5),))
        yield rows.frame()

    return run


class _Nothing:
    def __reduce__(self) -> str:
        return "_NOTHING"


_NOTHING: Any = _Nothing()


def window_items(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Turn aggregated windows into rows: one list of elements per window.

    Input columns: ``start`` (microseconds) and ``items`` (a list of
    ``(seq, sub, kind, p)``). The window's elements are put back in input
    order; the row is of kind ``WINDOW``.
    """
    dumps = pickle.dumps
    for batch in batches:
        starts = batch.column(0).to_pylist()
        items = batch.column(1).to_pylist()
        seqs, ps = [], []
        for start, rows in zip(starts, items, strict=True):
            rows = [r for r in rows if r["kind"] == DATA]
            if not rows:
                continue
            rows.sort(key=lambda r: (r["seq"], r["sub"]))
            seqs.append(start)
            # The elements stay pickled: unpickled once, where they are used.
            ps.append(dumps([r["p"] for r in rows], protocol=5))
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
    items = table.column("items").combine_chunks()
    flat = pc.list_flatten(items)
    rows = pa.table({"w": pc.list_parent_indices(items), "seq": flat.field("seq"),
                     "sub": flat.field("sub"), "kind": flat.field("kind"),
                     "p": flat.field("p")})
    rows = rows.filter(pc.equal(rows["kind"], DATA)).sort_by(
        [("w", "ascending"), ("seq", "ascending"), ("sub", "ascending")])
    out: list[tuple[int, Any]] = []
    current = None
    for w, p in zip(rows.column("w").to_pylist(), rows.column("p").to_pylist(), strict=True):
        if w != current:
            out.append((WINDOW_ITEMS, []))
            current = w
        out[-1][1].append(p)
    return out
