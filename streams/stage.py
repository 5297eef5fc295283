"""The stage program: part of a graph rebuilt from its descriptions, run over batches.

This is how an engine runs the core's operators, on a Dask worker as in a
Spark executor. A :class:`StagePlan` lists the nodes of a stage as their
frozen :class:`~streams.spec.NodeSpec` descriptions; :class:`Stage` rebuilds
them as an ordinary in-process graph (each node an instance of its
operator's own class, :func:`streams.spec.build`), pushes elements through
it, fused as in-process, and records in order what reaches the stage's
exits. Nothing here knows an operator by name: it reads the nodes' traits.

Besides elements, a stage handles:

* :class:`Failure` - a node's function raised: the stage records it, in
  order, and the node's own error policy is applied where the results
  arrive (every node of a stage routes its errors);
* :class:`Tick` - a processing-time window closes: the local clock owns
  time, so the node that feeds the engine sends ticks where windows close
  (:class:`streams.window_clock.WindowClock`) and the stage calls the
  window's ``tick()``. Stage nodes read a clock that never moves by itself.
* state - the stateful nodes' snapshots, taken after a batch and restored
  before the next, so an engine can carry them from task to task.
"""

from __future__ import annotations

import copy
import pickle
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .carried_errors import portable_error, state_not_pickled
from .clock import VirtualClock, use_clock
from .core import Stream
from .errors import short_repr
from .fusion import Fuser
from .spec import NodeSpec, build

__all__ = [
    "Failure",
    "Stage",
    "StageOp",
    "StagePlan",
    "StageResult",
    "Tick",
    "checkout",
    "portable_error",
    "release",
]


@dataclass(frozen=True)
class Failure:
    """A user function raised in a stage.

    Attributes
    ----------
    node_id : int
        The id of the node (as in its ``NodeSpec``) whose function raised.
    element : object
        The element it was processing.
    error : BaseException
        The exception, or a ``RuntimeError`` carrying its repr when the
        exception itself does not pickle.
    """

    node_id: int
    element: Any
    error: BaseException


@dataclass(frozen=True)
class Tick:
    """The local clock says the window of node ``node_id`` closes."""

    node_id: int


@dataclass(frozen=True)
class StageOp:
    """One node of a stage: its description and where its output goes.

    ``downstream`` lists, in the order the real node pushes to them, node
    ids of the stage and ``-1 - i`` for the stage's i-th exit.
    """

    spec: NodeSpec
    downstream: tuple[int, ...] = ()


@dataclass(frozen=True)
class StagePlan:
    """A connected part of a graph that one task runs over a batch.

    ``root_id`` is the node whose output the batch holds and
    ``root_downstream`` where it pushes; ``ops`` are the nodes below it in
    topological order; ``output_id``, if set, is the node whose elements go
    on (to the next stage): they are recorded as plain values, exits as
    ``(exit index, value)``.
    """

    token: str
    root_id: int
    root_downstream: tuple[int, ...]
    ops: tuple[StageOp, ...]
    output_id: int | None = None


class StageResult(NamedTuple):
    """What a batch gives: events in order, new states, and its run time."""

    events: list[Any]
    states: dict[int, Any] | None
    seconds: float


class UnpicklableElement:
    """Stands for a failed element that cannot travel back from the engine: its repr.

    The element of a routed failure goes back with its error; one holding a
    lock or a socket would fail the whole batch's result, naming no node.
    """

    __slots__ = ("text",)

    def __init__(self, element: Any) -> None:
        self.text = f"<an element that cannot be pickled: {short_repr(element)}>"

    def __repr__(self) -> str:
        return self.text


def portable_element(x: Any) -> Any:
    """``x`` if it survives pickling (cloudpickle's, as the engines'), else its repr."""
    try:
        pickle.dumps(x)
        return x
    except Exception:
        pass
    try:
        import cloudpickle  # type: ignore[import-untyped]

        cloudpickle.dumps(x)
        return x
    except Exception:
        return UnpicklableElement(x)


