"""The Spark operations of streaming plans: worker functions and DataFrame steps.

Rows between stages follow :data:`streams_spark.codec.ROW_SCHEMA` plus two
routing columns computed, once per element, by the chain before the stage
that needs them: ``k`` (the group of a keyed scan: a bucket of keys, see
:func:`streams_spark.route_columns.key_bucket`) and ``t`` (the event time of a window, in seconds).
Data bound for a stateful stage travels packed, one row per group (see
:mod:`streams_spark.packs`). Rows of kind ``FLUSH`` are control rows: they
pass every step untouched; at the end of the stream one of them carries a
far-future event time that moves the watermark past every window.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa

from streams.operators._checks import one_key
from streams.operators.window_bounds import Window, seconds
from streams.spec import NodeSpec
from streams.stage import Stage

from . import main_classes
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
    unpack,
    value_of,
)
from .column_names import named
from .packs import opened, windows_and_firsts
from .plan import Route, by_id, by_position, chain_plan
from .route_columns import ONE_GROUP, key_of_windows
from .routing import Router
from .worker_heap import freeze_worker_heap

__all__ = [
    "COLUMNS", "FLUSH", "FLUSH_MARK", "WINDOWS", "Driver", "chain_task", "collected_rows",
    "keyed_scan", "sequential_chain",
]



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
        # Driver.push and drain inlined: this loop runs once per input row.
        push, events, failed, add = self._push, self.events, self.stage.failed, self.rows.add
        for i, x in enumerate(items, seq):
            push(x)
            if not events:
                continue
            if failed:
                self.drain(i, 0)
                continue
            for sub, e in enumerate(events):
                add(i, sub, DATA, e)
            events.clear()

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

#: What a group function takes and returns: pandas frames, or Arrow tables
#: and record batches (see :func:`keyed_scan`).
Frame: TypeAlias = pd.DataFrame | pa.Table | pa.RecordBatch


#: ``first`` of :func:`chain_task` when its input is the user's DataFrame.
COLUMNS = "columns"
#: ``first`` of :func:`chain_task` when its input is Spark's aggregated windows.
WINDOWS = "windows"


def _partition_base() -> int:
    """The ``seq`` of a partition's first row: the partition id, shifted."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return (context.partitionId() if context is not None else 0) << 40


