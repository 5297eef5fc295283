"""The references of elements in flight on Dask, held until their results are replayed."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from streams.metadata import release_refs, retain_refs

__all__ = ["HeldRefs"]


class HeldRefs:
    """Metadata references (streamz's ``RefCounter``) of the elements in flight.

    streamz holds an element's references while its futures are in flight;
    here they are held from the element's arrival at ``scatter()`` until its
    results have been replayed. Positions count the items (elements and
    ticks) sent to the cluster (:attr:`sent`) and taken back from it
    (:attr:`taken`): an element's results are replayed once ``taken``
    passes its position.

    Examples
    --------
    >>> from streams import RefCounter
    >>> ref = RefCounter()
    >>> refs = HeldRefs()
    >>> refs.hold([{"ref": ref}], position=0)
    >>> ref.count
    1
    >>> refs.sent = refs.taken = 1  # the element went, and its results came back
    >>> refs.release()
    >>> ref.count
    0
    """

    __slots__ = ("_held", "sent", "taken")

    def __init__(self) -> None:
        self._held: deque[tuple[int, Any]] = deque()
        self.sent = 0
        self.taken = 0

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, metadata: Any, position: int) -> None:
        """Retain ``metadata``'s references for the item at ``position``."""
        retain_refs(metadata)
        self._held.append((position, metadata))

    def adopt(self, held: Iterable[tuple[int, Any]]) -> None:
        """Take ``(position, metadata)`` pairs whose references are retained already."""
        self._held.extend(held)

    def release(self, everything: bool = False) -> None:
        """Release the references of the items taken back (or of every item)."""
        held = self._held
        while held and (everything or held[0][0] < self.taken):
            release_refs(held.popleft()[1])
