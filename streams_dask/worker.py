"""What runs on a Dask worker: one stage of a segment over a batch of elements.

The worker never re-implements an operator. It rebuilds the stage as an
ordinary in-process ``streams`` graph from the segment's frozen
:class:`~streams.graph.NodeSpec` descriptions (calling the registered method
named by each spec's ``operator``), pushes the batch through it, and records
what reaches each exit. So a Dask segment computes exactly what the same
nodes compute in-process, fused code included.

Three kinds of item travel in a batch besides plain elements:

* :class:`Failure` - a user function raised; the node's error policy is
  applied on the client, in order, when the batch's events are replayed;
* :class:`Tick` - a time-based window closes here (the client owns time);
* exit events ``(exit_index, value)`` - an element reaching ``gather()``.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import cloudpickle  # type: ignore[import-untyped]

from streams import Stream
from streams.errors import short_repr

__all__ = [
    "Batch",
    "Failure",
    "StageOp",
    "StagePlan",
    "StageResult",
    "Tick",
    "build_node",
    "run_after",
    "run_stage",
]

#: Operators whose first argument is the user function.
FUNCTION_OPERATORS = frozenset({"map", "starmap", "filter", "remove", "accumulate"})


@dataclass(frozen=True)
class Failure:
    """A user function raised on a worker.

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
    """The client's clock says the time window of node ``node_id`` closes."""

    node_id: int


class Batch:
    """The elements of one task, opaque to Dask.

    Passed as a plain list, a batch would be walked element by element by
    Dask looking for keys and futures inside it; wrapped, it is just pickled.
    """

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __reduce__(self) -> Any:
        return (Batch, (self.items,))


class StageResult(NamedTuple):
    """What a task returns: events in order, new states, and its run time."""

    events: list[Any]
    states: dict[int, Any] | None
    seconds: float


@dataclass(frozen=True)
class StageOp:
    """One node of a stage, as the worker rebuilds it."""

    id: int
    operator: str
    func: Callable[..., Any] | None
    params: tuple[tuple[str, Any], ...]
    upstream_ids: tuple[int, ...]
    #: Where this node's output goes, in the order the real node pushes it:
    #: node ids, and ``-1 - i`` for the i-th ``gather()`` exit of the segment.
    downstream: tuple[int, ...] = ()


@dataclass(frozen=True)
class StagePlan:
    """A connected part of a segment that one task runs over a batch.

    ``root_id`` is the node whose output the batch holds (the ``scatter()``
    node, or the last node of the previous stage) and ``root_downstream``
    where it pushes; ``ops`` are the nodes below it in topological order;
    ``output_id``, if set, is the node whose elements go on to the next stage.
    """

    token: str
    root_id: int
    root_downstream: tuple[int, ...]
    ops: tuple[StageOp, ...]
    output_id: int | None


class _Exit(Stream[Any]):
    """Appends what reaches it to the batch's event list."""

    __slots__ = ("events", "index")
    _operator = "dask_exit"

    def __init__(self, upstream: Stream[Any], events: list[Any], index: int | None) -> None:
        self.events = events
        self.index = index
        Stream.__init__(self, upstream)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        self.events.append(x if self.index is None else (self.index, x))
        return None


class _Failures(Stream[Any]):
    """Turns the routed error records of one node into :class:`Failure` events."""

    __slots__ = ("events", "node_id")
    _operator = "dask_failures"

    def __init__(self, upstream: Stream[Any], events: list[Any], node_id: int) -> None:
        self.events = events
        self.node_id = node_id
        Stream.__init__(self, upstream)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        self.events.append(Failure(self.node_id, x.element, _portable(x.exception)))
        return None


class _TickWindow(Stream[Any]):
    """``timed_window`` on a worker: holds elements until a :class:`Tick`."""

    __slots__ = ("held",)
    _operator = "dask_tick_window"
    _state = ("held",)

    def __init__(self, upstream: Stream[Any]) -> None:
        self.held: list[Any] = []
        Stream.__init__(self, upstream)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        self.held.append(x)
        return None

    def tick(self) -> None:
        out, self.held = self.held, []
        self._emit(out)

    def _flush(self) -> Any:
        # As in-process: at close the open window goes out if it holds anything.
        if self.held:
            self.tick()
        return None


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError with its repr."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {short_repr(str(exc))}")
    return exc


def build_node(op: StageOp, ups: Sequence[Stream[Any]]) -> Stream[Any]:
    """Create the in-process node described by ``op`` below ``ups``.

    The registered method named by the operator is called with the spec's
    parameters, so the node is the core's own implementation.

    Examples
    --------
    >>> from streams import Stream
    >>> src = Stream()
    >>> op = StageOp(1, "map", abs, (("args", ()), ("kwargs", {})), (0,))
    >>> L = build_node(op, [src]).sink_to_list()
    >>> src.emit(-3)
    >>> L
    [3]
    """
    params = dict(op.params)
    if op.operator == "buffer":
        # A buffer only decouples timing; on a worker the batch is the buffer.
        return Stream(ups[0])
    if op.operator == "timed_window" and params.get("time") is None:
        return _TickWindow(ups[0])
    if op.operator == "zip":
        # Literal (non-stream) arguments keep their positions among streams.
        parts: list[Any] = list(ups)
        for i, value in params.pop("literals", ()):
            parts.insert(i, value)
        return Stream.zip(*parts, **params)
    args = params.pop("args", ())
    kwargs = params.pop("kwargs", {})
    method = getattr(Stream, op.operator)
    if op.operator in FUNCTION_OPERATORS:
        node = method(ups[0], op.func, *args, **params, **kwargs)
    else:
        node = method(*ups, *args, **params, **kwargs)
    return node  # type: ignore[no-any-return]


