"""``Stream.from_iterable``: a source over any iterable."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from .. import fusion
from ..clock import run_sync
from ..core import Stream
from ..fused_loop import drive, skip
from .base import YIELD_EVERY, Source

__all__ = ["FromIterable"]

T = TypeVar("T")

#: What ``next()`` gives for an iterator that ran out (no item is this object).
_END = object()


@Stream.register_api(staticmethod)
class FromIterable(Source[T]):
    """Emit every item of an iterable, then close the stream.

    Started again after ``stop()`` or a failure, it resumes at ``offset``
    (the items whose work is done): over a list or a range it passes over
    them; an iterator goes on where it stands, sending first the item it
    had taken and not sent, or whose work failed. (streamz's begins a list
    again from its first item.)

    Parameters
    ----------
    iterable : iterable
    start : bool
        Start right away (default: call ``start()``).

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream.from_iterable(range(5))
    >>> L = source.partition(2).sink_to_list()
    >>> source.start()
    >>> L
    [(0, 1), (2, 3), (4,)]
    """

    # _skip: items to pass over after a restore (resume at offset).
    __slots__ = ("_skip", "iterable", "offset")
    _operator = "from_iterable"
    _replayable = True
    _params = ("iterable",)
    _state = ("offset",)

    def __init__(self, iterable: Iterable[T], start: bool = False, **kwargs: Any) -> None:
        if not isinstance(iterable, Iterable):
            raise TypeError(f"from_iterable() takes an iterable, got {type(iterable).__name__}")
        self.iterable = iterable
        #: How many items went through, their work done (the position to resume from).
        self.offset = 0
        self._skip = 0
        super().__init__(start=start, **kwargs)

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._skip = self.offset  # a restored source resumes where it was

    def _checkpoint_refusal(self) -> str | None:
        """Why a Checkpointer cannot resume this source (None: it can)."""
        if isinstance(self.iterable, (set, frozenset)):
            # Resumed by offset, in an order that differs between processes
            # (string hashing): it would skip other items than it sent.
            return (f"{self._label()}: a set has no order kept from one process to the "
                    "next, so a checkpoint's offset into it would skip other items than "
                    "were sent; give a sequence (sorted(items), or a list)")
        return None

    def _items(self) -> Iterator[Any]:
        it = iter(self.iterable)
        # Resumed at ``offset``: after a restore, or started again (after
        # stop() or a failure) over an iterable that begins anew at each
        # iter() (a list, a range). An iterator goes on where it stands.
        passed = self._skip or (self.offset if it is not self.iterable else 0)
        unsent, self._skip, self._unsent = self._unsent, 0, None
        if passed:
            return skip(it, passed)
        if unsent is None or it is not self.iterable:  # a list is read again from offset
            return it
        # The item a stopped or failed run had taken from the iterator, first.
        return itertools.chain(unsent, it)

    def _count(self, n: int) -> None:
        self.offset += n

    def _run_sync(self) -> None:
        __tracebackhide__ = True  # pytest, IPython: show the user's frames
        ckpt = self._checkpointer
        if ckpt is None and fusion.enabled:
            # The loop below, compiled with the graph's steps written into it
            # (streams.fused_loop): the same order, offsets and stops.
            if drive(self, self._items(), self._count):
                self._end_sync()
            return
        n = 0
        try:
            for x in self._items():
                if self.stopped:
                    self._unsent = (x,)
                    break
                # self._push each time, not a local: the graph may change, or
                # close, while the source runs (a sink may connect a node).
                try:
                    pending = self._push(x)
                    if pending is not None:
                        self.offset += n
                        n = 0
                        run_sync(pending)
                except BaseException:
                    self._unsent = (x,)  # not gone through: a new start() sends it
                    raise
                n += 1
                if ckpt is not None:
                    # The element is done: a checkpoint here is consistent.
                    self.offset += n
                    n = 0
                    pending = ckpt.step()
                    if pending is not None:
                        run_sync(pending)
            else:
                self.offset += n
                n = 0
                self._end_sync()
                return
        finally:
            self.offset += n  # the items done count, also after a failure

    async def _run_async(self) -> None:
        since_yield = 0
        ckpt = self._checkpointer
        items = self._items()
        # Stopped is tested before an item is taken: a run that a later start()
        # replaced (streams.sources.base) must leave the items to that one.
        while True:
            if self.stopped:
                return
            x = next(items, _END)
            if x is _END:
                break
            if ckpt is not None:
                ckpt.begin()
            try:
                pending = self._push(x)
                if pending is not None:
                    await pending
            except BaseException:
                self._unsent = (x,)  # not gone through: a new start() sends it
                raise
            self.offset += 1
            if pending is not None:
                since_yield = 0
            else:
                since_yield += 1
                if since_yield >= YIELD_EVERY:
                    await asyncio.sleep(0)  # let the loop breathe; not a timing device
                    since_yield = 0
            if ckpt is not None and (pending := ckpt.step()) is not None:
                await pending
        await self._end_async()
