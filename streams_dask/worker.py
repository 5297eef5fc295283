"""What runs on a Dask worker: one stage of a segment over a batch of elements.

The worker never re-implements an operator: it runs the core's stage
program (:mod:`streams.stage`), which rebuilds the stage's nodes from their
frozen descriptions and pushes the batch through them, fused as in-process.
So a Dask segment computes exactly what the same nodes compute in-process.
This module holds only what is Dask's: the task functions, and the wrapper
that keeps a batch opaque to Dask.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dask.sizeof import sizeof
from distributed.protocol import pickle

from streams.errors import short_repr
from streams.stage import (
    Failure,
    StageOp,
    StagePlan,
    StageResult,
    Tick,
    checkout,
    release,
)

__all__ = [
    "Batch",
    "Drawn",
    "Failure",
    "MarkedResult",
    "Passed",
    "Sealed",
    "StageOp",
    "StagePlan",
    "StageResult",
    "Tick",
    "run_after",
    "run_marked",
    "elements_of",
    "run_prefix",
    "run_prefix_once",
    "run_stage",
    "stage_input",
    "Unsent",
    "unsealed",
    "warm",
]


class Batch:
    """The elements of one task, opaque to Dask, pickled once.

    Passed as a plain list, a batch would be walked element by element by
    Dask looking for keys and futures inside it; wrapped, it is just pickled.
    And pickled once, into bytes that are unpickled only where the elements
    are read: the scheduler (in the client's process, with a LocalCluster)
    unpickles every task it is sent and pickles it again for its worker, and
    a batch that several tasks read (the parts of a keyed round) would be
    pickled once per task.

    Examples
    --------
    >>> import pickle
    >>> batch = pickle.loads(pickle.dumps(Batch([1, "a"])))
    >>> batch.items
    [1, 'a']
    """

    __slots__ = ("_items", "_pickled")

    def __init__(self, items: list[Any] | None = None, pickled: bytes | None = None) -> None:
        self._items = items
        self._pickled = pickled

    @property
    def items(self) -> list[Any]:
        """The elements (unpickled on first use)."""
        if self._items is None:
            self._items = pickle.loads(self._pickled)
        return self._items

    def __reduce__(self) -> Any:
        if self._pickled is None:
            # As Dask pickles: by value what only the client has (``__main__``).
            self._pickled = pickle.dumps(self._items, protocol=5)
        return (Batch, (None, self._pickled))


class Sealed:
    """A task argument opaque to Dask (a stage's states), as :class:`Batch` is.

    Dask walks a plain argument for futures inside it, element by element:
    states that hold every open window's elements would be walked at each
    batch, on the client.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> Any:
        return (Sealed, (self.value,))


class Passed:
    """A stateless stage's result, for the chained stage's tasks (:func:`run_prefix`).

    Distributed pickles a result only when a task on another worker needs
    it, and a result that does not pickle then fails the transfer, which
    that task waits on for ever. Pickled here, in that transfer, such a
    result goes as an :class:`Unsent` naming the step and the output, which
    fails the taking task. A task on the same worker takes the result as it
    is, as it would without this wrapper: nothing is pickled that was not.
    One exception: a worker short of memory spills results to disk by
    pickling them, and such a result, which it kept in memory before, is
    spilled as its :class:`Unsent`.
    """

    __slots__ = ("_plan", "value")

    def __init__(self, value: StageResult, plan_bytes: bytes) -> None:
        self.value = value
        self._plan = plan_bytes

    def __reduce__(self) -> Any:
        try:
            pickled = pickle.dumps(self.value, protocol=5)
        except Exception as e:
            return (Unsent, (_not_sent_on(self._plan, self.value.events, e),))
        return (_unpickled, (pickled,))


def _unpickled(pickled: bytes) -> StageResult:
    return pickle.loads(pickled)  # type: ignore[no-any-return]


def _sizeof_passed(passed: Passed) -> int:
    return int(sizeof(passed.value))  # what Dask weighs, spills and moves: the result


sizeof.register(Passed, _sizeof_passed)


class Drawn(Passed):
    """A stateless stage's result that may differ if computed again (:func:`run_prefix_once`).

    Fetched by the client as a :class:`Batch` of the stage's output, pickled
    here and never unpickled on the client, which then hands those bytes to
    every task that takes the output: Dask has no task left to compute it
    again from (for a task that needs it after a worker died), so a step
    that draws at random, reads the clock or counts its calls gives every
    taker what it gave the first one. An output that does not pickle comes
    as an :class:`Unsent`: the takers then get its future, as a
    :class:`Passed` one's, which only a task on its worker can take (there,
    and only there, a lost worker has it computed again); elsewhere the
    taking task fails, naming the step. Dask weighs it as a :class:`Passed`.
    """

    __slots__ = ()

    def __reduce__(self) -> Any:
        try:
            pickled = pickle.dumps(self.value.events, protocol=5)
        except Exception as e:
            return (Unsent, (_not_sent_on(self._plan, self.value.events, e),))
        return (Batch, (None, pickled))


class Unsent:
    """What a stage's result that could not be pickled became: its error, for the task taking it."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def run_prefix(plan_bytes: bytes, items: Batch | list[Any]) -> Passed:
    """Run the stateless stage before a chained one in a task of its own; the Dask task.

    Its result goes to the chained stage's tasks, on this worker or others
    (see :class:`Passed`).

    >>> import cloudpickle
    >>> from streams import Stream
    >>> source = Stream()
    >>> op = StageOp(source.map(lambda x: x + 1).describe(), ())
    >>> plan = StagePlan("prefix-run", source.describe().id, (op.spec.id,), (op,), op.spec.id)
    >>> elements_of(pickle.loads(pickle.dumps(run_prefix(cloudpickle.dumps(plan), [1, 2]))))
    [2, 3]
    """
    return Passed(run_stage(plan_bytes, items), plan_bytes)


def run_prefix_once(plan_bytes: bytes, items: Batch | list[Any]) -> Drawn:
    """Run a stateless stage that may not give the same result twice; the Dask task.

    As :func:`run_prefix`, but its output is for the client to fetch (see
    :class:`Drawn`).

    >>> import cloudpickle
    >>> from streams import Stream
    >>> source = Stream()
    >>> op = StageOp(source.map(lambda x: x + 1).describe(), ())
    >>> plan = StagePlan("prefix-once", source.describe().id, (op.spec.id,), (op,), op.spec.id)
    >>> pickle.loads(pickle.dumps(run_prefix_once(cloudpickle.dumps(plan), [1, 2]))).items
    [2, 3]
    """
    return Drawn(run_stage(plan_bytes, items), plan_bytes)


def _not_sent_on(plan_bytes: bytes, events: list[Any], error: Exception) -> str:
    """The error of a stage whose output could not be pickled, naming the output."""
    plan: StagePlan = pickle.loads(plan_bytes)
    label = next((op.spec.name for op in plan.ops if op.spec.id == plan.output_id), "a step")
    for x in events:
        try:
            pickle.dumps(x, protocol=5)
        except Exception as e:
            error = e
            shown = short_repr(x)
            break
    else:
        shown = "of its batch"
    return (f"{label}: output {shown} cannot be pickled to leave its Dask worker (for the "
            "next stage on another worker, or spilled to disk under memory pressure) "
            f"({type(error).__name__}: {error}), so its batch of {len(events)} output(s) went "
            f"no further; make {label} return plain data, or keep such values out of the "
            "stream")


def _taken(items: Any) -> Any:
    """A previous stage's result as it came: a :class:`Passed` or :class:`Drawn`
    unwrapped, an :class:`Unsent` raised."""
    if isinstance(items, Passed):  # a Drawn one too
        return items.value
    if isinstance(items, Unsent):
        raise TypeError(items.error)
    return items


def elements_of(items: Any) -> list[Any]:
    """The elements a task runs over, from what it was given.

    A :class:`Batch`, a list, the previous stage's :class:`StageResult`, or
    ``{"parts": [...]}`` of those, in order (batches that waited for a
    chained stage, run as one task).
    """
    if isinstance(items, Batch):
        return items.items
    if isinstance(items, dict):
        return [x for part in items["parts"] for x in elements_of(part)]
    if isinstance(items, list):
        return items
    return list(_taken(items)[0])


def stage_input(items: Any, prefix: bytes | None = None) -> tuple[list[Any], float]:
    """The elements a chained stage runs over, and what the stage before it took.

    A batch as the client sent it (a :class:`Batch` or a list) first goes
    through ``prefix``, the stateless stage before, run here instead of in a
    task of its own; a previous stage's :class:`StageResult` is taken as it
    is. The seconds are the stateless stage's run time, wherever it ran.
    ``items`` may be ``{"parts": [...]}`` of those, in order.

    >>> import cloudpickle
    >>> from streams import Stream
    >>> source = Stream()
    >>> op = StageOp(source.filter(bool).describe(), ())
    >>> plan = StagePlan("prefix-doc", source.describe().id, (op.spec.id,), (op,), op.spec.id)
    >>> stage_input({"parts": [Batch([0, 1]), [2, 0]]}, cloudpickle.dumps(plan))[0]
    [1, 2]
    """
    if isinstance(items, dict):
        elements: list[Any] = []
        seconds = 0.0
        for part in items["parts"]:
            more, took = stage_input(part, prefix)
            elements.extend(more)
            seconds += took
        return elements, seconds
    if isinstance(items, (Batch, list)):
        batch = items.items if isinstance(items, Batch) else items
        if prefix is None:
            return batch, 0.0
        result = run_stage(prefix, batch)
        return result.events, result.seconds
    result = _taken(items)
    return list(result[0]), result[2]


def unsealed(value: Any) -> Any:
    """``value``, out of its :class:`Sealed` if it is in one."""
    return value.value if isinstance(value, Sealed) else value


def run_stage(plan_bytes: bytes, items: Batch | list[Any],
              states: dict[int, Any] | Sealed | None = None,
              close: bool = False) -> StageResult:
    """Run one stage over a batch; the Dask task function.

    Parameters
    ----------
    plan_bytes : bytes
        The cloudpickled :class:`~streams.stage.StagePlan` (pickled once on
        the client; unpickled once per worker process).
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
    >>> from streams import Stream
    >>> source = Stream()
    >>> op = StageOp(source.map(abs).describe(), (-1,))
    >>> plan = StagePlan("doc", source.describe().id, (op.spec.id,), (op,))
    >>> run_stage(cloudpickle.dumps(plan), [-1, 2])[:2]
    ([(0, 1), (0, 2)], None)
    """
    stage = checkout(plan_bytes)
    result = stage.run(elements_of(items), unsealed(states), close)
    if not close:  # a closed graph cannot run again
        release(stage)
    return result


class MarkedResult(NamedTuple):
    """A stateless stage's result, with where each element's events begin (:func:`run_marked`)."""

    events: list[Any]
    states: None
    seconds: float
    #: ``starts[i]``: where, in ``events``, the events of the batch's i-th element begin.
    starts: list[int]


def run_marked(plan_bytes: bytes, items: Batch | list[Any]) -> MarkedResult:
    """Run a stateless stage over a batch, marking where each element's events begin.

    The client sends this task, in place of :func:`run_stage`, for a batch
    in which some element came with metadata (streamz's ``RefCounter``
    references): the metadata stays on the client, which gives each
    result the metadata of the element it came from, as the stage's nodes
    do in-process. A batch without metadata costs nothing of this.

    >>> import cloudpickle
    >>> from streams import Stream
    >>> source = Stream()
    >>> op = StageOp(source.flatten().describe(), (-1,))
    >>> plan = StagePlan("marked-doc", source.describe().id, (op.spec.id,), (op,))
    >>> result = run_marked(cloudpickle.dumps(plan), [[1, 2], [], [3]])
    >>> result.events, result.starts
    ([(0, 1), (0, 2), (0, 3)], [0, 2, 2])
    """
    stage = checkout(plan_bytes)
    starts: list[int] = []
    result = stage.run(elements_of(items), starts=starts)
    release(stage)
    return MarkedResult(result.events, None, result.seconds, starts)


def run_after(plan_bytes: bytes, previous: StageResult,
              states: dict[int, Any] | Sealed | None = None,
              close: bool = False) -> StageResult:
    """Run a stage over what the previous stage's task returned."""
    return run_stage(plan_bytes, previous[0], states, close)


def warm() -> bool:
    """A task that only imports this module (and the engine) on a worker.

    Sent to every worker when a segment starts, so that a fresh worker
    process pays for importing ``streams`` now, alongside the first task,
    rather than when its own first batch arrives.
    """
    return True
