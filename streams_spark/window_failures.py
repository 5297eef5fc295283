"""Failures on the way to an event-time window on Spark, under ``skip`` or ``route``.

Spark's ``window()`` has no place for an error row: it drops a row without
an event time. So an element that fails on its way to a window (in a step
before it, or in the window's own ``time=`` or ``key=`` function) cannot
travel with the others (a time made up for its error row would move the
watermark or be dropped as late; a branch of the error rows apart from the
window would have Spark run the Python pass before it twice, user
functions included). Under ``on_error("raise")`` it fails the
micro-batch with that node's error (see :class:`~streams_spark.routing.NodeFailure`),
as in-process the element would stop the pipeline. Under ``"skip"`` or
``"route"`` the element is set aside here and the other elements go on to
their windows, as in-process:

* where a driver reads the query (``to_spark()``, ``from_spark(...).gather()``),
  set-aside failures reach it through an accumulator, which Spark merges on
  the driver as each task ends, before the job of the micro-batch ends; the
  driver then applies the node's policy (the ``streams`` logger's warning,
  or an :class:`~streams.ErrorRecord` on ``node.errors``), as for any other
  error row, in element order, before the windows of that micro-batch. A
  task run twice (a retry, a stage computed again) adds its failures
  twice: the driver keeps one per element position ``(seq, sub)``;
* with no driver in the path (``to_dataframe()``), a skipped failure is
  logged on the executor, as that output's other skips are (``route`` is
  refused there when the graph is built).

Examples
--------
>>> from streams import Stream
>>> from streams_spark.codec import carried_error
>>> node = Stream().map(abs).on_error("skip")
>>> aside = SetAside([node.describe()])
>>> p = carried_error(node.describe().id, -1, ValueError("bad"))
>>> aside.take(0, 0, p)  # logged on this (executor) process
True
>>> SetAside([Stream().map(abs).describe()]).take(0, 0, p)  # an unknown node: raise
False
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from typing import Any

from streams.spec import NodeSpec

from .codec import ERROR, fail_on_executor

__all__ = ["Appending", "SetAside", "failure_accumulator", "needs_accumulator", "taken"]


class Appending:
    """The accumulator parameter of set-aside failures: lists of ``(seq, sub, failure)``.

    An ``AccumulatorParam`` by its two methods (PySpark asks no more), so
    that this module imports no PySpark until a query runs.
    """

    def zero(self, value: Any) -> list[Any]:
        return []

    def addInPlace(self, a: list[Any], b: list[Any]) -> list[Any]:
        a.extend(b)
        return a


def needs_accumulator(specs: Iterable[NodeSpec]) -> bool:
    """Whether a node of a plan with a window may set a failure aside (its policy is not raise)."""
    return any(s.policy != "raise" for s in specs)


def failure_accumulator(session: Any) -> Any:
    """A new accumulator of the failures a query sets aside, for its driver (None: no SparkContext).

    Spark Connect sessions have none: there a failure fails the micro-batch.
    """
    try:
        context = session.sparkContext
    except Exception:
        return None
    return context.accumulator([], Appending())


def taken(accumulator: Any) -> list[tuple[int, bytes]]:
    """The error rows set aside since the last call, in element order, one per position.

    Read on the driver once the micro-batch's job has ended (its tasks'
    additions are merged by then), and emptied for the next.
    """
    if accumulator is None:
        return []
    got = accumulator.value
    if not got:
        return []
    accumulator.value = []
    once: dict[tuple[int, int], bytes] = {}
    for seq, sub, p in got:
        once.setdefault((seq, sub), p)
    return [(ERROR, once[at]) for at in sorted(once)]


class SetAside:
    """Where a :class:`~streams_spark.routing.Router` puts the failures bound for a window.

    Parameters
    ----------
    specs : list of NodeSpec
        The nodes of the plan: their labels and error policies.
    accumulator : Accumulator, optional
        Read by the driver (see :func:`taken`); None: no driver reads the
        query, a skipped failure is logged where it happens.
    """

    def __init__(self, specs: Iterable[NodeSpec], accumulator: Any = None) -> None:
        self.nodes = {s.id: (s.name, s.policy) for s in specs}
        self.accumulator = accumulator

    def take(self, seq: int, sub: int, p: bytes) -> bool:
        """Whether the failure ``p`` (see :func:`~streams_spark.codec.carried_error`) of the
        element at ``(seq, sub)`` is set aside; False: it must fail the micro-batch."""
        try:
            node_id = pickle.loads(p)[0]
        except Exception:  # a class this worker cannot import: the payload fails the batch
            return False
        policy = self.nodes.get(node_id, ("", "raise"))[1]
        if policy == "raise":
            return False
        if self.accumulator is not None:
            self.accumulator.add([(seq, sub, bytes(p))])
            return True
        if policy == "skip":
            fail_on_executor(p, self.nodes)  # logs it here: no driver reads this query
            return True
        return False

