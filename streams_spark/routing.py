"""Routing rows to the next Spark stage: the ``k`` and ``t`` columns, and packing.

Rows bound for a stateful stage carry the group of their key (a bucket of
keys) or their event time (and, for a keyed window, the pickled key):
the columns ``k`` and ``t`` of :mod:`streams_spark.route_columns`,
computed by the chain before that stage. They travel packed, one row per
group (see :mod:`streams_spark.packs`).
Elements share a pack on the way to a window when Spark puts them in the
same windows (the same tumbling window, the same run of sliding windows)
under the same key. An element bound for a session window starts a
session at its own time, so it is a row of its own, but for a keyed
session window over a static DataFrame: there a key's elements within one
gap of each other share a pack, which carries its first time (``t``) and
its last (``u``), since they are in one session whatever else comes (see
:func:`streams_spark.window_sessions.sessions`). A static DataFrame's own
rows that reach a keyed window unchanged are not pickled: a group of them
travels as their columns (see :mod:`streams_spark.input_rows`).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from streams.operators.window_bounds import micros
from streams.spec import NodeSpec

from .codec import DATA, ERROR, FLUSH, PACK, ROW, carried_error, pickled_output
from .event_seconds import LAST_SECOND, event_seconds
from .input_rows import InputRows
from .packs import first_seen_codes, pack_payload, window_group
from .plan import Route
from .route_columns import ONE_GROUP, element_routes, key_bucket, window_routes

__all__ = ["FAR_FUTURE", "MID_SCHEMA", "MID_SPANS", "WINDOW_REACH", "NodeFailure", "Router"]

#: The end-of-stream row's time (year 33658): its watermark must pass the end of
#: every window, and an event time may be as late as Spark's timestamps go
#: (:data:`~streams_spark.event_seconds.LAST_SECOND`, year 9999), its window
#: ``size`` and ``lateness`` later still; a to_spark() segment refuses a window
#: that could end beyond (:data:`WINDOW_REACH`). Spark's timestamps are longs
#: of microseconds: this one is far from their end (year 294247).
FAR_FUTURE = 1e12
#: The longest ``size + lateness`` (or ``gap + lateness``) of a to_spark() window.
WINDOW_REACH = FAR_FUTURE - LAST_SECOND - 1

MID_SCHEMA = pa.schema([
    ("seq", pa.int64()), ("sub", pa.int64()), ("kind", pa.int8()), ("p", pa.binary()),
    ("k", pa.binary()), ("t", pa.float64()),
])
#: The rows bound for a session window by span: ``u`` is a pack's last time.
MID_SPANS = MID_SCHEMA.append(pa.field("u", pa.float64()))


class NodeFailure(Exception):
    """Raised in a worker to fail the query with a node's error.

    The message carries the pickled ``(node id, element, exception)`` after
    :data:`MARK`, so the driver can apply the node's policy.
    """

    MARK = "streams-spark-node-error:"


def failure_text(p: bytes, labels: dict[int, str]) -> str:
    """A node's pickled failure as a message: readable, then the payload for a driver.

    A Spark-resident segment has no driver to read the payload: the text
    before it names the node and the element, as in-process.
    """
    payload = f"({NodeFailure.MARK}{p.hex()})"
    try:
        node_id, x, exc = pickle.loads(p)
    except Exception:  # a class this worker cannot import: the payload alone
        return payload
    label = labels.get(node_id, f"node {node_id}")
    return f"{label} failed on element {x!r:.120}: {type(exc).__name__}: {exc} {payload}"

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

    def __init__(self, route_to: Route | None, last: NodeSpec | None,
                 nodes: list[NodeSpec] | tuple[NodeSpec, ...] = ()) -> None:
        self.route_to = route_to
        self.last = last
        # Who may fail here: the chain's nodes and the one routed to.
        self.labels = {n.id: n.name for n in nodes}
        if route_to is not None and route_to.spec is not None:
            self.labels[route_to.spec.id] = route_to.spec.name
        self.route = element_routes(route_to)
        kind = route_to.kind if route_to is not None else None
        self.to_window = kind == "window"
        self.grouped = kind == "group"
        self.keyed = kind == "key"
        self.spans = route_to is not None and route_to.spans
        self.schema = MID_SPANS if self.spans else MID_SCHEMA
        self.cols: dict[str, list[Any]] = {n: [] for n in self.schema.names}
        self._appends = tuple(c.append for c in self.cols.values())
        #: The current input batch, where input rows travel as columns (the
        #: column ``r``: each output row's count of its rows, and those rows in
        #: turn; see ``_carry``).
        self.carried: InputRows | None = None
        self.taken_counts: list[int] = []
        self.taken_rows: list[int] = []
        if route_to is not None and route_to.rows is not None:
            self.carried = InputRows()
        # Group -> [seqs, subs, values, k, latest t (a span's first), a span's
        # last t or None]: the packs being filled.
        self.packs: dict[Any, list[Any]] = {}
        self.buckets: dict[bytes, bytes] = {}
        self.window_group: Callable[[Any], Any] | None = None
        # The elements bound for a window, packed when the batch closes: their
        # seqs, subs, values, pickled keys and times as the function gave them.
        self._window: tuple[list[Any], ...] = ([], [], [], [], [])
        #: Whether keys and times are computed when the batch closes, all at
        #: once (see ``_close_window``). Not after a stateful step, which may
        #: emit an object it changes later (a scan's own list): there they
        #: are taken as each element arrives, as in-process.
        self.defers = self.to_window and not any(n.traits.stateful for n in nodes)
        self.keyed_window = False
        #: Where failures bound for a window go under skip or route (see _error).
        self.failures = route_to.failures if route_to is not None else None
        if self.to_window:
            assert route_to is not None and route_to.spec is not None
            event_time = route_to.spec.traits.event_time
            assert event_time is not None
            self.window_group = window_group(event_time)
            self.keyed_window = event_time.key is not None
            self.route_all = window_routes(route_to)

    def add(self, seq: int, sub: int, kind: int, value: Any) -> None:
        """A value (``kind`` DATA) or a pickled error record (``kind`` ERROR)."""
        if kind == ERROR:
            self._error(seq, sub, value)
            return
        if self.defers:  # keys and times when the batch closes (see _close_window)
            w = self._window
            w[0].append(seq)
            w[1].append(sub)
            w[2].append(value)
            return
        try:
            k, t = self.route(value)
        except Exception as e:
            assert self.route_to is not None and self.route_to.spec is not None
            self._error(seq, sub, carried_error(self.route_to.spec.id, value, e))
            return
        if self.to_window:  # packed when the batch closes
            w = self._window
            w[0].append(seq)
            w[1].append(sub)
            w[2].append(value)
            w[3].append(k)
            w[4].append(t)
            return
        if self.route_to is None:
            kind, p = pickled_output(kind, value, self.last)
            if kind == ERROR:
                self._error(seq, sub, p)
            else:
                self._append(seq, sub, kind, p, b"", None, None)
            return
        group: Any = k
        if self.keyed:
            assert k is not None
            group = self.buckets.get(k)
            if group is None:
                assert self.route_to is not None
                group = self.buckets[k] = key_bucket(k, self.route_to.buckets)
        pack = self.packs.get(group)
        if pack is None:
            self.packs[group] = [[seq], [sub], [value], group if self.keyed else k, t, None]
            return
        pack[0].append(seq)
        pack[1].append(sub)
        pack[2].append(value)

    def _close_window(self) -> None:
        """Route the elements bound for a window: their times (and keys) at once, then the packs.

        An element whose key or time fails goes to ``_error`` once the
        elements before it are packed: under ``raise`` it fails the query,
        the first error in element order, as in-process; set aside (skip,
        route), the elements after it are routed in turn.
        """
        seqs, subs, values, ks, raw = self._window
        self._window = ([], [], [], [], [])
        while True:
            failure: tuple[int, Exception] | None = None
            if self.defers:
                ks, raw, failure = self.route_all(values)
            times, valid, error = event_seconds(raw)
            if error is None and failure is not None:
                valid, error = failure
            if valid:
                rows = (self.carried.rows_of(seqs[:valid], subs[:valid], values[:valid])
                        if self.carried is not None else None)
                self._pack_window(seqs[:valid], subs[:valid], values[:valid], ks[:valid],
                                  times[:valid], rows)
            if error is None:
                return
            assert self.route_to is not None and self.route_to.spec is not None
            self._error(seqs[valid], subs[valid],
                        carried_error(self.route_to.spec.id, values[valid], error))
            after = valid + 1  # set aside: the elements after it go on
            seqs, subs, values = seqs[after:], subs[after:], values[after:]
            if not self.defers:
                ks, raw = ks[after:], raw[after:]

    def _pack_window(self, seqs: list[int], subs: list[int], values: list[Any],
                     ks: list[bytes | None], times: np.ndarray, rows: np.ndarray | None
                     ) -> None:
        """Elements in the same Spark windows under the same key share a pack.

        The windows Spark will put an element in: its time's nearest
        microsecond (``timestamp_of()``), floored by the slide in
        ``window()``. Before 1970 Spark's window start is not a floor, and a
        session starts at each element's own time: such elements go alone.
        A pack's time is its latest element's, so Spark's watermark (the
        latest event time seen) stays what it would be. Packs come in the
        order of their first elements, each in element order; an element
        alone in its windows is a row of its own. ``rows``: each element's
        input row (-1: none), where input rows travel as columns.
        """
        group_of = self.window_group
        if self.spans:
            # Times Spark may not read as a microsecond (NaN, infinities)
            # go alone, as their own rows: Spark then decides.
            floored = np.abs(times) < FAR_FUTURE
        elif group_of is not None:
            floored = (times >= 0.0) & (times < FAR_FUTURE)
        else:
            floored = np.zeros(len(times), dtype=bool)
        packed = np.flatnonzero(floored)
        if packed.size and self.spans:
            self._pack_spans(packed, seqs, subs, values, ks, times, rows)
        elif packed.size:
            assert group_of is not None
            t = times[packed]
            windows = group_of(np.rint(t * 1e6).astype(np.int64))  # event_micros(), at once
            columns = list(windows) if isinstance(windows, tuple) else [windows]
            if self.keyed_window:
                columns.append(np.asarray(ks, dtype=object)[packed])
            group = first_seen_codes(columns)
            order = np.argsort(group, kind="stable")
            ends = np.cumsum(np.bincount(group))
            latest = np.maximum.reduceat(t[order], [0, *ends[:-1].tolist()]).tolist()
            self._fill(packed[order], ends, latest, [None] * len(ends),
                       seqs, subs, values, ks, times, rows)
        alone = np.flatnonzero(~floored)
        for i in alone.tolist():
            self._pack_one(seqs[i], subs[i], values[i], ks[i], float(times[i]),
                           -1 if rows is None else int(rows[i]))

    def _pack_spans(self, usual: np.ndarray, seqs: list[int], subs: list[int],
                    values: list[Any], ks: list[bytes | None], times: np.ndarray,
                    rows: np.ndarray | None) -> None:
        """Of the elements at ``usual``, a key's within one gap of each other share a pack.

        In time order (each time's nearest microsecond, as Spark reads it),
        an element more than the gap after the one before it under its key
        starts a span. A span's elements are in one session whatever other
        elements come, as they are in-process; its pack's ``t`` is its
        first time and ``u`` its last, from which Spark's sessions are cut.
        Packs come in the order of their first elements in element order,
        each in element order; a span of one element is a row of its own.
        """
        assert self.route_to is not None and self.route_to.spec is not None
        event_time = self.route_to.spec.traits.event_time
        assert event_time is not None
        t = times[usual]
        us = np.rint(t * 1e6).astype(np.int64)
        keys = pd.factorize(np.asarray(ks, dtype=object)[usual])[0]
        order = np.lexsort((us, keys))  # by key, then time: stable
        starts: np.ndarray = np.ones(len(order), dtype=bool)
        starts[1:] = ((keys[order][1:] != keys[order][:-1])
                      | (np.diff(us[order]) > micros(event_time.size)))
        span: np.ndarray = np.empty(len(order), dtype=np.int64)
        span[order] = np.cumsum(starts) - 1
        first = t[order][starts].tolist()
        last = np.maximum.reduceat(t[order], np.flatnonzero(starts)).tolist()
        group = first_seen_codes([span])  # numbered in element order
        by_group = np.argsort(group, kind="stable")
        counts = np.bincount(group)
        ends = np.cumsum(counts)
        spans = span[by_group][ends - counts].tolist()  # each group's span
        self._fill(usual[by_group], ends, [first[s] for s in spans],
                   [last[s] for s in spans], seqs, subs, values, ks, times, rows)

    def _fill(self, at: np.ndarray, ends: np.ndarray, ts: list[float], us: list[float | None],
              seqs: list[int], subs: list[int], values: list[Any], ks: list[bytes | None],
              times: np.ndarray, rows: np.ndarray | None) -> None:
        """Packs of the elements ``at[start:end]`` for each of ``ends``, the ``g``-th at ``ts[g]``.

        ``us[g]`` is a span's last time (None: not a span). A group of input
        rows only goes as their columns (``rows``: each element's input row,
        -1 for none; see ``_carry``). Otherwise an element alone in its
        group is a row of its own: a pack of one takes longer to pickle and
        open than the row (8.1 against 6.2 us for a Row of three fields).
        """
        groups: list[int] | range = range(len(ends))
        if rows is not None and len(at):
            members = rows[at]
            starts = np.concatenate([[0], ends[:-1]])
            carried = np.minimum.reduceat(members, starts) >= 0
            self._carry(at, starts, ends, carried, members, ts, us, seqs, ks)
            groups = np.flatnonzero(~carried).tolist()
        ends_at = ends.tolist()
        for g in groups:
            members = at[ends_at[g - 1] if g else 0:ends_at[g]].tolist()
            if len(members) == 1:
                i = members[0]
                self._pack_one(seqs[i], subs[i], values[i], ks[i], float(times[i]), -1)
            else:
                self.packs[len(self.packs)] = [
                    [seqs[i] for i in members], [subs[i] for i in members],
                    [values[i] for i in members], ks[members[0]], ts[g], us[g]]

    def _carry(self, at: np.ndarray, starts: np.ndarray, ends: np.ndarray, carried: np.ndarray,
               members: np.ndarray, ts: list[float], us: list[float | None], seqs: list[int],
               ks: list[bytes | None]) -> None:
        """The groups ``carried`` of :meth:`_fill`'s, input rows only, as rows of kind ROW.

        All at once: a group's row holds its input rows (``members``) in
        column ``r``, and ``p`` their seqs where they are more than one
        (their subs are 0), which the window's task reads without
        unpickling anything (see :func:`~streams_spark.packs.windows_and_firsts`).
        """
        chosen = np.flatnonzero(carried)
        if not chosen.size:
            return
        counts = (ends - starts)[chosen]
        at_seqs = np.asarray(seqs, dtype=np.int64)[at]
        firsts = at[starts[chosen]].tolist()
        seqs_bytes = at_seqs.astype("<i8").tobytes()
        ps = [None if b - a == 1 else seqs_bytes[8 * a:8 * b]
              for a, b in zip(starts[chosen].tolist(), ends[chosen].tolist(), strict=True)]
        picked = chosen.tolist()
        n = len(picked)
        cols = self.cols
        cols["seq"].extend(at_seqs[starts[chosen]].tolist())
        cols["sub"].extend([0] * n)
        cols["kind"].extend([ROW] * n)
        cols["p"].extend(ps)
        cols["k"].extend([ks[i] for i in firsts])
        cols["t"].extend([ts[g] for g in picked])
        if self.spans:
            cols["u"].extend([None if c == 1 else us[g]
                              for g, c in zip(picked, counts.tolist(), strict=True)])
        self.taken_counts.extend(counts.tolist())
        self.taken_rows.extend(members[np.repeat(carried, ends - starts)].tolist())

    def _pack_one(self, seq: int, sub: int, value: Any, k: bytes | None,
                  t: float | None, row: int) -> None:
        if row >= 0:  # an input row, unchanged: its columns go
            self._append(seq, sub, ROW, None, k, t, None, (row,))
            return
        try:  # once per element that travels alone: pickle's own fast path
            p = pickle.dumps(value, protocol=5)
        except Exception:
            kind, p = pickled_output(DATA, value, self.last)
            if kind == ERROR:
                self._error(seq, sub, p)
                return
        self._append(seq, sub, DATA, p, k, t, None)

    def _error(self, seq: int, sub: int, p: bytes) -> None:
        if self.to_window:
            # A window has no place for an error row: under skip or route the
            # failure is set aside (streams_spark.window_failures); else it
            # fails the query, with the first error in element order (an
            # earlier element held in a pack may be one that cannot be pickled).
            if self.failures is not None and self.failures.take(seq, sub, p):
                return
            self._close_packs()
            raise NodeFailure(failure_text(bytes(p), self.labels))
        self._append(seq, sub, ERROR, p, b"", None, None)

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
        self._append(seq, sub, kind, p, k, t, None)

    def _append(self, seq: int, sub: int, kind: int, p: bytes | None, k: bytes | None,
                t: float | None, u: float | None, rows: tuple[int, ...] = ()) -> None:
        a = self._appends
        a[0](seq)
        a[1](sub)
        a[2](kind)
        a[3](p)
        a[4](k)
        a[5](t)
        if self.spans:
            a[6](u)
        if self.carried is not None:
            self.taken_counts.append(len(rows))
            self.taken_rows.extend(rows)

    def _close_packs(self) -> None:
        """Turn the packs being filled into rows."""
        if self._window[0]:
            self._close_window()
        packs, self.packs = self.packs, {}
        failed: list[tuple[int, int, bytes]] = []
        for seqs, subs, values, k, t, u in packs.values():
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
            self._append(seqs[0], subs[0], PACK, p, k, t, u)
        failed.sort(key=lambda f: (f[0], f[1]))
        for seq, sub, ep in failed:
            self._error(seq, sub, ep)

    def batch(self) -> pa.RecordBatch:
        """The rows so far as a record batch (and start anew)."""
        self._close_packs()
        columns: dict[str, Any] = dict(self.cols)
        schema = self.schema
        if self.carried is not None:
            columns["r"] = r = self.carried.column(self.taken_counts, self.taken_rows)
            schema = schema.append(pa.field("r", r.type))
            self.taken_counts, self.taken_rows = [], []
        out = pa.RecordBatch.from_pydict(columns, schema=schema)
        for v in self.cols.values():
            v.clear()
        return out

    def frame(self) -> pd.DataFrame:
        """The rows so far as a pandas frame of object columns (and start anew)."""
        self._close_packs()
        assert self.carried is None, "rows carried by column leave by batch()"
        # Object columns: pandas would warn (FutureWarning) when PySpark
        # concatenates typed frames with its all-NA padding frames. Built from
        # object arrays: pd.Series(..., dtype=object) costs several times more.
        n = len(self.cols["seq"])
        out = pd.DataFrame({name: np.fromiter(v, dtype=object, count=n)
                            for name, v in self.cols.items()}, copy=False)
        for v in self.cols.values():
            v.clear()
        return out
