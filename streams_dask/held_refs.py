"""The references of elements in flight on Dask, held until their results are replayed.

And, for a stage without state, the metadata of each batch's elements,
which its results carry downstream of ``gather()`` (see :meth:`HeldRefs.mark`).
"""

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
    ticks) sent to the cluster (:attr:`sent`); each batch's are marked
    :meth:`done` when its results are taken back, and an element's
    references go at the next :meth:`release` (once its results are
    replayed). Batches may come back out of order (``ordered=False``, a
    failed batch): each releases its own elements' references, never
    those of an earlier batch still out.

    Examples
    --------
    >>> from streams import RefCounter
    >>> first, second = RefCounter(), RefCounter()
    >>> refs = HeldRefs()
    >>> refs.hold([{"ref": first}], position=0)
    >>> refs.hold([{"ref": second}], position=1)
    >>> refs.sent = 2  # each element went in a batch of its own
    >>> refs.done(range(1, 2))  # the second one's results came back first
    >>> refs.release()
    >>> first.count, second.count
    (1, 0)
    >>> refs.done(range(0, 1))
    >>> refs.release()
    >>> first.count
    0
    """

    __slots__ = ("_ahead", "_batches", "_fresh", "_held", "sent", "taken")

    def __init__(self) -> None:
        self._held: deque[tuple[int, Any]] = deque()
        self.sent = 0
        #: Every item before this position is done.
        self.taken = 0
        #: Batches done while an earlier one is not: start -> end position.
        self._ahead: dict[int, int] = {}
        #: Those of them whose references are still to release.
        self._fresh: list[tuple[int, int]] = []
        #: Marked batches in flight, by first position: each item's metadata, or None.
        self._batches: dict[int, list[Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, metadata: Any, position: int) -> None:
        """Retain ``metadata``'s references for the item at ``position``."""
        retain_refs(metadata)
        self._held.append((position, metadata))

    def adopt(self, held: Iterable[tuple[int, Any]]) -> None:
        """Take ``(position, metadata)`` pairs whose references are retained already."""
        self._held.extend(held)

    def last(self, size: int) -> range:
        """The positions of the last ``size`` items sent."""
        return range(self.sent - size, self.sent)

    def mark(self, positions: range) -> bool:
        """Keep the metadata of the items at ``positions``, a batch being sent.

        Returns whether any of them has metadata: then its results are to
        carry it (its task marks where each item's events begin, see
        :func:`~streams_dask.worker.run_marked`), and :meth:`marks` gives
        it back when they are taken. Items are held in position order: a
        batch with no metadata is told apart at its last item.

        >>> refs = HeldRefs()
        >>> refs.hold([{"offset": 7}], position=1)
        >>> refs.sent = 3  # one batch of three elements, the second with metadata
        >>> refs.mark(range(0, 3)), refs.marks(range(0, 3))
        (True, [None, [{'offset': 7}], None])
        """
        held = self._held
        start, end = positions.start, positions.stop
        if not held or held[-1][0] < start:
            return False
        found = False
        metadata: list[Any] = [None] * len(positions)
        for position, item in reversed(held):  # elements still pending come last
            if position < start:
                break
            if position < end:
                metadata[position - start] = item
                found = True
        if found:
            self._batches[start] = metadata
        return found

    def marks(self, positions: range) -> list[Any] | None:
        """The metadata :meth:`mark` kept for the batch at ``positions``
        (one per item, None where it has none), or None."""
        return self._batches.pop(positions.start, None) if self._batches else None

    def done(self, positions: range) -> None:
        """The items at ``positions`` (a batch's) are done with.

        Their results were taken back, or will never come (a failed batch).
        """
        start, end = positions.start, positions.stop
        if self._batches:
            self._batches.pop(start, None)
        if start > self.taken:
            self._ahead[start] = end
            if self._held:  # else none of its items is (they were held before being sent)
                self._fresh.append((start, end))
            return
        self.taken = max(self.taken, end)
        # Batches are cut one after the other: one done ahead starts where
        # the one before it ends.
        while self.taken in self._ahead:
            self.taken = self._ahead.pop(self.taken)

    def release(self, everything: bool = False) -> None:
        """Release the references of the items done with (or of every item)."""
        held = self._held
        if everything:
            self._batches.clear()
        while held and (everything or held[0][0] < self.taken):
            release_refs(held.popleft()[1])
        if self._fresh and held:
            fresh = self._fresh
            kept: deque[tuple[int, Any]] = deque()
            for item in held:
                if any(start <= item[0] < end for start, end in fresh):
                    release_refs(item[1])
                else:
                    kept.append(item)
            self._held = kept
        self._fresh = []
