"""Packed rows: the elements one task sends to one group of a stateful stage.

Between the stages of a streaming plan, one Spark row per element costs
more than the Python work on it: Spark converts, shuffles, sorts and
aggregates every row, and the worker converts it to and from pandas. So a
task sends the elements bound for one group of the next stage (one key of
a keyed scan, the one group of a sequential stage, one window of an
event-time window) as one row of kind :data:`~streams_spark.codec.PACK`,
whose payload pickles ``(seqs, subs, values)``: the values in order with
their positions. The receiving stage opens the packs and puts the elements
back in ``(seq, sub)`` order, the order of the in-process run.

Only data travels packed: errors and control rows stay rows of their own.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from streams.operators.window_bounds import micros
from streams.spec import EventTime

from .codec import DATA, PACK, ROW, picklable_rows
from .input_rows import rows_at
from .main_classes import dumps

__all__ = ["first_seen_codes", "opened", "pack_payload", "window_group", "windows_and_firsts",
           "windows_of"]


def pack_payload(seqs: list[int], subs: list[int], values: list[Any],
                 keys: list[bytes] | None = None) -> bytes:
    """The payload of a pack (raises if a value cannot be pickled).

    ``keys`` are the elements' pickled keys, for a keyed scan.

    Examples
    --------
    >>> opened([3], [0], [PACK], [pack_payload([3, 4], [0, 0], ["a", "b"], [b"k", b"j"])])
    ([3, 4], [0, 0], [0, 0], ['a', 'b'], [b'k', b'j'])
    """
    return dumps((seqs, subs, picklable_rows(values), keys), values)


def opened(seqs: Iterable[int], subs: Iterable[int], kinds: Iterable[int], ps: Iterable[Any]
           ) -> tuple[list[int], list[int], list[int], list[Any], list[bytes | None]]:
    """Rows with their packs opened, in ``(seq, sub)`` order.

    Returns the columns ``seq``, ``sub``, ``kind``, ``item`` and ``key``: an
    item is the value of a data row (a packed element is a data row), the
    payload of any other row; a key is a packed element's pickled key (None
    outside the packs of a keyed scan).

    Examples
    --------
    >>> opened([1, 2], [0, 0], [PACK, DATA],
    ...        [pack_payload([1, 3], [0, 0], ["a", "c"]), pickle.dumps("b")])
    ([1, 2, 3], [0, 0, 0], [0, 0, 0], ['a', 'b', 'c'], [None, None, None])
    """
    out_s: list[int] = []
    out_b: list[int] = []
    out_k: list[int] = []
    out_v: list[Any] = []
    out_key: list[bytes | None] = []
    loads = pickle.loads
    in_order = True
    last: tuple[int, int] | None = None
    for s, sb, kind, p in zip(seqs, subs, kinds, ps, strict=True):
        if kind == PACK:
            pseqs, psubs, values, keys = loads(p)
            first = (pseqs[0], psubs[0])
            out_s.extend(pseqs)
            out_b.extend(psubs)
            out_k.extend([DATA] * len(pseqs))
            out_v.extend(values)
            out_key.extend([None] * len(pseqs) if keys is None else keys)
        else:
            s, sb, kind = int(s), int(sb), int(kind)
            first = (s, sb)
            out_s.append(s)
            out_b.append(sb)
            out_k.append(kind)
            out_v.append(loads(p) if kind == DATA else p)
            out_key.append(None)
        # A pack is in order inside; only the seams between rows can be out
        # of order (rows of several tasks), and then everything is sorted.
        if last is not None and first < last:
            in_order = False
        last = (out_s[-1], out_b[-1])
    if not in_order:
        order = sorted(range(len(out_s)), key=lambda i: (out_s[i], out_b[i]))
        return ([out_s[i] for i in order], [out_b[i] for i in order],
                [out_k[i] for i in order], [out_v[i] for i in order],
                [out_key[i] for i in order])
    return out_s, out_b, out_k, out_v, out_key


def windows_of(items: pa.Array | pa.ChunkedArray) -> list[list[Any]]:
    """The elements of each aggregated window, in ``(seq, sub)`` order.

    ``items`` is a list column (one window per row) of structs ``seq``,
    ``sub``, ``kind``, ``p`` (and ``r``, input rows carried as columns: see
    :mod:`streams_spark.input_rows`); data rows and packs count, control
    rows do not (a window of control rows only is an empty list).
    """
    return windows_and_firsts(items)[0]


def windows_and_firsts(items: pa.Array | pa.ChunkedArray) -> tuple[list[list[Any]], list[int]]:
    """:func:`windows_of`, and the ``seq`` of each window's first element (-1: none).

    The first element's ``seq`` orders windows that close together as
    in-process: in the order they were opened.

    Examples
    --------
    >>> item = pa.struct([("seq", pa.int64()), ("sub", pa.int64()), ("kind", pa.int8()),
    ...                   ("p", pa.binary())])
    >>> items = pa.array([[{"seq": 7, "sub": 0, "kind": DATA, "p": pickle.dumps("c")},
    ...                    {"seq": 2, "sub": 0, "kind": PACK,
    ...                     "p": pack_payload([2, 9], [0, 0], ["a", "d"])}], []],
    ...                  pa.list_(item))
    >>> windows_and_firsts(items)
    ([['a', 'c', 'd'], []], [2, -1])
    """
    if isinstance(items, pa.ChunkedArray):
        items = items.combine_chunks()
    # Column at a time: a window function's windows are often of one or two
    # elements (a key's window), so per-item Python would cost more than the
    # function. Only packs and pickled elements are opened one by one.
    flat = pc.list_flatten(items)
    parents = pc.list_parent_indices(items).to_numpy()
    kinds = flat.field("kind").to_numpy(zero_copy_only=False)
    seq = flat.field("seq").to_numpy(zero_copy_only=False)
    sub = flat.field("sub").to_numpy(zero_copy_only=False)
    at = np.flatnonzero(kinds == DATA)  # pickled elements; control rows are no elements
    loads = pickle.loads
    values: list[Any] = [loads(p) for p in flat.field("p").take(pa.array(at)).to_pylist()]
    win, seqs, subs = parents[at], seq[at], sub[at]
    carried = np.flatnonzero(kinds == ROW)
    if carried.size:  # input rows, built at once from their columns
        values.extend(rows_at(flat.field("r"), carried.tolist()))
        row_win, row_seqs = _carried_positions(flat, carried, parents, seq)
        win = np.concatenate([win, row_win])
        seqs = np.concatenate([seqs, row_seqs])
        subs = np.concatenate([subs, np.zeros(len(row_seqs), np.int64)])
    packs = np.flatnonzero(kinds == PACK)
    if packs.size:
        pack_win: list[int] = []
        pack_seq: list[int] = []
        pack_sub: list[int] = []
        for w, p in zip(parents[packs].tolist(),
                        flat.field("p").take(pa.array(packs)).to_pylist(), strict=True):
            pseqs, psubs, pvalues, _ = loads(p)
            pack_win.extend([w] * len(pseqs))
            pack_seq.extend(pseqs)
            pack_sub.extend(psubs)
            values.extend(pvalues)
        win = np.concatenate([win, np.array(pack_win, np.int64)])
        seqs = np.concatenate([seqs, np.array(pack_seq, np.int64)])
        subs = np.concatenate([subs, np.array(pack_sub, np.int64)])
    counts = np.bincount(win, minlength=len(items))
    ends = np.cumsum(counts)
    starts = ends - counts
    order = np.lexsort((subs, seqs, win))
    if not (order[1:] > order[:-1]).all():
        values = [values[i] for i in order.tolist()]
        seqs = seqs[order]
    out = [values[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    if not len(seqs):
        return out, [-1] * len(items)
    firsts = np.where(counts > 0, seqs[np.minimum(starts, len(seqs) - 1)], -1).tolist()
    return out, firsts


def _carried_positions(flat: pa.StructArray, carried: np.ndarray, parents: np.ndarray,
                       seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The window and ``seq`` of each input row the items ``carried`` (of kind ROW) hold.

    An item of one row is at its ``seq``; one of several has their seqs in
    ``p``, as little-endian int64s, which are read from the column's data
    at once.
    """
    counts = pc.list_value_length(flat.field("r").take(pa.array(carried))).to_numpy(
        zero_copy_only=False)
    row_seqs: np.ndarray = np.repeat(seq[carried], counts)
    several = np.flatnonzero(counts > 1)
    if several.size:
        ps = flat.field("p").take(pa.array(carried[several]))
        width = np.int64 if pa.types.is_large_binary(ps.type) else np.int32
        offsets = np.frombuffer(ps.buffers()[1], width, len(ps) + 1,
                                ps.offset * np.dtype(width).itemsize)
        data = np.frombuffer(ps.buffers()[2], "<i8", (offsets[-1] - offsets[0]) // 8,
                             offsets[0])
        # Each item's rows are at its start (in row_seqs) and on: the
        # positions of all of them at once.
        c = counts[several]
        starts = (np.cumsum(counts) - counts)[several]
        within = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
        row_seqs[np.repeat(starts, c) + within] = data
    return np.repeat(parents[carried], counts), row_seqs


