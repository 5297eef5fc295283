"""Keyed event-time windows by key group: each group's keys apart, one watermark.

A keyed ``timed_window(..., time=, key=)`` or ``session_window(..., key=)``
keeps one set of windows per key, but its watermark (the largest event time
seen, minus ``lateness``) is the stream's, all keys together: an element of
one key closes the windows of every key. The node declares this as its
``watermark_key`` trait. Run by key group (:mod:`streams_dask.key_groups`),
each group task still gives exactly the output of one node seeing every
element, because the watermark at an element depends only on the elements
before it:

* each task reads the whole batch once, in order: every element's event time
  and key (the node's own :meth:`_stamp`), so its group, and the positions
  where the stream's largest time rises (a running max, from where the last
  batch left it); the positions it takes go back to the client, which
  checks that every element was taken by one task
  (:mod:`streams_dask.taken_positions`);
* each group's node is then given its elements in order, each with its
  number in the stream and the largest time by then (``_arrive_as``), and
  closes its windows at the rises where something of its own closes
  (``_next_close``, ``_close_to``);
* each output is tagged ``(position, phase, end, opened)``: an element's own
  events (a failure, a late element) come at its position, then the windows
  its time closes, by end then by when they were opened across all keys, as
  the node orders them (see ``_take_closed``); the round's merge
  (:func:`~streams_dask.chain.merge_links`) sorts the tags of all groups,
  which is the order of one node closing all keys.

The stream's largest time and how many elements it has seen are kept with
the groups' states under :data:`SHARED`, so they go on from batch to batch
and into checkpoints, whatever number of workers runs the groups next.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import Any

from streams.stage import Failure, Stage

from .key_groups import SHARED, GroupStates, group_of, taken_state

__all__ = ["run_window_groups"]

_OWN, _CLOSED, _AFTER = 0, 1, 2
_NO_WINDOW = (0.0, 0)


class _Rises:
    """Where the stream's largest event time rises in a batch: positions and values."""

    __slots__ = ("before", "maxima", "positions")

    def __init__(self, before: float) -> None:
        self.before = before
        self.positions: list[int] = []
        self.maxima: list[float] = []

    def at(self, pos: int) -> float:
        """The largest time of the stream up to ``pos``, itself included."""
        i = bisect_right(self.positions, pos) - 1
        return self.maxima[i] if i >= 0 else self.before

    def next_closing(self, due: float, start: int, limit: int) -> int:
        """The first rise from ``start``, before position ``limit``, to ``due`` or
        beyond (see ``_next_close``); or the first rise at ``limit`` or after if
        there is none."""
        end = bisect_left(self.positions, limit, lo=start)
        return bisect_left(self.maxima, due, lo=start, hi=end)


def _read(node: Any, batch: list[Any], mine: set[int], rises: _Rises,
          out: list[tuple[Any, Any]], taken: bytearray
          ) -> dict[int, list[tuple[int, Any]]]:
    """The elements of the groups ``mine``, by group, and the rises of the batch.

    Marks in ``taken`` the position of each element it keeps (see
    :func:`~streams_dask.key_groups.run_key_groups`).

    Failures carried from an earlier stage go to the task of group 0, at
    their position; an element whose time or key raises goes to group 0,
    where the node fails on it in its place, and moves no watermark. A key
    that does not pickle on the worker (of a class a script defines) is in
    group 0 too (see :func:`group_of`), but its element keeps its time and
    moves the watermark, as in-process.
    """
    by_group: dict[int, list[tuple[int, Any]]] = {}
    known: dict[Any, int] = {}
    top = rises.before
    for pos, x in enumerate(batch):
        if type(x) is Failure:
            if 0 in mine:
                out.append(((pos, _OWN, *_NO_WINDOW), x))
                taken[pos] = 1
            continue
        try:
            t, k = node._stamp(x)
            g = known.get(k)
            if g is None:  # group_of does not raise: the time above stays
                g = known[k] = group_of(k)
        except Exception:
            t, g = -math.inf, 0
        if t > top:
            top = t
            rises.positions.append(pos)
            rises.maxima.append(t)
        if g in mine:
            by_group.setdefault(g, []).append((pos, x))
            taken[pos] = 1
    return by_group


