"""Lowering: from the nodes of a Spark segment to a plan of Spark stages.

The segment is read only through ``NodeSpec`` (``node.describe()``) and the
traits each operator declares, never through operator names. A plan is a
list of stages, each one Spark operation:

* :class:`ChainStage` - a maximal run of nodes run by the core's stage
  program (:mod:`streams.stage`) inside one ``mapInArrow`` pass, fused as
  in-process;
* :class:`KeyedStage` - a node whose state is one independent state per key
  (``scan(func, key=...)``): Spark routes elements by key and keeps each
  group's state in its state store (``applyInPandasWithState``); the group
  function runs the core's node;
* :class:`WindowStage` - a window on event time: Spark's ``window()`` (tumbling
  or sliding) or ``session_window()`` under a watermark, by key.

A processing-time window (a *ticked* node) is part of a chain: the driver
owns the clock and sends a tick with the micro-batch where each window
closes (batch mode only).

Without keyed or event-time stages the plan runs as one Spark batch job per
micro-batch (``mode == "batch"``), its stateful nodes in one partition with
their state carried by the driver. Otherwise it runs as one Structured
Streaming query (``mode == "stream"``) whose state lives in Spark's state
store.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from streams.spec import NodeSpec
from streams.stage import StageOp, StagePlan

from .shipping import by_value

__all__ = [
    "ChainStage",
    "KeyedStage",
    "Plan",
    "Route",
    "WindowStage",
    "by_id",
    "by_position",
    "chain_plan",
    "check_pickles",
    "lower",
    "refusal",
    "route_of",
]


@dataclass
class ChainStage:
    """Nodes run by the stage program in one ``mapInArrow`` pass."""

    specs: list[NodeSpec] = field(default_factory=list)

    @property
    def sequential(self) -> bool:
        """Whether a node keeps state in element order (one partition)."""
        return any(s.traits.stateful and not s.traits.identity_on_engine for s in self.specs)


@dataclass
class KeyedStage:
    """A node with one independent state per key, on Spark-managed state.

    ``after`` are stateless nodes that follow it: they run in the same group
    function, on its outputs, saving a pass.
    """

    spec: NodeSpec
    after: list[NodeSpec] = field(default_factory=list)
    #: The key buckets (:data:`streams_spark.route_columns.KEY_BUCKETS` when planned).
    buckets: int = 0


@dataclass
class WindowStage:
    """An event-time window under a watermark."""

    spec: NodeSpec


Stage = ChainStage | KeyedStage | WindowStage


@dataclass(frozen=True)
class Route:
    """Where the rows for a stateful stage go: Spark's routing columns.

    ``kind`` is ``"key"`` (a group per bucket of keys, from ``key``),
    ``"window"`` (the event-time window of ``spec``) or ``"group"`` (the one
    group of a sequential chain).
    """

    kind: str
    spec: NodeSpec | None = None
    #: For ``"key"``: how many buckets the keys are hashed into.
    buckets: int = 0
    #: For ``"window"``: a keyed session window over a static DataFrame, whose
    #: elements travel packed by span (see :class:`streams_spark.routing.Router`).
    spans: bool = False
    #: For ``"window"``: the input's Spark schema, where input rows that reach
    #: the window unchanged travel in a column ``r`` of lists of it (see
    #: :mod:`streams_spark.input_rows`); None: they are pickled.
    rows: Any = None
    #: For ``"window"``: where failures under ``skip`` or ``route`` are set aside
    #: (a :class:`~streams_spark.window_failures.SetAside`); None: every failure
    #: fails the micro-batch.
    failures: Any = None


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
    def specs(self) -> list[NodeSpec]:
        """Every node, upstream first."""
        out: list[NodeSpec] = []
        for s in self.stages:
            if isinstance(s, ChainStage):
                out.extend(s.specs)
            else:
                out.append(s.spec)
                if isinstance(s, KeyedStage):
                    out.extend(s.after)
        return out


def refusal(spec: NodeSpec) -> str | None:
    """Why ``spec`` cannot run in a Spark segment, or None if it can.

    Examples
    --------
    >>> from streams import Stream
    >>> refusal(Stream().map(abs).describe()) is None
    True
    >>> print(refusal(Stream().partition(2, timeout=1.0).describe()))
    partition() cannot run in a Spark segment: partition(2) (its timeout is wall-clock time in
    this process; drop the timeout to run it on an engine); call gather() before partition() to
    run it in-process
    """
    op = spec.operator
    why = spec.traits.local_only
    if (why is None and len(spec.upstream_ids) > 1 and spec.traits.stateful
            and spec.traits.join is None):
        # A union keeps no state, and an interval join is Spark's stream-stream
        # join: the segment decides (see streams_spark.segment).
        why = ("it pairs the elements of its inputs in arrival order, which Spark does not "
               "define")
    if why is None:
        return None
    return (f"{op}() cannot run in a Spark segment: {spec.name} ({why}); call gather() "
            f"before {op}() to run it in-process")


def check_pickles(spec: NodeSpec) -> None:
    """Raise TypeError now if the node's function cannot be sent to Spark."""
    values = {"function": spec.func}
    values.update({k: v for k, v in spec.params.items() if callable(v)})
    for what, value in values.items():
        if value is None:
            continue
        by_value(value)  # a function of the user's own module travels with the job
        try:
            cloudpickle.dumps(value)
        except Exception as e:
            raise TypeError(
                f"{spec.name}: its {what} {value!r:.60} cannot be pickled to send to "
                f"Spark executors ({type(e).__name__}: {e}); use a module-level "
                f"function, or call gather() before {spec.operator}() to run it "
                "in-process"
            ) from e


