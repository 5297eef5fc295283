"""``Stream.from_iterable``: a source over any iterable."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from ..clock import run_sync
from ..core import Stream
from .base import Source

__all__ = ["FromIterable"]

#: Elements emitted between two yields to the loop when no step awaited.
_YIELD_EVERY = 1000


@Stream.register_api(staticmethod)
class FromIterable(Source):
    """Emit every item of an iterable, then close the stream.

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

    __slots__ = ("iterable", "offset")
    _operator = "from_iterable"
    _params = ("iterable",)
    _state = ("offset",)

    def __init__(self, iterable: Iterable[Any], start: bool = False, **kwargs: Any) -> None:
        if not isinstance(iterable, Iterable):
            raise TypeError(f"from_iterable() takes an iterable, got {type(iterable).__name__}")
        self.iterable = iterable
        #: How many items have been emitted (the position to resume from).
        self.offset = 0
        super().__init__(start=start, **kwargs)

    def _run_sync(self) -> None:
        push = self._push
        n = 0
        for x in self.iterable:
            if self.stopped:
                break
            pending = push(x)
            n += 1
            if pending is not None:
                self.offset += n
                n = 0
                run_sync(pending)
                push = self._push
        else:
            self.offset += n
            pending = self.close()
            if pending is not None:
                run_sync(pending)
            return
        self.offset += n

    async def _run_async(self) -> None:
        since_yield = 0
        for x in self.iterable:
            if self.stopped:
                return
            pending = self._push(x)
            self.offset += 1
            if pending is not None:
                await pending
                since_yield = 0
            else:
                since_yield += 1
                if since_yield >= _YIELD_EVERY:
                    await asyncio.sleep(0)  # let the loop breathe; not a timing device
                    since_yield = 0
        self.stopped = True
        await self.aclose()
