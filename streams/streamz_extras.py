"""What the node offers only because streamz's node does: its names and helpers.

:class:`~streams.core.Stream` inherits these; they are here so that
``core.py`` holds the node's own machinery. A plugin written for streamz
calls them (``self._retain_refs(metadata)`` in a node that holds elements).
"""

from __future__ import annotations

from typing import Any

from .metadata import release_refs, retain_refs

__all__ = ["StreamzExtras"]


class StreamzExtras:
    """streamz's ``name``, ``str()`` and metadata-reference helpers, for :class:`Stream`."""

    __slots__ = ()
    stream_name: str | None

    def __str__(self) -> str:
        """streamz's format: ``<map: inc>``, ``<name; Stream>``, ``<partition: 2>``.

        Examples
        --------
        >>> from streams import Stream
        >>> str(Stream().partition(2)), str(Stream(stream_name="in"))
        ('<partition: 2>', '<in; Stream>')
        """
        from .graph import streamz_str

        return streamz_str(self)  # type: ignore[arg-type]

    @property
    def name(self) -> str | None:
        """streamz's name for :attr:`stream_name`."""
        return self.stream_name

    @staticmethod
    def _retain_refs(metadata: Any, n: int = 1) -> None:
        """Retain the ``RefCounter`` of each of ``metadata``'s entries ``n`` times (streamz's).

        A node that holds an element retains its references, and releases
        them (:meth:`_release_refs`) once it emitted what it made of it: a
        source commits an element only once every reference is released.

        Examples
        --------
        >>> from streams import RefCounter, Stream
        >>> ref = RefCounter()
        >>> Stream()._retain_refs([{"ref": ref}])
        >>> ref.count
        1
        """
        retain_refs(metadata, n)

    @staticmethod
    def _release_refs(metadata: Any, n: int = 1) -> None:
        """Release the ``RefCounter`` of each of ``metadata``'s entries ``n`` times (streamz's)."""
        release_refs(metadata, n)
