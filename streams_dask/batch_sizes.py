"""How many elements a Dask task carries: a slow start, then about a quarter second of work.

A batch holds at most ``batch_size`` elements, and fewer when the work is
slow: workers report how long each batch took, and a batch is cut to about
:data:`TARGET_SECONDS` of work, so the last tasks of a stream do not leave
workers idle behind one long batch. Until run times are known, batches
start at :data:`FIRST_BATCH` elements and grow at most :data:`GROWTH` times
the largest measured one: a slow function is never sent as a first batch
of ``batch_size``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FIRST_BATCH", "GROWTH", "TARGET_SECONDS", "BatchSizes"]

#: About how long one task should work: long against Dask's per-task cost
#: (around a millisecond), short against a stream's tail.
TARGET_SECONDS = 0.25

#: Most elements in a task before any run time is known.
FIRST_BATCH = 16

#: A batch holds at most this many times the largest batch measured so far.
GROWTH = 4


class BatchSizes:
    """The size of the next batch (:attr:`cap`), learnt from measured batches.

    Parameters
    ----------
    batch_size : int
        Most elements per task.
    element_bound : int, optional
        Most elements held at once (``buffer(n)``): no batch is larger.

    Examples
    --------
    >>> sizes = BatchSizes(batch_size=1000)
    >>> sizes.cap
    16
    >>> sizes.measure(seconds=0.016, size=16)  # 1 ms an element
    >>> sizes.cap  # four times the largest batch measured, under 0.25 s of work
    64
    """

    __slots__ = ("batch_size", "cap", "element_bound", "largest", "per_element",
                 "work_seconds")

    def __init__(self, batch_size: int, element_bound: int | None = None) -> None:
        self.batch_size = batch_size
        self.element_bound = element_bound
        #: Seconds of work per element, as workers measured it (None: unknown).
        self.per_element: float | None = None
        #: Seconds of work summed over the batches measured.
        self.work_seconds = 0.0
        #: The most elements of a batch measured so far.
        self.largest = 0
        #: The most elements the next batch may hold.
        self.cap = min(batch_size, FIRST_BATCH, element_bound or batch_size)

    def measure(self, seconds: float, size: int) -> None:
        """Learn the cost of an element from a batch of ``size`` elements that took ``seconds``."""
        self.work_seconds += seconds
        if size <= 0:
            return
        self.largest = max(self.largest, size)
        if seconds > 0:
            cost = seconds / size
            self.per_element = cost if self.per_element is None else (
                0.7 * self.per_element + 0.3 * cost)
        by_time = (self.batch_size if self.per_element is None
                   else int(TARGET_SECONDS / self.per_element))
        self.cap = max(1, min(self.batch_size, GROWTH * self.largest, by_time,
                              self.element_bound or self.batch_size))

    def last(self, pending: list[Any], tasks: int) -> list[list[Any]]:
        """``pending``, the stream's last elements, cut in batches (one, empty, if none).

        Smaller than :attr:`cap`, spread over ``tasks`` tasks: the workers
        finish together, not one of them alone on a long last batch.

        >>> BatchSizes(100).last(list(range(5)), 2), BatchSizes(100).last([], 2)
        ([[0, 1, 2], [3, 4]], [[]])
        """
        size = max(1, min(self.cap, -(-len(pending) // tasks)))
        return [pending[i:i + size] for i in range(0, len(pending), size)] or [[]]
