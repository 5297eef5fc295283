"""Pipes, FIFOs and terminals read on the loop: without blocking it, in a wait ``stop()`` ends.

A regular file's read returns at once; a pipe's waits for its writer, which
on a loop would hold up everything else the loop runs. :class:`PipeReader`
reads one through the loop's own pipe transport, and a source stopped while
it waits for the writer ends its run at once instead of at the next line.
"""

from __future__ import annotations

import asyncio
import os
import stat
from typing import Any

__all__ = ["PipeReader", "pollable"]


def pollable(f: Any) -> bool:
    """Whether the loop can wait for ``f`` to be readable (pipe, socket, terminal)."""
    try:
        mode = os.fstat(f.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


class PipeReader:
    """A pipe's bytes on the running loop, each read a wait :meth:`wake` can end.

    ``wake()`` (from ``stop()``, on any thread) cancels the run's task
    only while it waits here, where nothing has been taken from the
    reader's buffer: what the writer sent stays for the next read. The
    read then returns None, and the task is not left cancelled.

    Examples
    --------
    >>> import asyncio, os
    >>> async def first_line():
    ...     r, w = os.pipe()
    ...     os.write(w, b"a\\nb")
    ...     pipe = await PipeReader.connect(os.fdopen(r, "rb"))
    ...     return await pipe.readline()
    >>> asyncio.run(first_line())
    b'a\\n'
    """

    __slots__ = ("_reader", "_task", "_transport", "_woken", "loop")

    def __init__(self, reader: asyncio.StreamReader, transport: Any,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._reader = reader
        self._transport = transport
        self.loop = loop
        self._task: asyncio.Task[Any] | None = None  # the task waiting, while it does
        self._woken = False

    @classmethod
    async def connect(cls, f: Any, limit: int = 2**24) -> PipeReader:
        """Read ``f`` (a pipe, FIFO or terminal) through the running loop."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=limit)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), f)
        return cls(reader, transport, loop)

    async def readline(self) -> bytes | None:
        """The next line (``b""`` at the end of the pipe), or None if woken."""
        return await self._wait(self._reader.readline())

    async def readuntil(self, separator: bytes) -> bytes | None:
        """The next line ending in ``separator`` (the last one maybe without), or None if woken.

        ``b""`` at the end of the pipe.
        """
        return await self._wait(self._until(separator))

    async def _until(self, separator: bytes) -> bytes:
        try:
            return await self._reader.readuntil(separator)
        except asyncio.IncompleteReadError as end:  # the writer closed it mid-line
            return end.partial

    async def _wait(self, read: Any) -> bytes | None:
        task = asyncio.current_task()
        self._task, self._woken = task, False
        try:
            return await read  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            if not self._woken or task is None:
                raise
            task.uncancel()
            return None
        finally:
            self._task = None

    def wake(self) -> None:
        """End a wait in progress (:meth:`readline` returns None); from any thread."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._wake()
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._task is not None and not self._task.done():
            self._woken = True
            self._task.cancel()

    def close(self) -> None:
        """Close the transport (and with it the file it reads)."""
        self._transport.close()
