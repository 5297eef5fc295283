"""The protocol through which backends capture part of a graph.

A segment is a part of the graph that runs on another engine (Dask,
Spark). The core knows segments only through :class:`Segment`: a node
created downstream of a segment node is offered to :meth:`Segment.admit`,
which refuses operators the engine cannot run by raising; ``gather()`` ends
the segment through :meth:`Segment.add_exit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["NO_DEFAULT", "JoinedHere", "Segment", "SegmentEntry", "admit_connection",
           "join_here", "raise_first", "raised_after", "segment_of", "unsendable"]


class _NoDefault:
    """Marker for an absent argument (``None`` is a legitimate value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_DEFAULT"

    def __reduce__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


class Segment:
    """A part of the graph that runs on another engine (see the module doc)."""

    backend: ClassVar[str] = "local"
    #: Whether the engine runs it: its plan was made (at its first element).
    started: bool = False

    def admit(self, node: Stream[Any]) -> None:
        """Accept ``node`` into the segment or raise a build-time error."""

    def check_destroy(self, node: Stream[Any]) -> None:
        """Raise if ``node`` (in the segment, or its ``gather()``) cannot be destroyed now.

        A running segment's plan holds its nodes as they were when it
        started: on the engine a destroyed node would go on running.
        """
        if self.started:
            raise RuntimeError(
                f"destroy(): {node._label()} is in a {self.backend.capitalize()} segment that "
                "is already running, whose plan holds it as it was at the first element; "
                "close() the source and build the graph again without it")

    def add_exit(self, gather: Stream[Any]) -> None:
        """Register a ``gather()`` node that brings results back."""

    def merge(self, others: list[Segment], node: Stream[Any]) -> Segment | None:
        """One segment made of this one and ``others``, joined by ``node``.

        None (the default): segments cannot be joined, ``node`` is refused.
        """
        return None


def segment_of(node: Stream[Any]) -> Segment | None:
    """The segment a new ``node`` belongs to: its upstreams', admitted now (or refused).

    Inputs of several segments (a union of two Spark sources) join into one
    if their engine can run them as one.
    """
    segments = {id(u._segment): u._segment for u in node.upstreams if u._segment}
    if not segments or node._ends_segment:
        return None
    first, *others = segments.values()
    segment = first.merge(others, node) if others else first
    if segment is None:
        raise ValueError(
            f"{node._label()}: its upstreams run on different engines; "
            "gather() each of them before combining"
        )
    segment.admit(node)
    return segment


def admit_connection(node: Stream[Any], downstream: Stream[Any]) -> None:
    """For ``node.connect(downstream)``: ``downstream`` joins ``node``'s segment, or is refused."""
    segment = node._segment
    if downstream._segment is not None and downstream._segment is not segment:
        raise ValueError(
            f"connect(): {downstream._label()} runs on {downstream._segment.backend}; "
            "connect to the node that starts that segment (scatter(), to_spark())"
        )
    if segment is not None and not downstream._ends_segment:
        segment.admit(downstream)  # as for a node built downstream: refuse now
        downstream._segment = segment


class JoinedHere(Segment):
    """A node combining the results of several segments, in this process.

    streamz's ``scatter(a).zip(scatter(b))``: each input segment ends at a
    ``gather()`` made for it (:func:`join_here`), and the node runs here.
    It may be followed only by ``gather()``, which then passes its results
    on: any other step would run in this process, where the user asked for
    the engine, so it is refused with the way to say so.
    """

    def __init__(self, node: Stream[Any]) -> None:
        self.node = node

    def admit(self, node: Stream[Any]) -> None:
        if node is self.node:
            return
        op = self.node._operator
        raise ValueError(
            f"{node._label()}: follows {self.node._label()}, which combines the results "
            f"of several segments in this process; call gather() after {op}(), and "
            f"scatter() again to run {node._operator}() on the engine"
        )


def join_here(node: Stream[Any]) -> Segment:
    """End each segment among ``node``'s inputs at a ``gather()``; ``node`` runs here.

    For a backend's :meth:`Segment.merge` when its segments cannot become
    one: ``scatter(a).zip(scatter(b)).gather()`` gives what
    ``a.scatter().gather().zip(b.scatter().gather())`` gives, as streamz's
    does. The gathers are real nodes of the graph (a picture shows them).
    """
    from .operators.gather import Gather

    node.upstreams = [u if u._segment is None else Gather(u) for u in node.upstreams]
    return JoinedHere(node)


class SegmentEntry:
    """Checkpoints of a segment, for the node that starts it (``scatter()``, ``to_spark()``).

    The state a segment's stateful steps carry from batch to batch lives
    with the engine's runner, not in the local copies of those steps (which
    never run). It is the entry node's state, :attr:`segment_states`: saved
    in checkpoints, and restored before the first element. A subclass says
    where the runner keeps it (:meth:`_running_states`) and passes
    ``_restored`` to its runner when it starts.
    """

    __slots__ = ()
    _state: ClassVar[tuple[str, ...]] = ("segment_states",)

    if TYPE_CHECKING:
        _restored: dict[int, Any] | None
        _runner: Any

        def _label(self) -> str: ...

    def _running_states(self) -> dict[int, Any] | None:
        """The runner's states, keyed by a position stable from run to run (None: not run)."""
        raise NotImplementedError

    @property
    def segment_states(self) -> dict[int, Any] | None:
        """The state the segment's stateful steps carry from batch to batch (None: none yet)."""
        states = self._running_states()
        return self._restored if states is None else states

    @segment_states.setter
    def segment_states(self, states: dict[int, Any] | None) -> None:
        if self._runner is not None:
            raise RuntimeError(f"{self._label()}: cannot restore a running segment's state; "
                               "restore before the first element")
        # (A slot of the subclass: a mixin's own slot would clash with Stream's.)
        self._restored = states  # type: ignore[misc]


def raise_first(errors: list[BaseException], engine: str) -> None:
    """Raise the first error met while a segment delivered its results; mention the others.

    Examples
    --------
    >>> try:
    ...     raise_first([ValueError("a"), ValueError("b")], "Spark")
    ... except ValueError as e:
    ...     print(e, "|", *e.__notes__)
    a | 1 more error(s) were raised while the Spark segment delivered its results; every
    other result was delivered
    """
    if not errors:
        return
    first = errors[0]
    if len(errors) > 1:
        first.add_note(f"{len(errors) - 1} more error(s) were raised while the {engine} "
                       "segment delivered its results; every other result was delivered")
    raise first


def raised_after(pending: Any, errors: list[BaseException], engine: str) -> Any:
    """``pending`` (a segment's closing work), then :func:`raise_first` of ``errors``.

    With errors and work pending, an awaitable doing both: that work, left
    unawaited, would never run (a coroutine sink after ``gather()``).
    """
    if not errors or pending is None:
        raise_first(errors, engine)
        return pending
    return _raised_after(pending, errors, engine)


async def _raised_after(pending: Any, errors: list[BaseException], engine: str) -> None:
    try:
        await pending
    except Exception as e:
        errors.append(e)
    raise_first(errors, engine)


def unsendable(label: str, engine: str, batch: Sequence[Any],
               error: Exception) -> Exception:
    """The error to raise when a batch for ``engine`` could not be pickled.

    The engine's own message names its internals (Dask: "Could not serialize
    object of type LLGExpr"; Spark: a bare ``cannot pickle``). This one
    names ``label``, the node sending the batch, and the first element that
    does not pickle, and says the batch was not sent. ``error`` is returned
    unchanged when every element pickles (the cause is elsewhere).

    Examples
    --------
    >>> import threading
    >>> err = unsendable("scatter()", "Dask workers", [1, threading.Lock()], TypeError())
    >>> print(err)
    scatter(): element <unlocked _thread.lock object at ...> cannot be pickled to send to
    Dask workers (TypeError: cannot pickle '_thread.lock' object), so the 2 element(s) of
    its batch were not sent; ...
    """
    try:  # what the engines pickle with (functions by value)
        import cloudpickle as pickler  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - every engine installs it
        import pickle as pickler

    from .errors import short_repr

    for x in batch:
        try:
            pickler.dumps(x)
        except Exception as e:
            new = TypeError(
                f"{label}: element {short_repr(x)} cannot be pickled to send to {engine} "
                f"({type(e).__name__}: {e}), so the {len(batch)} element(s) of its batch "
                f"were not sent; convert it in-process before {label} (a map() returning "
                "plain data), or keep it out of the stream")
            new.__cause__ = e
            return new
    return error
