"""One element at a time, in the order emitted: a lock for the loop running now.

A sink whose writes overlap (an asynchronous ``emit`` not awaited, a
``buffer`` upstream) takes a lock around its connection and each write: an
``asyncio.Lock`` serves its waiters first come, first served, so the
elements go in the order emitted, on one connection. One lock serves one
loop; a graph run under one ``asyncio.run()`` and then the next gets a new
one for the new loop.
"""

from __future__ import annotations

import asyncio

__all__ = ["LoopLock"]


class LoopLock:
    """The ``asyncio.Lock`` of the running loop, made for it when first asked.

    >>> lock = LoopLock()
    >>> async def main():
    ...     async with lock.get():
    ...         return lock.held()
    >>> asyncio.run(main()), lock.held()
    (True, False)
    """

    __slots__ = ("_lock", "_loop")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None

    def get(self) -> asyncio.Lock:
        """The lock of the running loop (call on it)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._loop, self._lock = loop, asyncio.Lock()
        return self._lock

    def held(self) -> bool:
        """Whether the lock of the loop running here is held (False with none running)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return self._lock is not None and self._loop is loop and self._lock.locked()