class _GroupRun:
    """One key group's node over a batch, its outputs tagged for the merge."""

    __slots__ = ("changed", "events", "node", "out", "rise", "rises")

    def __init__(self, stage: Stage, rises: _Rises, out: list[tuple[Any, Any]]) -> None:
        self.node: Any = stage.nodes[stage.plan.ops[0].spec.id]
        self.events = stage.events
        self.rises = rises
        self.out = out
        self.rise = 0  # the next rise to look at
        self.changed = False

    def take(self, tag: tuple[Any, ...]) -> None:
        if self.events:
            self.out.extend((tag, e) for e in self.events)
            self.events.clear()

    def close_before(self, limit: int) -> None:
        """Close the windows that the rises before position ``limit`` close."""
        node, rises = self.node, self.rises
        while True:
            due = node._next_close()
            if due == math.inf:
                return
            i = self.rise = rises.next_closing(due, self.rise, limit)
            if i >= len(rises.positions) or rises.positions[i] >= limit:
                return
            self.emit(rises.positions[i], node._close_to(rises.maxima[i]))
            self.rise += 1

    def emit(self, pos: int, closed: list[tuple[tuple[float, int], Any]]) -> None:
        for order, window in closed:
            self.changed = True
            self.node._emit(window)
            self.take((pos, _CLOSED, *order))


def run_window_groups(stage: Stage, batch: list[Any], groups: tuple[int, ...],
                      states: dict[int, GroupStates] | None, close: bool,
                      taken: bytearray
                      ) -> tuple[list[tuple[Any, Any]], dict[int, GroupStates]]:
    """Run a keyed event-time window stage over the elements of ``groups``.

    Returns the tagged events (see the module's docstring) and the new
    states of the groups that changed, with the stream's :data:`SHARED`
    largest time and count; marks in ``taken`` (one byte a position of
    ``batch``) the positions it took (see
    :func:`~streams_dask.key_groups.run_key_groups`). ``stage`` is not
    released: it is the caller's.
    """
    plan = stage.plan
    head = plan.ops[0].spec.id
    states = states or {}
    shared: dict[int, Any] = states.get(head) or {}
    before, seen = shared.get(SHARED, (-math.inf, 0))
    node: Any = stage.nodes[head]
    rises = _Rises(before)
    mine = set(groups)
    out: list[tuple[Any, Any]] = []
    by_group = _read(node, batch, mine, rises, out, taken)
    held = {g for s in states.values() for g in s if g != SHARED}
    new: dict[int, GroupStates] = {}
    for g in sorted(mine & (held | set(by_group))):
        # A closed graph cannot run again: each group closes its own.
        run = Stage(plan) if close else stage
        run.restore({nid: s[g] for nid, s in states.items() if g in s} or None)
        group = _GroupRun(run, rises, out)
        push = run.root._pusher()
        for pos, x in by_group.get(g, ()):
            group.close_before(pos)
            group.node._arrive_as(seen + pos, rises.at(pos))
            push(x)
            group.take((pos, _OWN, *_NO_WINDOW))
            group.changed = True
        group.close_before(len(batch))
        if close:
            group.emit(len(batch), group.node._close_to(math.inf))
            run.close()
            group.take((len(batch), _AFTER, *_NO_WINDOW))
        run.failed.clear()
        if group.changed or close:
            for nid in run.stateful:
                new.setdefault(nid, GroupStates())[g] = taken_state(run.nodes[nid])
    top = rises.maxima[-1] if rises.maxima else before
    new.setdefault(head, GroupStates())[SHARED] = (top, seen + len(batch))
    return out, new