def chain_task(specs: list[NodeSpec], route_to: Route | None, first: bool | str,
               rows_of: Rows | None = None, user_names: tuple[str, ...] | None = None
               ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function running ``specs`` then routing for ``route_to``.

    ``first`` says the input is the raw micro-batch (``seq``, ``p``) rather
    than rows of an earlier stage; :data:`COLUMNS`, that it is the user's
    DataFrame, whose rows are the elements (see
    :func:`~streams_spark.codec.elements_of`); :data:`WINDOWS`, that it is the
    windows of an event-time window as Spark aggregated them (``end``, ``k``,
    ``items``): each window is one element, in the in-process order, so the
    steps after a window run in the same pass that opens its packs (see
    :func:`_ordered_windows`). Errors of the routing functions (the key
    or time function) are errors of the ``route_to`` node. ``rows_of``
    replaces the routing with another receiver of the outputs. ``user_names``:
    the user's column names, where the DataFrame was renamed for the pass
    (see :mod:`streams_spark.column_names`).
    """
    plan = chain_plan(specs)
    last = specs[-1] if specs else None

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        rows = rows_of() if rows_of is not None else Router(route_to, last, specs)
        drive = Driver(Stage(plan), rows)
        push = drive.push
        loads = pickle.loads
        base = _partition_base() if first == COLUMNS else 0
        for batch in batches:
            if first == COLUMNS:
                # The user's DataFrame itself: its rows are the elements.
                batch = named(batch, user_names)
                carried = getattr(rows, "carried", None)
                drive.push_all(base, elements_of(batch) if carried is None
                               else carried.start(batch, base))
                base += batch.num_rows
                yield rows.batch()
                continue
            if first == WINDOWS:
                windows = _ordered_windows(batch)
                if getattr(rows, "bulk", False):  # typed rows keep no positions
                    drive.push_all(0, [w for _, _, w in windows])
                else:
                    # A window's outputs leave at (its end, its first element's
                    # seq): the order of windows closing together in-process.
                    for end, first_seq, window in windows:
                        push(end, (first_seq & FIRST_MASK) << 16, window)
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


class KeyBucketsChanged(ValueError):
    """A keyed query restarted from a checkpoint written with other key buckets."""


#: How a key's bucket is hashed from it: the bytes of :func:`key_bytes`, one
#: for keys a dict takes as one (before: a key's pickle, which splits 0.0 and -0.0).
KEY_HASH = "key_bytes"


def _bucket_state(saved: bytes, buckets: int, label: str) -> Any:
    """The node states a keyed group saved, checked against today's ``buckets`` and hash.

    With another number of buckets, or another hash of the keys, most keys
    land in groups whose saved state is not theirs, and would silently start
    again; the first group that meets a saved state refuses the restart (the
    micro-batch then fails, and nothing of it is committed).
    """
    loaded = pickle.loads(saved)
    # Before 128 buckets, the states alone were saved, for 16 buckets; before
    # the hash was saved, it was the keys' pickles.
    had, states, hashed = ((16, loaded, "pickle") if not isinstance(loaded, tuple)
                           else (*loaded, "pickle") if len(loaded) == 2 else loaded)
    if had != buckets or hashed != KEY_HASH:
        what = (f"in {had} key buckets, and this version of streams hashes keys into "
                f"{buckets}" if had != buckets else
                "in buckets of the keys' pickles, and this version of streams hashes keys "
                "as one where a dict takes them as one (0.0 and -0.0, 1 and 1.0)")
        raise KeyBucketsChanged(
            f"{label}: this query's checkpoint holds its keyed state {what}, so a key's "
            "state would not be found; restart from a new checkpoint location (replaying "
            "the input), or with the version of streams that wrote the checkpoint")
    return states


def keyed_scan(spec: NodeSpec, route_to: Route | None = None, after: list[NodeSpec] | None = None,
               rows_of: Rows | None = None, buckets: int = 0, closes: bool = False,
               arrow: bool = False) -> Callable[[Any, Iterator[Frame], Any], Iterator[Frame]]:
    """The ``applyInPandasWithState`` function of a node with per-key state.

    Each group is one of ``buckets`` buckets of keys (see :func:`key_bucket`);
    the core's own node runs over the group's elements in input order, its
    state restored from and saved to the group's state in Spark's state
    store (with ``buckets``, checked on restore), followed by the stateless
    nodes ``after`` it. Its outputs leave as rows routed for ``route_to`` (so
    no pass of its own is needed to route them), or to ``rows_of()``.
    Control and error rows (key ``b""``) pass through. ``closes``: a group
    is the whole input (a static DataFrame), so the stream ends after it:
    the node closes, as in-process (a ``ttl``'s ``on_expire`` of the keys
    still held). ``arrow``: the group comes and leaves as Arrow tables and
    record batches, not pandas frames (``applyInArrow``, see :func:`_columns`).
    """
    specs = [spec, *(after or ())]
    plan = chain_plan(specs)
    label = spec.name

    def run(key: Any, frames: Iterator[Frame], state: Any) -> Iterator[Frame]:
        freeze_worker_heap()
        seqs, subs, kinds, ps = _columns(frames)
        rows = rows_of() if rows_of is not None else Router(route_to, specs[-1], specs)
        if not key[0]:
            for s, sb, kind, pv in zip(seqs, subs, kinds, ps, strict=True):
                rows.passthrough(int(s), int(sb), int(kind), pv)
            yield rows.batch() if arrow else rows.frame()
            return
        stage = Stage(plan)
        stage.restore(by_id(specs, _bucket_state(state.get[0], buckets, label)
                            if state.exists else None))
        drive = Driver(stage, rows)
        seqs, subs, _, xs, _ = opened(seqs, subs, kinds, ps)
        if getattr(rows, "bulk", False):
            drive.push_all(0, xs)
        else:
            for s, sb, x in zip(seqs, subs, xs, strict=True):
                drive.push(s, sb, x)
        if closes:
            stage.close()
            drive.drain(END_SEQ, 0)
        state.update((main_classes.dumps((buckets, by_position(specs, stage.snapshot()),
                                          KEY_HASH)),))
        yield rows.batch() if arrow else rows.frame()

    return run


def sequential_chain(specs: list[NodeSpec], route_to: Route | None = None,
                     rows_of: Rows | None = None, closes: bool = False, arrow: bool = False
                     ) -> Callable[[Any, Iterator[Frame], Any], Iterator[Frame]]:
    """The ``applyInPandasWithState`` function of a chain with stateful nodes.

    All rows share one group (:data:`ONE_GROUP`); the nodes' states are the
    group's state. A ``FLUSH`` row flushes what the nodes hold, and so does
    the end of the group with ``closes`` (a static DataFrame: the group is
    the whole input). Output rows are routed for ``route_to``. ``arrow``:
    Arrow in and out, as :func:`keyed_scan`.
    """
    plan = chain_plan(specs)
    last = specs[-1] if specs else None

    def run(key: Any, frames: Iterator[Frame], state: Any) -> Iterator[Frame]:
        freeze_worker_heap()
        columns = _columns(frames)
        rows = rows_of() if rows_of is not None else Router(route_to, last, specs)
        if key[0] != ONE_GROUP:  # error and control rows pass through
            for s, sb, kind, pv in zip(*columns, strict=True):
                rows.passthrough(int(s), int(sb), int(kind), pv)
            yield rows.batch() if arrow else rows.frame()
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
        if closes:
            stage.close()
            drive.drain(END_SEQ, 0)
        state.update((main_classes.dumps(by_position(specs, stage.snapshot())),))
        yield rows.batch() if arrow else rows.frame()

    return run


def _columns(frames: Iterator[Frame]) -> tuple[list[Any], ...]:
    """The ``seq``, ``sub``, ``kind`` and ``p`` columns of a group's frames, as lists.

    Unordered: :func:`~streams_spark.packs.opened` puts the elements in order
    (a pandas concat and sort would cost more than the group's Python work).
    A frame is a pandas frame (``applyInPandasWithState``) or an Arrow table
    (``applyInArrow``, a static DataFrame's groups: Arrow both ways, as the
    output's typed columns need; see :mod:`streams_spark.typed_payloads`).
    """
    cols: tuple[list[Any], ...] = ([], [], [], [])
    for frame in frames:
        for col, name in zip(cols, ("seq", "sub", "kind", "p"), strict=True):
            col.extend(frame.column(name).to_pylist() if isinstance(frame, pa.Table)
                       else frame[name].tolist())
    return cols


#: The outputs of a window are numbered by this many low bits of the ``seq`` of
#: its first element (the shift of :meth:`Driver.push` takes the other 16).
FIRST_BITS = 47
FIRST_MASK = (1 << FIRST_BITS) - 1
#: The ``seq`` of what a static input's end lets out: after every row's
#: (:func:`_partition_base`, whatever the number of partitions).
END_SEQ = 2 ** 63 - 1


def _ordered_windows(batch: pa.RecordBatch | pa.Table) -> list[tuple[int, int, Any]]:
    """``(end, first seq, window)`` of each non-empty aggregated window.

    Windows closing together are emitted as in-process: by end, then in the
    order they were opened (their first element's ``seq``). A keyed window
    is ``(key, elements)``; with a ``bounds`` column, the elements are a
    :class:`~streams.Window` with the bounds Spark gave the window. The key
    is the first element's, as in-process (the ``k`` column's metadata
    gives the key function, see
    :func:`~streams_spark.route_columns.window_key_metadata`); without it,
    the key the column's bytes unpickle to.
    """
    names = batch.schema.names
    lists, firsts = windows_and_firsts(batch.column(names.index("items")))
    # Column at a time: q11 has a window per session, often of one element.
    first_seqs = np.asarray(firsts)
    at = np.flatnonzero(first_seqs >= 0)  # the windows of elements

    def column(name: str) -> Any:
        values = batch.column(names.index(name))
        return values if len(at) == len(firsts) else values.take(pa.array(at))

    ends = column("end").to_numpy(zero_copy_only=False)
    windows: list[Any] = lists if len(at) == len(firsts) else [lists[i] for i in at.tolist()]
    elements = windows
    if "bounds" in names:
        starts = column("start").to_numpy(zero_copy_only=False)
        windows = list(map(Window, seconds(starts).tolist(), seconds(ends).tolist(), windows))
    keys = column("k")
    keyf = key_of_windows(batch.schema.field("k").metadata)
    if keys.null_count == len(keys):  # unkeyed
        values = windows
    elif keyf is not None:
        # The key of the element that opened the window, as a dict keeps the
        # first of keys it takes as one (2.0 and 2, True and 1, -0.0 and 0.0).
        keyed = (keys.is_valid().to_numpy(zero_copy_only=False).tolist() if keys.null_count
                 else [True] * len(windows))
        values = [(one_key(keyf(xs[0])), w) if has else w
                  for xs, w, has in zip(elements, windows, keyed, strict=True)]
    elif keys.null_count == 0:  # each key unpickled once
        if isinstance(keys, pa.ChunkedArray):  # a table's: one dictionary for all
            keys = keys.combine_chunks()
        coded = keys.dictionary_encode()
        unpickled = [pickle.loads(k) for k in coded.dictionary.to_pylist()]
        values = [(unpickled[i], w) for i, w in zip(
            coded.indices.to_numpy(zero_copy_only=False).tolist(), windows, strict=True)]
    else:
        values = [w if k is None else (pickle.loads(k), w)
                  for k, w in zip(keys.to_pylist(), windows, strict=True)]
    return list(zip(ends.tolist(), first_seqs[at].tolist(), values, strict=True))


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
    windows = sorted(_ordered_windows(table), key=lambda w: (w[0], w[1]))
    return [(WINDOW_ITEMS, w[2]) for w in windows]