class _Exit(Stream[Any]):
    """Appends what reaches it to the stage's event list (fused: one append)."""

    __slots__ = ("events", "index")
    _operator = "stage_exit"
    _local_only = "it belongs to a running stage"

    def __init__(self, upstream: Stream[Any], events: list[Any], index: int | None) -> None:
        self.events = events
        self.index = index
        Stream.__init__(self, upstream)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        self.events.append(x if self.index is None else (self.index, x))
        return None

    def _fusable(self) -> bool:
        return True

    def _fuse(self, f: Fuser, x: str) -> None:
        append = f.bind(self.events.append, "append")
        f.line(f"{append}({x})" if self.index is None else f"{append}(({self.index}, {x}))")
        return None


class _Failures(Stream[Any]):
    """Turns the routed error records of one node into :class:`Failure` events."""

    __slots__ = ("events", "failed", "node_id")
    _operator = "stage_failures"
    _local_only = "it belongs to a running stage"

    def __init__(self, upstream: Stream[Any], events: list[Any], failed: list[int],
                 node_id: int) -> None:
        self.events = events
        self.failed = failed
        self.node_id = node_id
        Stream.__init__(self, upstream)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        self.failed.append(len(self.events))
        self.events.append(Failure(self.node_id, portable_element(x.element),
                                   portable_error(x.exception)))
        return None


class Stage:
    """A stage rebuilt as an in-process graph, ready to run batches.

    Parameters
    ----------
    plan : StagePlan

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> total = source.map(lambda x: 10 // x).scan(lambda a, b: a + b)
    >>> ops = (StageOp(total.upstream.describe(), (total.describe().id,)),
    ...        StageOp(total.describe(), (-1,)))
    >>> stage = Stage(StagePlan("doc", source.describe().id, (ops[0].spec.id,), ops))
    >>> events, states, _ = stage.run([1, 0, 2])
    >>> [e if type(e) is not Failure else type(e.error).__name__ for e in events]
    [(0, 10), 'ZeroDivisionError', (0, 15)]
    >>> list(states.values())
    [{'state': 15}]
    """

    def __init__(self, plan: StagePlan) -> None:
        self.plan = plan
        self.events: list[Any] = []
        #: Where among :attr:`events` the failures are (cleared with them):
        #: a reader that packs values need not look at every event.
        self.failed: list[int] = []
        # Nodes read this clock; it never moves, so no timer of theirs fires:
        # the local clock's ticks close their windows.
        with use_clock(VirtualClock()):
            self.root: Stream[Any] = Stream()
            self.nodes: dict[int, Stream[Any]] = {plan.root_id: self.root}
            self.ticked: dict[int, Any] = {}
            order = {plan.root_id: plan.root_downstream}
            self._add_exits(self.root, plan.root_downstream)
            for op in plan.ops:
                spec = op.spec
                ups = [self.nodes[u] for u in spec.upstream_ids]
                if spec.traits.identity_on_engine:
                    node: Stream[Any] = Stream(ups[0])
                else:
                    node = build(spec, ups)
                    node.on_error("route")
                    _Failures(node.errors, self.events, self.failed, spec.id)
                if spec.traits.ticked:
                    self.ticked[spec.id] = node
                self.nodes[spec.id] = node
                order[spec.id] = op.downstream
                self._add_exits(node, op.downstream)
            if plan.output_id is not None:
                _Exit(self.nodes[plan.output_id], self.events, None)
        self.stateful = [i for i, n in self.nodes.items() if n._state]
        self._initial = self.snapshot()
        # A node pushes to its downstreams in order, and that order is
        # visible (union, several exits): give each rebuilt node the
        # original's order rather than the order of rebuilding.
        code_of = {id(n): i for i, n in self.nodes.items()}
        for node_id, codes in order.items():
            rank = {c: r for r, c in enumerate(codes)}
            self.nodes[node_id].downstreams.sort(
                key=lambda d: rank.get(
                    -1 - d.index if isinstance(d, _Exit) and d.index is not None
                    else code_of.get(id(d), len(rank)), len(rank)))

    def _add_exits(self, node: Stream[Any], codes: tuple[int, ...]) -> None:
        for code in codes:
            if code < 0:
                _Exit(node, self.events, -1 - code)

    def restore(self, states: dict[int, Any] | None) -> None:
        """Set the stateful nodes' states (by node id) from :meth:`snapshot`.

        None sets the states the nodes had when built: a cached stage may have
        run another batch (or another key group) before.
        """
        if states is None:
            if self._initial is None:
                return
            states = copy.deepcopy(self._initial)
        for node_id, state in states.items():
            self.nodes[node_id].restore(state)

    def snapshot(self) -> dict[int, Any] | None:
        """The stateful nodes' states, by node id (None: the stage holds none)."""
        if not self.stateful:
            return None
        states = {}
        for i in self.stateful:
            try:
                states[i] = self.nodes[i].snapshot()
            except TypeError as e:  # copy.deepcopy of a lock, a socket...
                raise state_not_pickled(self.nodes[i]._label(), e) from e
        return states

    def tick(self, node_id: int) -> None:
        """Close a window of ``node_id``, or pass the tick on to a later stage."""
        window = self.ticked.get(node_id)
        if window is None:
            self.events.append(Tick(node_id))
        else:
            window.tick()

    def feed(self, items: Sequence[Any], starts: list[int] | None = None) -> None:
        """Push ``items`` (elements, :class:`Failure` and :class:`Tick`), in order.

        ``starts``: where each item's events begin in :attr:`events` is appended.
        """
        events = self.events
        if starts is not None:
            for x in items:
                starts.append(len(events))
                self.feed((x,))
            return
        push = self.root._pusher()  # taken now: restore() recompiles
        for x in items:
            kind = type(x)
            if kind is Failure:
                events.append(x)
            elif kind is Tick:
                self.tick(x.node_id)
            else:
                push(x)

    def close(self) -> None:
        """End of stream: flush what the stage's nodes hold (the stage cannot run again)."""
        self.root.close()

    def take(self) -> list[Any]:
        """The events recorded so far (and start anew)."""
        out = list(self.events)
        self.events.clear()
        self.failed.clear()
        return out

    def run(self, items: Sequence[Any], states: dict[int, Any] | None = None,
            close: bool = False, starts: list[int] | None = None) -> StageResult:
        """Restore ``states``, run ``items`` (and close), and return what happened
        (``starts``: see :meth:`feed`)."""
        started = time.perf_counter()
        try:
            self.restore(states)
            self.feed(items, starts)
            if close:
                self.close()
            out = list(self.events)
            new_states = self.snapshot()
        finally:
            self.events.clear()
            self.failed.clear()
        return StageResult(out, new_states, time.perf_counter() - started)


