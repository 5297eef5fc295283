"""The frozen description of a node, and the way back from it to a node.

Every node describes itself as a :class:`NodeSpec`: its operator, function,
parameters, neighbours, and the :class:`Traits` a backend needs to place it
(does it hold state, must it run in this process and why, does it close
windows on the local clock, is its state kept per key, does it window by
event time). Backends read specs, never operator classes, and rebuild the
core's own nodes from them with :func:`build`, so each operator's semantics
live in one class. :func:`operator_class` finds that class by the spec's
``operator`` name: ``Stream.register_api`` fills the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["EventTime", "JoinTime", "NodeSpec", "Traits", "build", "construct",
           "operator_class", "register_operator"]


@dataclass(frozen=True)
class EventTime:
    """How an event-time window cuts the stream (what an engine's ``window()`` needs).

    Attributes
    ----------
    time : callable or key
        ``time(x)`` (or ``x[time]``) is an element's timestamp in seconds.
    size : float
        The window length, in seconds; for sessions, the gap that ends one.
    lateness : float
        How far behind the largest timestamp seen an element is still counted.
    slide : float or None
        Sliding windows: the distance between window starts (None: tumbling).
    session : bool
        Session windows: ``size`` is the inactivity gap that closes a session.
    key : callable, key or None
        One set of windows per ``key(x)`` (or ``x[key]``), each emitted as
        ``(key, elements)``; the watermark is shared by all keys.
    bounds : bool
        Each window is emitted as a :class:`~streams.Window` ``(start, end,
        elements)``, its bounds to the microsecond (see
        :mod:`streams.operators.window_bounds`).

    Examples
    --------
    >>> from streams import Stream
    >>> Stream().timed_window(10, slide=5, time=0, key=1).describe().traits.event_time
    EventTime(time=0, size=10.0, lateness=0.0, slide=5.0, session=False, key=1, bounds=False)
    """

    time: Any
    size: float
    lateness: float
    slide: float | None = None
    session: bool = False
    key: Any = None
    bounds: bool = False


@dataclass(frozen=True)
class JoinTime:
    """How an interval join pairs two streams (what an engine's stream-stream join needs).

    Pairs ``(l, r)`` with ``key[0](l) == key[1](r)`` and ``|time[0](l) -
    time[1](r)| <= within``; each side's watermark is its largest event
    time seen minus ``lateness``.

    Attributes
    ----------
    key : pair of (callable or key)
        The key of a left element and of a right one.
    time : pair of (callable or key)
        The event time (seconds or a ``datetime``) of a left and of a right element.
    within : float
        The largest distance between the event times of a pair, in seconds.
    lateness : float
        How far behind the largest event time seen on a side an element may be.

    Examples
    --------
    >>> from streams import Stream
    >>> Stream().join(Stream(), key=0, within=5, time=(1, 2)).describe().traits.join
    JoinTime(key=(0, 0), time=(1, 2), within=5.0, lateness=0.0)
    """

    key: tuple[Any, Any]
    time: tuple[Any, Any]
    within: float
    lateness: float


@dataclass(frozen=True)
class Traits:
    """What a backend needs to know to place a node; declared by its operator class.

    Attributes
    ----------
    stateful : bool
        It carries state from one element to the next (``snapshot()`` /
        ``restore()``), so its elements must pass through it in order.
    local_only : str or None
        Why it must run in this process (a side effect, the local event
        loop, arrival times...), or None if an engine can run it.
    ticked : bool
        It closes windows on the local clock: an engine running it sends it
        ticks (:meth:`streams.operators.timed.TimedWindow.tick`) from here.
    key : callable, key or None
        Its state is one independent state per ``key(x)`` (or ``x[key]``):
        an engine may route elements by key and keep each key's state apart.
    event_time : EventTime or None
        It windows by event time under a watermark, as an engine's own
        ``window()`` does.
    identity_on_engine : bool
        It only shapes in-process timing (``buffer``): on an engine, where
        batches already decouple producer and consumer, it passes elements on.
    join : JoinTime or None
        It joins two streams by key within an event-time interval under a
        watermark, as an engine's stream-stream join does.
    watermark_key : callable, key or None
        Its state is one state per ``key(x)`` but for the watermark, which
        every key shares (keyed event-time windows): an engine may keep each
        key's state apart if it tells each the stream's watermark.
    interleaving : bool
        It has several upstreams, and what it emits depends on how their
        elements interleave (which of two came first), not only on each
        upstream's own order: ``combine_latest``'s latest values, a lookup's
        table, a join's watermark. An engine that delivers its inputs apart
        must deliver them in the order they were emitted, or refuse it.

    Examples
    --------
    >>> from streams import Stream
    >>> Stream().scan(max, key=0).describe().traits.key
    0
    >>> print(Stream().sink(print).describe().traits.local_only)
    its side effects belong in this process
    """

    stateful: bool = False
    local_only: str | None = None
    ticked: bool = False
    key: Any = None
    event_time: EventTime | None = None
    identity_on_engine: bool = False
    join: JoinTime | None = None
    watermark_key: Any = None
    interleaving: bool = False


def _frozen(params: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(params))


@dataclass(frozen=True)
class NodeSpec:
    """The frozen description of one node.

    Attributes
    ----------
    id : int
        Unique in this process; stable for the node's lifetime.
    operator : str
        The operator's name (``"map"``, ``"accumulate"``, ...): the key of
        its class in the registry (see :func:`operator_class`).
    func : callable or None
        The user function, if the operator takes one.
    params : mapping
        The operator's other parameters, read-only.
    upstream_ids : tuple of int
        The ids of the upstream nodes, in order.
    name : str
        The ``stream_name`` if given, else the operator and function.
    backend : str or None
        ``"dask"`` or ``"spark"`` when the node runs in such a segment.
    policy : str
        What a failure of the node's function does: ``"raise"``, ``"skip"``
        or ``"route"`` (see :meth:`streams.Stream.on_error`).
    downstream_ids : tuple of int
        The ids of the nodes it feeds, in the order elements reach them.
    errors_id : int or None
        The id of its error stream, if one was created.
    traits : Traits
        What a backend needs to know to place it.
    stream_name : str or None
        The name given by the user, if any.

    Examples
    --------
    >>> from streams import Stream
    >>> spec = Stream().partition(3).describe()
    >>> spec.operator, dict(spec.params), spec.traits.stateful
    ('partition', {'n': 3, 'key': None, 'timeout': None}, True)
    """

    id: int
    operator: str
    func: Callable[..., Any] | None
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    upstream_ids: tuple[int, ...] = ()
    name: str = ""
    backend: str | None = None
    policy: str = "raise"
    downstream_ids: tuple[int, ...] = ()
    errors_id: int | None = None
    traits: Traits = field(default_factory=Traits)
    stream_name: str | None = None

    @classmethod
    def of(cls, node: Stream[Any]) -> NodeSpec:
        """Describe ``node``."""
        from .graph import label

        segment = node._segment
        return cls(
            id=node._node_id,
            operator=node._operator,
            func=getattr(node, "func", None),
            params=_frozen({p: getattr(node, p) for p in node._params}),
            upstream_ids=tuple(u._node_id for u in node.upstreams),
            name=label(node),
            backend=segment.backend if segment is not None and segment.backend != "local" else None,
            policy=node._policy,
            downstream_ids=tuple(d._node_id for d in node.downstreams),
            errors_id=node._errors._node_id if node._errors is not None else None,
            traits=node._traits(),
            stream_name=node.stream_name,
        )

    def __reduce__(self) -> Any:
        # A mapping proxy does not pickle: the parameters travel as a dict.
        values = [getattr(self, f.name) for f in fields(self)]
        values[3] = dict(self.params)
        return _unpickle_spec, tuple(values)


def _unpickle_spec(*values: Any) -> NodeSpec:
    spec = NodeSpec(*values)
    object.__setattr__(spec, "params", _frozen(spec.params))
    return spec


#: Operator name -> the node class that defines it (filled by ``register_api``).
_registry: dict[str, type] = {}


def register_operator(klass: type) -> None:
    """Record ``klass`` as the class of its operator (``register_api`` calls it)."""
    _registry[klass._operator] = klass  # type: ignore[attr-defined]


def operator_class(name: str) -> type[Stream[Any]]:
    """The class that defines operator ``name``.

    Examples
    --------
    >>> operator_class("map").__name__, operator_class("accumulate").__name__
    ('Map', 'Accumulate')
    """
    from .core import Stream

    try:
        klass = _registry[name]
    except KeyError:
        if name == Stream._operator:
            return Stream
        raise LookupError(
            f"no operator named {name!r} is registered in this process; import the "
            "module that defines it (plugins register through Stream.register_api)"
        ) from None
    return klass


def build(spec: NodeSpec, upstreams: Sequence[Stream[Any]]) -> Stream[Any]:
    """A new node doing what ``spec`` describes, below ``upstreams``.

    The node is an instance of the operator's own class (see
    :meth:`streams.Stream._from_spec`), so it computes what the described
    node computes: this is how backends run the core's operators.

    Examples
    --------
    >>> from streams import Stream
    >>> spec = Stream().map(abs).describe()
    >>> source = Stream()
    >>> L = build(spec, [source]).sink_to_list()
    >>> source.emit(-3)
    >>> L
    [3]
    """
    return operator_class(spec.operator)._from_spec(spec, list(upstreams))


def construct(cls: type[Stream[Any]], spec: NodeSpec, upstreams: list[Stream[Any]]) -> Stream[Any]:
    """``cls._from_spec``: a node of ``cls`` built from ``spec``'s parameters.

    The parameters are passed back as the constructor's keywords, the
    function after the upstreams; ``args`` and ``kwargs`` parameters are
    spread.
    """
    params = dict(spec.params)
    args = params.pop("args", ())
    kwargs = params.pop("kwargs", {})
    lead = (spec.func,) if cls._takes_function else ()
    if spec.stream_name is not None:
        params["stream_name"] = spec.stream_name
    make: Callable[..., Stream[Any]] = cls  # each operator has its own signature
    return make(*upstreams, *lead, *args, **params, **kwargs)
