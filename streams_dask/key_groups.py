"""Keyed stages spread over the workers: one state per key group.

A node whose state is one independent state per key (``scan(f, key=...)``,
``stateful_map(f, key=...)``: the ``key`` trait) need not see every element
in one task. Its keys are hashed into :data:`KEY_GROUPS` groups; each batch
of the stateful stage runs as several tasks at once, each over the elements
of some groups with those groups' states, and the client merges what they
return back into input order (:mod:`streams_dask.chain`, which also keeps
each task's states on its worker for the next batch). Every node after the
keyed one in the stage keeps no state, so it may run in any group's task.

The states are kept per group (``{node id: {group: state}}``), and the
number of groups is fixed: however many tasks a batch is cut into (one per
worker thread), a group's state goes to whichever task runs it. So a
pipeline restored from a checkpoint on a cluster with a different number of
workers spreads the same groups over the workers it has, and gives the
output of an uninterrupted run.

Keyed event-time windows (the ``watermark_key`` trait) run by key group
too, each group told the stream's watermark: see
:mod:`streams_dask.window_groups`.

Each task calls the key function over the whole batch and keeps the
elements of its own groups, so the key function must give an element the
same key at every call; in-process it is called once. Each task reports the
positions it took, and the client checks that every element was taken by
exactly one (:mod:`streams_dask.taken_positions`): a random or clock-reading
key is an error naming the node, not elements silently doubled or lost. A
random key drawn in a ``map()`` before the keyed node is drawn once (see
:mod:`streams_dask.pure_steps`).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import Any

from streams.main_classes import holds_main_class
from streams.operators._checks import key_bytes, key_function
from streams.stage import Failure, Stage, StagePlan, StageResult, checkout, release

__all__ = ["KEY_GROUPS", "SHARED", "GroupStates", "group_of", "parts", "run_key_groups",
           "states_of", "taken_state", "updated"]

#: Keys are hashed into this many groups. Fixed: a checkpoint holds one
#: state per group, and restores on any number of workers.
KEY_GROUPS = 64

#: Where :class:`GroupStates` keeps what all groups share (a keyed window's
#: watermark): not a group, every task gets it.
SHARED = -1


class GroupStates(dict[int, Any]):
    """A keyed node's state as one state per key group (``{group: state}``)."""

    def __reduce__(self) -> Any:
        return (GroupStates, (dict(self),))


def group_of(key: Any) -> int:
    """The key group of ``key``: the same in every worker process.

    A key that holds an instance of a class defined in ``__main__`` (a
    script's or a notebook's) is in group 0. Such a class reaches worker
    processes by value, as a copy that pickle cannot write by reference
    (it is not the ``__main__`` attribute of its name there), while in the
    client's process (a cluster of threads) it can: group 0 everywhere
    keeps its keys together wherever a checkpoint restores them. So is a
    key that does not pickle at all (the node fails on it, or keeps it in
    group 0's state).

    Examples
    --------
    >>> group_of("user-7") == group_of("user-7"), group_of(1) == group_of(1.0) == group_of(True)
    (True, True)
    """
    try:
        data = key_bytes(key)
    except Exception:
        return 0
    if b"__main__" in data and holds_main_class(key):  # rare: the search is the cost
        return 0
    return zlib.crc32(data) % KEY_GROUPS


def _grouper(plan: StagePlan) -> Callable[[Any], int]:
    """``x -> group`` for the keyed node that starts ``plan``."""
    keyf = key_function(plan.ops[0].spec.traits.key)
    known: dict[Any, int] = {}

    def group(x: Any) -> int:
        try:
            k = keyf(x)
            g = known.get(k)
            if g is None:
                g = known[k] = group_of(k)
            return g
        except Exception:
            return 0  # the node fails on it, in its place: any group will do
    return group