class _Built:
    """A stage rebuilt as an in-process graph, ready to run batches."""

    def __init__(self, plan: StagePlan) -> None:
        self.plan = plan
        self.events: list[Any] = []
        self.root: Stream[Any] = Stream()
        self.nodes: dict[int, Stream[Any]] = {plan.root_id: self.root}
        self.windows: dict[int, _TickWindow] = {}
        order = {plan.root_id: plan.root_downstream}
        self._add_exits(self.root, plan.root_downstream)
        for op in plan.ops:
            node = build_node(op, [self.nodes[u] for u in op.upstream_ids])
            if not isinstance(node, _TickWindow) and op.operator != "buffer":
                node.on_error("route")
                _Failures(node.errors, self.events, op.id)
            if isinstance(node, _TickWindow):
                self.windows[op.id] = node
            self.nodes[op.id] = node
            order[op.id] = op.downstream
            self._add_exits(node, op.downstream)
        if plan.output_id is not None:
            _Exit(self.nodes[plan.output_id], self.events, None)
        self.stateful = [i for i, n in self.nodes.items() if type(n)._state]
        # A node pushes to its downstreams in order, and that order is
        # visible (union, several gathers): give each rebuilt node the
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

    def run(self, items: Sequence[Any], states: dict[int, Any] | None,
            close: bool) -> StageResult:
        started = time.perf_counter()
        if states:
            for node_id, state in states.items():
                self.nodes[node_id].restore(state)
        events = self.events
        push = self.root.emit
        try:
            for x in items:
                kind = type(x)
                if kind is Failure:
                    events.append(x)
                elif kind is Tick:
                    window = self.windows.get(x.node_id)
                    if window is None:
                        events.append(x)  # for a later stage
                    else:
                        window.tick()
                else:
                    push(x)
            if close:
                self.root.close()
            out = list(events)
            new_states = (
                {i: self.nodes[i].snapshot() for i in self.stateful}
                if self.stateful else None
            )
        finally:
            events.clear()
        return StageResult(out, new_states, time.perf_counter() - started)


# Rebuilt stages, per plan token, shared by the tasks of a worker process; a
# free list per token because a worker may run several tasks at once.
# Workers outlive pipelines: only the most recently used plans are kept.
_built: OrderedDict[str, list[_Built]] = OrderedDict()
_plans: OrderedDict[bytes, StagePlan] = OrderedDict()
_lock = threading.Lock()

#: Plans (and their rebuilt graphs) a worker process keeps.
MAX_PLANS = 32


def _checkout(plan_bytes: bytes) -> _Built:
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
    return _Built(plan)


def run_stage(plan_bytes: bytes, items: Batch | list[Any],
              states: dict[int, Any] | None = None,
              close: bool = False) -> StageResult:
    """Run one stage over a batch; the Dask task function.

    Parameters
    ----------
    plan_bytes : bytes
        The cloudpickled :class:`StagePlan` (pickled once on the client;
        unpickled once per worker process).
    items : list, or the result of the previous stage
        The batch, in input order.
    states : dict, optional
        Snapshots of the stage's stateful nodes, from the previous batch.
    close : bool
        End of stream: flush what the stage's nodes hold.

    Returns
    -------
    StageResult
        ``events``: what reached the exits, :class:`Failure` records and,
        for the first of two stages, the elements for the next one, in
        order; ``states``: the new snapshots of the stateful nodes;
        ``seconds``: how long the batch took (the client sizes batches by it).

    Examples
    --------
    >>> import cloudpickle
    >>> op = StageOp(1, "map", abs, (("args", ()), ("kwargs", {})), (0,), (-1,))
    >>> plan = StagePlan("doc", 0, (1,), (op,), None)
    >>> run_stage(cloudpickle.dumps(plan), [-1, 2])[:2]
    ([(0, 1), (0, 2)], None)
    """
    built = _checkout(plan_bytes)
    result = built.run(items.items if isinstance(items, Batch) else items, states, close)
    if not close:  # a closed graph cannot run again
        with _lock:
            free = _built.get(built.plan.token)
            if free is not None:
                free.append(built)
    return result


def run_after(plan_bytes: bytes, previous: StageResult,
              states: dict[int, Any] | None = None,
              close: bool = False) -> StageResult:
    """Run a stage over what the previous stage's task returned."""
    return run_stage(plan_bytes, previous[0], states, close)
