"""Lowering: from the nodes of a Spark segment to a plan of Spark stages.

The segment is read only through ``NodeSpec`` (``node.describe()``), never
through operator classes. A plan is a list of stages, each one Spark
operation:

* :class:`ChainStage` — a maximal run of steps fused into one ``mapInArrow``
  pass (see :mod:`streams_spark.chain`);
* :class:`KeyedStage` — ``scan(func, key=...)`` on Spark-managed keyed state
  (``applyInPandasWithState``), emitting ``(key, state)``;
* :class:`WindowStage` — ``timed_window(interval, time=...)``: Spark's
  ``window()`` under a watermark.

A processing-time ``timed_window`` is a sequential step of a chain: the
driver owns the clock and sends a tick with the micro-batch where each
window closes (batch mode only).

Without keyed or event-time stages the plan runs as one Spark batch job per
micro-batch (``mode == "batch"``), its sequential steps (``accumulate``,
``partition``...) in one partition with their state carried by the driver.
Otherwise it runs as one Structured Streaming query (``mode == "stream"``)
whose state lives in Spark's state store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from streams.graph import NodeSpec

from .chain import SEQUENTIAL, STATELESS, Step

__all__ = [
    "REFUSED",
    "ChainStage",
    "KeyedStage",
    "Plan",
    "WindowStage",
    "check_pickles",
    "lower",
    "refusal",
]

#: Operators that can never run inside a Spark segment, and what to do.
REFUSED: Mapping[str, str] = {
    "map_async": "coroutines run on the driver's event loop",
    "delay": "time-based delivery is done in-process",
    "rate_limit": "time-based delivery is done in-process",
    "buffer": "it exists for in-process backpressure",
    "latest": "it depends on when downstream reads",
    "combine_latest": "its output depends on arrival times",
    "zip_latest": "its output depends on arrival times",
    "zip": "a Spark segment is one linear chain of steps",
    "union": "a Spark segment is one linear chain of steps",
    "collect": "it is driven by an in-process emit() call",
    "to_spark": "the stream already runs on Spark",
    "scatter": "Dask and Spark segments cannot be nested",
    "partition_unique": "the Spark backend does not lower it",
    "slice": "the Spark backend does not lower it",
}


@dataclass
class ChainStage:
    """Steps fused into one ``mapInArrow`` pass."""

    steps: list[Step] = field(default_factory=list)

    @property
    def sequential(self) -> bool:
        """Whether a step keeps state in element order (one partition)."""
        return any(s.operator in SEQUENTIAL for s in self.steps)


@dataclass
class KeyedStage:
    """A keyed scan on Spark-managed state."""

    step: Step


@dataclass
class WindowStage:
    """An event-time window under a watermark."""

    step: Step


Stage = ChainStage | KeyedStage | WindowStage


@dataclass
class Plan:
    """The stages of one segment and how they run."""

    stages: list[Stage]
    labels: dict[int, str]

    @property
    def mode(self) -> str:
        """``"batch"`` (one job per micro-batch) or ``"stream"`` (one query)."""
        if all(isinstance(s, ChainStage) for s in self.stages):
            return "batch"
        return "stream"

    @property
    def steps(self) -> list[Step]:
        """Every step, upstream first."""
        out: list[Step] = []
        for s in self.stages:
            out.extend(s.steps if isinstance(s, ChainStage) else [s.step])
        return out


def refusal(spec: NodeSpec) -> str | None:
    """Why ``spec`` cannot run in a Spark segment, or None if it can.

    Examples
    --------
    >>> from streams import Stream
    >>> refusal(Stream().map(abs).describe()) is None
    True
    >>> print(refusal(Stream().partition(2, timeout=1.0).describe())[:58])
    partition(timeout=...) cannot run in a Spark segment (the
    """
    op = spec.operator
    p = spec.params
    if op in STATELESS or op in ("frequencies", "sliding_window"):
        return None
    if op == "accumulate":
        return None
    if op == "unique":
        return None
    if op == "partition":
        if p.get("timeout") is not None:
            return (f"{op}(timeout=...) cannot run in a Spark segment (the timeout is "
                    f"in-process wall-clock time): call gather() before {op}(), or drop "
                    "the timeout")
        return None
    if op == "timed_window":
        return None
    reason = REFUSED.get(op, "the Spark backend does not lower it")
    return (f"{op}() cannot run in a Spark segment ({reason}): call gather() before "
            f"{op}() to run it in-process")


def check_pickles(spec: NodeSpec) -> None:
    """Raise TypeError now if the node's function cannot be sent to Spark."""
    values = {"function": spec.func}
    values.update({k: v for k, v in spec.params.items() if callable(v)})
    for what, value in values.items():
        if value is None:
            continue
        try:
            cloudpickle.dumps(value)
        except Exception as e:
            raise TypeError(
                f"{spec.name}: its {what} {value!r:.60} cannot be pickled to send to "
                f"Spark executors ({type(e).__name__}: {e}); use a module-level "
                f"function, or call gather() before {spec.operator}() to run it "
                "in-process"
            ) from e


def step_of(spec: NodeSpec) -> Step:
    """The worker-side step for ``spec``."""
    params: dict[str, Any] = dict(spec.params)
    return Step(spec.id, spec.operator, spec.func, params, spec.name)


def lower(specs: list[NodeSpec]) -> Plan:
    """Cut the segment's nodes, upstream first, into stages.

    Examples
    --------
    >>> from streams import Stream
    >>> s = Stream()
    >>> a = s.map(abs)
    >>> b = a.filter(None)
    >>> c = b.scan(max)
    >>> plan = lower([a.describe(), b.describe(), c.describe()])
    >>> [type(st).__name__ for st in plan.stages], plan.mode
    (['ChainStage'], 'batch')
    """
    stages: list[Stage] = []
    labels = {s.id: s.name for s in specs}

    def chain() -> ChainStage:
        if not stages or not isinstance(stages[-1], ChainStage):
            stages.append(ChainStage())
        last = stages[-1]
        assert isinstance(last, ChainStage)
        return last

    for spec in specs:
        step = step_of(spec)
        if spec.operator == "accumulate" and spec.params.get("key") is not None:
            stages.append(KeyedStage(step))
        elif spec.operator == "timed_window" and spec.params.get("time") is not None:
            stages.append(WindowStage(step))
        else:
            chain().steps.append(step)
    return Plan(stages, labels)