def window_group(event_time: EventTime) -> Callable[[int], Any] | None:
    """The pack of an element bound for the window ``event_time``, by its microsecond.

    Elements in one pack are in the same windows: Spark puts the pack, by
    its latest time, in the windows of each of them. None: no packing (a
    session starts at each element's own time).

    Examples
    --------
    >>> group = window_group(EventTime(None, 6.0, 0.0, slide=2.0))
    >>> group(5_000_000) == group(4_000_000), group(5_000_000) == group(6_000_000)
    (True, False)
    """
    if event_time.session:
        return None
    size = micros(event_time.size)
    if event_time.slide is None:
        return lambda us: us // size
    slide = micros(event_time.slide)
    # Spark's windows of time m start at j * slide for j in (first, last].
    return lambda us: (us // slide, (us - size) // slide)


def first_seen_codes(columns: list[np.ndarray]) -> np.ndarray:
    """A code for each row of ``columns`` (equal rows, equal codes), 0, 1... as first seen.

    Examples
    --------
    >>> first_seen_codes([np.array([5, 3, 5, 3]), np.array(["a", "b", "b", "b"], object)])
    array([0, 1, 2, 1])
    """
    codes = pd.factorize(columns[0])[0]
    for column in columns[1:]:
        more, uniques = pd.factorize(column)
        # Both codes are below the number of rows: the pair fits 64 bits.
        codes = pd.factorize(codes.astype(np.int64) * len(uniques) + more)[0]
    return codes  # type: ignore[no-any-return]
