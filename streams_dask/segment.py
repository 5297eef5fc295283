"""The Dask segment: which nodes it admits, and how it is cut into tasks.

A segment starts at a ``scatter()`` node and ends at ``gather()`` nodes.
Nodes created in between are offered to :meth:`DaskSegment.admit`, which
refuses, at graph-build time, anything that cannot give on Dask exactly the
result it gives in-process.

When the first element arrives the segment is *planned*: its nodes, read
through ``describe()``, become one or two stages (see :func:`plan_stages`).
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cloudpickle  # type: ignore[import-untyped]

from streams import Segment, Stream
from streams.errors import short_repr
from streams.segment import join_here
from streams.stage import StageOp, StagePlan

from .key_groups import GroupStates

if TYPE_CHECKING:
    from .nodes import Scatter

__all__ = ["DaskSegment", "Plan", "plan_stages"]

def _pickles(what: str, node: Stream[Any], value: Any) -> None:
    """Refuse ``value`` now if it cannot be sent to a worker."""
    try:
        cloudpickle.dumps(value)
    except Exception as e:
        raise TypeError(
            f"{node._label()}: its {what} {short_repr(value)} cannot be pickled to "
            f"send to Dask workers ({type(e).__name__}: {e}); use a module-level "
            "function, or gather() before this step to run it in-process"
        ) from e


class DaskSegment(Segment):
    """The nodes between one ``scatter()`` and its ``gather()`` nodes.

    Parameters
    ----------
    entry : Scatter
        The ``scatter()`` node that owns the segment and runs it.

    Examples
    --------
    >>> import streams_dask
    >>> from streams import Stream
    >>> s = Stream().scatter()
    >>> try:
    ...     s.latest()
    ... except TypeError as e:
    ...     print(e)
    latest() cannot run on a Dask segment: latest (it depends on when downstream
    reads); call gather() before latest() to run it in-process
    """

    backend = "dask"

    def __init__(self, entry: Scatter) -> None:
        self.entry = entry
        self.nodes: list[Stream[Any]] = []
        self.exits: list[Stream[Any]] = []
        self.started = False

    def admit(self, node: Stream[Any]) -> None:
        """Accept ``node`` or raise a build-time error naming it."""
        if self.started:
            raise RuntimeError(
                f"{node._label()}: the Dask segment from {self.entry._label()} is "
                "already running; build the whole graph before emitting"
            )
        # Traits first: a node is offered while its constructor runs, and only
        # what its traits read is set yet when it must be refused.
        traits = node._traits()
        op = node._operator
        if traits.local_only is not None:
            raise TypeError(
                f"{op}() cannot run on a Dask segment: {node._label()} "
                f"({traits.local_only}); call gather() before {op}() to run it in-process"
            )
        spec = node.describe()
        for u in node.upstreams:
            if u._segment is not self:
                raise ValueError(
                    f"{node._label()}: one upstream runs on Dask ({self.entry._label()}) "
                    f"and {u._label()} does not: gather() first, or scatter() both from "
                    "one scatter() node"
                )
        if not self.entry.ordered and spec.traits.stateful:
            raise TypeError(
                f"{op}() cannot follow scatter(ordered=False): its results depend on the "
                f"order of elements; use scatter() (ordered), or gather() before {op}()"
            )
        if spec.func is not None:
            _pickles("function", node, spec.func)
        for name, value in spec.params.items():
            _pickles(f"parameter {name}=", node, value)
        if spec.traits.ticked:
            # Its windows close on the worker, at ticks from scatter(); the
            # client-side node must never fire its own timer (it would push
            # empty windows to gather()). A closed node's timer does nothing.
            node._closed = True
        self.nodes.append(node)
        self.entry._admitted(node)

    def element_bound(self) -> int | None:
        """Most elements in flight, from the ``buffer(n)`` nodes of the segment.

        In-process, ``buffer(n)`` lets the producer run ``n`` elements ahead
        of what follows; on Dask that is how many elements may be between
        ``scatter()`` and ``gather()``. None: the segment has no such node.
        """
        bounds = [spec.params["n"] for spec in (n.describe() for n in self.nodes)
                  if spec.traits.identity_on_engine and isinstance(spec.params.get("n"), int)]
        return min(bounds) if bounds else None

    def merge(self, others: list[Segment], node: Stream[Any]) -> Segment | None:
        """Combine the results of several ``scatter()`` segments in this process.

        Each segment runs from its own ``scatter()``, so no task sees
        elements of both: as in streamz, ``node`` (a ``zip``, a ``union``)
        takes the gathered results, and ``gather()`` after it passes them on.
        A node whose output depends on how its inputs interleave is refused
        if a segment lets elements overlap: their results come back in
        batches, not in the order they were emitted.
        """
        if not all(isinstance(o, DaskSegment) for o in others):
            return None
        overlapping = [(s, why) for s in (self, *others)
                       if isinstance(s, DaskSegment) and (why := s.overlap()) is not None]
        if overlapping and node._traits().interleaving:
            # Each input's results come back as its tasks finish: the node
            # here would see another interleaving than was emitted (a join
            # then judged elements late and lost pairs; a lookup read another
            # table), so a run would not give the in-process result.
            segment, why = overlapping[0]
            op = node._operator
            raise ValueError(
                f"{node._label()}: its output depends on how its inputs' elements "
                f"interleave, and {segment.entry._label()} is given {why}: its elements "
                "overlap on the cluster and their results come back in batches, not as "
                "they were emitted. Use scatter() without it (each element's results then "
                f"come back before the next is emitted), branch the inputs from one "
                f"scatter() if {op}() runs on Dask, or gather() each input first to "
                f"{op}() them as they come back")
        return join_here(node)

    def overlap(self) -> str | None:
        """What makes elements overlap on the cluster (``"batch_size=1000"``), or None.

        streamz's ``scatter()`` has no batching arguments: given none of
        ours and no ``buffer()``, each ``emit`` waits for its element's
        results, as in streamz. Any of them asks for elements to overlap
        (see :class:`~streams_dask.nodes.Scatter`).
        """
        entry = self.entry
        given = [f"{name}={getattr(entry, name)!r}" for name in ("batch_size", "max_in_flight")
                 if getattr(entry, name) is not None]
        given += [] if entry.ordered else ["ordered=False"]
        bound = self.element_bound()
        given += [] if bound is None else [f"buffer({bound}) in its segment"]
        return " and ".join(given) or None

    def by_position(self, states: dict[int, Any]) -> dict[int, Any]:
        """``states`` (by node id) by each node's position in the segment instead.

        A checkpoint keeps them so: node ids change from run to run.
        """
        position = {n._node_id: i for i, n in enumerate(self.nodes)}
        return {position[node_id]: state for node_id, state in states.items()}

    def by_node(self, states: dict[int, Any], keyed: bool) -> dict[int, Any]:
        """A checkpoint's ``states`` (see :meth:`by_position`) by node id, for the stateful
        stage, which runs by key group if ``keyed``.

        States kept by key group for a stage that now runs as one, or the
        other way round, are refused: the graph changed since.
        """
        grouped = {isinstance(s, GroupStates) for s in states.values()}
        if grouped and grouped != {keyed}:
            raise ValueError(
                f"{self.entry._label()}: the checkpoint holds this segment's state "
                f"{'by key group' if True in grouped else 'as one state'}, but the "
                f"segment now runs {'by key group' if keyed else 'as one stage'}: "
                "the graph changed since it was taken; restart without it")
        return {self.nodes[position]._node_id: state for position, state in states.items()}

    def add_exit(self, gather: Stream[Any]) -> None:
        """Register a ``gather()`` node: results come back through it."""
        if self.started:
            raise RuntimeError(
                f"{gather._label()}: the Dask segment from {self.entry._label()} is "
                "already running; build the whole graph before emitting"
            )
        self.exits.append(gather)


@dataclass(frozen=True)
class Plan:
    """How a segment runs: one parallel stage, or a prefix and a chained stage.

    ``first`` runs batches independently (in parallel); ``second``, if any,
    holds state and runs batches one after the other, on what ``first``
    produced (or on the batch itself when ``first`` is None).
    """

    first: bytes | None
    second: bytes | None
    #: ``second`` starts with a node with one state per key, and nothing
    #: after it keeps state: its batches run by key group (see
    #: :mod:`streams_dask.key_groups`).
    keyed: bool = False


_tokens = itertools.count()


def _is_stateful(node: Stream[Any]) -> bool:
    # A node that only shapes in-process timing (buffer) holds nothing on
    # an engine: it does not make the segment carry state between batches.
    traits = node.describe().traits
    return traits.stateful and not traits.identity_on_engine


def _downstream_codes(node: Stream[Any], exit_index: dict[int, int],
                      members: set[int]) -> tuple[int, ...]:
    codes = []
    for d in node.downstreams:
        if id(d) in exit_index:
            codes.append(-1 - exit_index[id(d)])
        elif id(d) in members:
            codes.append(d._node_id)
    return tuple(codes)


def _op(node: Stream[Any], exit_index: dict[int, int], members: set[int]) -> StageOp:
    return StageOp(node.describe(), _downstream_codes(node, exit_index, members))


def plan_stages(segment: DaskSegment) -> Plan:
    """Cut the segment into stages and pickle them, once, for the workers.

    A segment without state is one stage: its batches run in parallel, the
    whole chain of steps fused into each task. Otherwise the longest chain
    of stateless single-input, single-output steps after ``scatter()`` is a
    parallel first stage, and the rest a second stage whose batches run in
    order, carrying the state from one to the next through the client
    (so no task's lineage grows with the stream). A second stage that is one
    node with one state per key, then steps without state, runs each batch
    by key group, one task per worker thread (``Plan.keyed``, see
    :mod:`streams_dask.key_groups`).
    """
    entry = segment.entry
    exit_index = {id(g): i for i, g in enumerate(segment.exits)}
    nodes = segment.nodes
    token = f"{uuid.uuid4().hex}-{next(_tokens)}"
    everyone = {id(n) for n in nodes}
    if not any(_is_stateful(n) for n in nodes):
        ops = tuple(_op(n, exit_index, everyone) for n in nodes)
        stage = StagePlan(token, entry._node_id,
                          _downstream_codes(entry, exit_index, everyone), ops, None)
        return Plan(cloudpickle.dumps(stage), None)
    prefix: list[Stream[Any]] = []
    last: Stream[Any] = entry
    while (len(last.downstreams) == 1 and id(last.downstreams[0]) in everyone
           and len(last.downstreams[0].upstreams) == 1
           and not _is_stateful(last.downstreams[0])):
        last = last.downstreams[0]
        prefix.append(last)
    first = None
    if prefix:
        members = {id(n) for n in prefix}
        # Only ``last`` of the prefix can feed a gather() (every node before
        # it feeds the next, alone). Its output goes on as plain values, and
        # the second stage, whose root it is, pushes them to all its
        # downstreams, exits included, in its order: an exit here would emit
        # twice, and its (exit, value) events would reach the second stage
        # as elements.
        ops = tuple(_op(n, exit_index if n is not last else {}, members) for n in prefix)
        stage1 = StagePlan(token + "-1", entry._node_id,
                           _downstream_codes(entry, exit_index, members), ops,
                           last._node_id)
        first = cloudpickle.dumps(stage1)
    rest = [n for n in nodes if id(n) not in {id(p) for p in prefix}]
    members = {id(n) for n in rest}
    ops = tuple(_op(n, exit_index, members) for n in rest)
    stage2 = StagePlan(token + "-2", last._node_id,
                       _downstream_codes(last, exit_index, members), ops, None)
    return Plan(first, cloudpickle.dumps(stage2), keyed=_by_key_group(last, rest))


def _by_key_group(last: Stream[Any], rest: list[Stream[Any]]) -> bool:
    """Whether the stage ``rest`` (fed by ``last``) can run by key group.

    It must start with the one node fed by ``last``, whose state is one
    state per key (or that and a watermark, which the group tasks share),
    followed only by nodes keeping none (any group's task may run them); a
    processing-time window needs every element's task.
    """
    head = rest[0]
    spec = head.describe()
    keyed = spec.traits.key is not None or spec.traits.watermark_key is not None
    return (keyed and spec.traits.stateful
            and last.downstreams == [head] and head.upstreams == [last]
            and not any(_is_stateful(n) or n.describe().traits.ticked for n in rest[1:]))