def lower(specs: list[NodeSpec]) -> Plan:
    """Cut the segment's nodes, upstream first, into stages.

    Examples
    --------
    >>> from streams import Stream
    >>> s = Stream()
    >>> a = s.map(abs)
    >>> b = a.filter(None)
    >>> c = b.scan(max)
    >>> d = c.scan(max, key=0)
    >>> e = d.map(str)
    >>> plan = lower([a.describe(), b.describe(), c.describe(), d.describe(), e.describe()])
    >>> [type(st).__name__ for st in plan.stages], plan.mode
    (['ChainStage', 'KeyedStage'], 'stream')
    >>> [spec.operator for spec in plan.stages[1].after]  # in the keyed group function
    ['map']
    """
    stages: list[Stage] = []
    labels = {s.id: s.name for s in specs}
    for spec in specs:
        if spec.traits.key is not None and spec.traits.stateful:
            from . import route_columns  # which imports this module

            stages.append(KeyedStage(spec, buckets=route_columns.KEY_BUCKETS))
        elif spec.traits.event_time is not None:
            stages.append(WindowStage(spec))
        elif (stages and isinstance(stages[-1], KeyedStage) and not spec.traits.stateful
              and not spec.traits.ticked):
            stages[-1].after.append(spec)  # runs in the keyed stage's group function
        else:
            if not stages or not isinstance(stages[-1], ChainStage):
                stages.append(ChainStage())
            last = stages[-1]
            assert isinstance(last, ChainStage)
            last.specs.append(spec)
    return Plan(stages, labels)


def route_of(stage: Stage | None, static: bool = False) -> Route | None:
    """The routing that rows bound for ``stage`` need (None: none).

    ``static``: the rows come from a ``mapInArrow`` pass over a static
    DataFrame, so a keyed session window's elements may travel by span.
    """
    if isinstance(stage, KeyedStage):
        return Route("key", stage.spec, stage.buckets)
    if isinstance(stage, WindowStage):
        event_time = stage.spec.traits.event_time
        spans = (static and event_time is not None and event_time.session
                 and event_time.key is not None)
        return Route("window", stage.spec, spans=spans)
    if isinstance(stage, ChainStage) and stage.sequential:
        return Route("group")
    return None


_tokens = itertools.count()


def chain_plan(specs: list[NodeSpec]) -> StagePlan:
    """The stage program running ``specs`` (a linear chain) on each element.

    Its output, recorded as plain values, is what leaves the last node; an
    empty chain passes its input on.

    Examples
    --------
    >>> from streams import Stream
    >>> from streams.stage import Stage
    >>> s = Stream()
    >>> a = s.map(lambda x: x + 1)
    >>> b = a.filter(lambda x: x % 2)
    >>> Stage(chain_plan([a.describe(), b.describe()])).run([1, 2, 3, 4]).events
    [3, 5]
    """
    token = f"{uuid.uuid4().hex}-{next(_tokens)}"
    if not specs:
        return StagePlan(token, -1, (), (), -1)
    ops = tuple(StageOp(s, (nxt.id,)) for s, nxt in itertools.pairwise(specs))
    ops += (StageOp(specs[-1], ()),)
    return StagePlan(token, specs[0].upstream_ids[0], (specs[0].id,), ops, specs[-1].id)


def by_position(specs: list[NodeSpec], states: dict[int, Any] | None) -> dict[int, Any]:
    """States by node id -> by position in ``specs`` (stable when a graph is rebuilt)."""
    where = {s.id: i for i, s in enumerate(specs)}
    return {where[i]: state for i, state in (states or {}).items()}


def by_id(specs: list[NodeSpec], states: dict[int, Any] | None) -> dict[int, Any] | None:
    """States by position in ``specs`` -> by node id (None: none saved yet)."""
    if not states:
        return None
    return {specs[i].id: state for i, state in states.items()}
