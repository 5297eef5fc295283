"""streamz's element metadata and reference counting (``RefCounter``).

``source.emit(x, metadata=[{"ref": counter}, ...])`` sends a list of dicts
along with ``x``; a dict's ``"ref"`` is a :class:`RefCounter` that counts
the nodes still holding the element (a window, a zip buffer...). When it
reaches zero the element is done with: streamz's Kafka checkpointing commits
offsets then. Metadata takes a path of its own (each node's ``update`` is
called, nothing is fused), so elements emitted without metadata pay nothing.

Examples
--------
>>> from streams import Stream
>>> source = Stream()
>>> _ = source.partition(2)
>>> ref = RefCounter()
>>> source.emit(1, metadata=[{"ref": ref}])
>>> ref.count  # held by partition
1
>>> source.emit(2)
>>> ref.count  # emitted downstream: released
0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .pending import failing_after, gather_branches

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["RefCounter", "emit_held", "emit_with_metadata", "release_refs", "retain_refs"]


class RefCounter:
    """Counts the references to an element; calls ``cb`` when none remain.

    Parameters
    ----------
    initial : int
        The starting count.
    cb : callable, optional
        Called (on ``loop`` if given, else right away) when the count drops to zero.
    loop : tornado.ioloop.IOLoop, optional
        Where ``cb`` is called.

    Examples
    --------
    >>> done = []
    >>> r = RefCounter(cb=lambda: done.append(True))
    >>> r.retain(2); r.release(); r.release()
    >>> str(r), done
    ('<RefCounter count=0>', [True])
    """

    __slots__ = ("cb", "count", "loop")

    def __init__(self, initial: int = 0, cb: Callable[[], Any] | None = None,
                 loop: Any = None) -> None:
        self.count = initial
        self.cb = cb
        self.loop = loop

    def retain(self, n: int = 1) -> None:
        """Add ``n`` references."""
        self.count += n

    def release(self, n: int = 1) -> None:
        """Drop ``n`` references; at zero or below, call the callback."""
        self.count -= n
        if self.count <= 0 and self.cb is not None:
            if self.loop is not None:
                self.loop.add_callback(self.cb)
            else:
                self.cb()

    def __str__(self) -> str:
        return f"<RefCounter count={self.count}>"

    __repr__ = __str__


def retain_refs(metadata: list[dict[str, Any]] | None, n: int = 1) -> None:
    """Retain every ``"ref"`` in ``metadata`` ``n`` times."""
    for m in metadata or ():
        if "ref" in m:
            m["ref"].retain(n)


def release_refs(metadata: list[dict[str, Any]] | None, n: int = 1) -> None:
    """Release every ``"ref"`` in ``metadata`` ``n`` times."""
    for m in metadata or ():
        if "ref" in m:
            m["ref"].release(n)


def emit_held(emit: Callable[..., Any], x: Any, held: list[list[dict[str, Any]]] | None) -> Any:
    """``emit(x, metadata)`` with the metadata ``held`` for ``x``'s parts, then release it.

    ``held`` is one metadata list per element gathered into ``x`` (a window,
    a tuple), their refs retained while held; they are released once
    ``emit`` returns (downstream retained its own if it keeps them).
    """
    if not held:
        return emit(x)
    flat = [m for ms in held for m in ms]
    try:
        return emit(x, flat) if flat else emit(x)
    finally:
        for ms in held:
            release_refs(ms)


def emit_with_metadata(node: Stream[Any], x: Any, metadata: list[dict[str, Any]]) -> Any:
    """``node._emit(x, metadata)``: each downstream's ``update`` gets the metadata.

    Each downstream holds a reference while its ``update`` runs (it retains
    its own if it keeps the element), as in streamz. A branch that raises
    stops the branches after it, which then hold none.
    """
    results = []
    downstreams = list(node.downstreams)
    retain_refs(metadata, len(downstreams))
    for d in downstreams:
        try:
            results.append(d.update(x, node, metadata))
        except Exception as e:  # after the work earlier branches left pending
            if later := len(downstreams) - len(results) - 1:
                release_refs(metadata, later)  # the branches it stopped never got x
            return failing_after(results, e)
        finally:
            release_refs(metadata)
    return gather_branches([r for r in results if r is not None])