def run_key_groups(plan_bytes: bytes, items: Any, groups: tuple[int, ...],
                   sealed: Any, close: bool) -> tuple[StageResult, bytearray | None]:
    """Run a keyed stage over the elements of ``groups``; a Dask task function.

    ``items`` is the batch (a :class:`~streams_dask.worker.Batch`) or the
    previous stage's result; ``sealed`` the groups' states (in a
    :class:`~streams_dask.worker.Sealed`). Returns a :class:`StageResult` whose events are
    ``(order, event)``: for a fold, the position in the batch (its length for
    what ``close`` flushes); failures carried from an earlier stage go with
    the task of group ``groups[0] == 0``.

    And which positions of the batch this task took: a 1 at each (a carried
    failure is taken by the task of group 0). Every task calls the key
    function over the whole batch, so a key function that gives an element
    another key at another call has it taken by two tasks or by none; the
    client checks that each position was taken once
    (:func:`~streams_dask.taken_positions.check_taken`). None when this task
    holds every group: there is nothing to check.
    """
    from .window_groups import run_window_groups
    from .worker import elements_of, unsealed

    started = time.perf_counter()
    states: dict[int, GroupStates] | None = unsealed(sealed)
    batch = elements_of(items)
    stage = checkout(plan_bytes)
    plan = stage.plan
    # One byte a position, written whether or not it is sent back: cheaper
    # than asking at every element.
    taken = bytearray(len(batch))
    checked = len(groups) < KEY_GROUPS
    if plan.ops[0].spec.traits.watermark_key is not None:
        windows, changed = run_window_groups(stage, batch, groups, states, close, taken)
        release(stage)
        return (StageResult(windows, changed, time.perf_counter() - started),
                taken if checked else None)
    group = _grouper(plan)
    mine = set(groups)
    by_group: dict[int, list[tuple[int, Any]]] = {}
    out: list[tuple[int, Any]] = []
    for pos, x in enumerate(batch):
        if type(x) is Failure:
            if 0 in mine:
                out.append((pos, x))
                taken[pos] = 1
            continue
        g = group(x)
        if g in mine:
            by_group.setdefault(g, []).append((pos, x))
            taken[pos] = 1
    new: dict[int, GroupStates] = {}
    held = {g for s in (states or {}).values() for g in s}
    for g in sorted(mine if close else by_group):
        if close and g not in held and g not in by_group:
            continue
        # A closed graph cannot run again: each group closes its own.
        run = Stage(plan) if close else stage
        run.restore({nid: s[g] for nid, s in (states or {}).items() if g in s} or None)
        push = run.root._pusher()
        events = run.events
        for pos, x in by_group.get(g, ()):
            push(x)
            if events:
                out.extend((pos, e) for e in events)
                events.clear()
        if close:
            run.close()
            out.extend((len(batch), e) for e in events)
            events.clear()
        run.failed.clear()
        for nid in run.stateful:
            new.setdefault(nid, GroupStates())[g] = taken_state(run.nodes[nid])
    release(stage)
    return (StageResult(out, new or None, time.perf_counter() - started),
            taken if checked else None)


def taken_state(node: Any) -> dict[str, Any]:
    """``node.snapshot()`` without its copy: the state itself, handed over.

    Copying every group's state (every open window's elements) each batch
    costs more than the work. No copy is needed: the node is restored to
    another group's state (or a fresh one) before it runs again, and a
    part's states reach its next task pickled (:mod:`streams_dask.chain`).
    (A node run by key group has no ``ttl``: its snapshot is its state.)
    """
    return {name: getattr(node, name) for name in node._state}


def updated(states: dict[int, Any] | None, new: dict[int, Any] | None
            ) -> dict[int, GroupStates] | None:
    """``states`` with the groups of ``new`` replaced."""
    if not new:
        return states
    out = {nid: GroupStates(s) for nid, s in (states or {}).items()}
    for nid, s in new.items():
        out.setdefault(nid, GroupStates()).update(s)
    return out


def parts(tasks: int) -> list[tuple[int, ...]]:
    """The key groups of each of ``tasks`` tasks (group 0 in the first).

    >>> [len(p) for p in parts(3)], parts(1)[0][:3]
    ([22, 21, 21], (0, 1, 2))
    """
    n = max(1, min(tasks, KEY_GROUPS))
    return [tuple(range(i, KEY_GROUPS, n)) for i in range(n)]


def states_of(states: dict[int, Any] | None, groups: tuple[int, ...]
              ) -> dict[int, GroupStates] | None:
    """The part of ``states`` a task running ``groups`` needs."""
    if not states:
        return None
    out = {nid: GroupStates({g: s[g] for g in (SHARED, *groups) if g in s})
           for nid, s in states.items()}
    return out