# Rebuilt stages, per plan token, shared by the tasks of a worker process; a
# free list per token because a worker may run several tasks at once.
# Workers outlive pipelines: only the most recently used plans are kept.
_built: OrderedDict[str, list[Stage]] = OrderedDict()
_plans: OrderedDict[bytes, StagePlan] = OrderedDict()
_lock = threading.Lock()

#: Plans (and their rebuilt stages) a worker process keeps.
MAX_PLANS = 32


def checkout(plan_bytes: bytes) -> Stage:
    """A rebuilt stage for the pickled plan: a cached one if free, else a new one.

    Give it back with :func:`release` once it ran, unless it was closed.
    """
    import cloudpickle

    with _lock:
        plan = _plans.get(plan_bytes)
        if plan is None:
            plan = cloudpickle.loads(plan_bytes)
            _plans[plan_bytes] = plan
            while len(_plans) > MAX_PLANS:
                _, old = _plans.popitem(last=False)
                _built.pop(old.token, None)
        _plans.move_to_end(plan_bytes)
        free = _built.setdefault(plan.token, [])
        _built.move_to_end(plan.token)
        if free:
            return free.pop()
    return Stage(plan)


def release(stage: Stage) -> None:
    """Give a stage back for the next task of its plan."""
    with _lock:
        free = _built.get(stage.plan.token)
        if free is not None:
            free.append(stage)
