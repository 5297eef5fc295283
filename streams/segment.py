"""The protocol through which backends capture part of a graph.

A segment is a part of the graph that runs on another engine (Dask,
Spark). The core knows segments only through :class:`Segment`: a node
created downstream of a segment node is offered to :meth:`Segment.admit`,
which refuses operators the engine cannot run by raising; ``gather()`` ends
the segment through :meth:`Segment.add_exit`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["NO_DEFAULT", "Segment"]


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

    def admit(self, node: Stream[Any]) -> None:
        """Accept ``node`` into the segment or raise a build-time error."""

    def add_exit(self, gather: Stream[Any]) -> None:
        """Register a ``gather()`` node that brings results back."""
