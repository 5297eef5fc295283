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

#: Bytes the reader holds before it stops reading the pipe (its writer then
#: waits, as for a blocking reader); a longer line is read in parts.
_LIMIT = 1 << 16


def pollable(f: Any) -> bool:
    """Whether the loop can wait for ``f`` to be readable: a pipe, a socket, a terminal.

    Other character devices (``/dev/null``) are read as files: epoll refuses them.
    """
    try:
        fd = f.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd))


class PipeReader:
    """A pipe's lines on the running loop, each read a wait :meth:`wake` can end.

    ``wake()`` (from ``stop()``, on any thread) cancels the run's task
    only while it waits here, where nothing has been taken from the
    reader's buffer (a long line's parts taken so far are kept): what the
    writer sent stays for the next read. The read then returns None, and
    the task is not left cancelled.

    The transport reads a duplicate of the file's descriptor, which it
    closes; the caller's file stays open. The descriptor is non-blocking
    meanwhile (the file shares the flag), and blocking again once closed.

    Examples
    --------
    >>> import asyncio, os
    >>> async def first_line():
    ...     r, w = os.pipe()
    ...     os.write(w, b"a\\nb")
    ...     pipe = await PipeReader.connect(os.fdopen(r, "rb"))
    ...     line = await pipe.readuntil(b"\\n")
    ...     held = pipe.close()
    ...     return line, held
    >>> asyncio.run(first_line())
    (b'a\\n', b'b')
    """

    __slots__ = ("_blocking", "_fd", "_parts", "_reader", "_task", "_transport", "_woken",
                 "loop")

    def __init__(self, reader: asyncio.StreamReader, transport: Any, fd: int, blocking: bool,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._reader = reader
        self._transport = transport
        self._fd, self._blocking = fd, blocking  # the file's, and its flag before
        self.loop = loop
        self._task: asyncio.Task[Any] | None = None  # the task waiting, while it does
        self._woken = False
        self._parts: list[bytes] = []  # the start of a line longer than the buffer

    @classmethod
    async def connect(cls, f: Any, before: PipeReader | None = None) -> PipeReader:
        """Read ``f`` (a pipe, FIFO or terminal) through the running loop.

        What ``f``'s own buffer holds (read ahead by a caller's ``readline()``)
        is read first; after what ``before``, the reader of a loop that has
        ended (closed here), held.
        """
        loop = asyncio.get_running_loop()
        carried = before.close() if before is not None else b""
        fd = f.fileno()
        blocking = before._blocking if before is not None else os.get_blocking(fd)
        os.set_blocking(fd, False)
        head = f.read() if hasattr(f, "peek") else None  # its buffer, and what is there now
        reader = asyncio.StreamReader(limit=_LIMIT)
        if carried or head:
            reader.feed_data(carried + (head or b""))
        try:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(fd), "rb", 0))
        except BaseException:
            os.set_blocking(fd, blocking)
            raise
        return cls(reader, transport, fd, blocking, loop)

    async def readuntil(self, separator: bytes) -> bytes | None:
        """The next line ending in ``separator`` (the last one maybe without), or None if woken.

        ``b""`` at the end of the pipe.
        """
        task = asyncio.current_task()
        self._task, self._woken = task, False
        try:
            return await self._until(separator)
        except asyncio.CancelledError:
            if not self._woken or task is None:
                raise
            task.uncancel()
            return None
        finally:
            self._task = None

    async def _until(self, separator: bytes) -> bytes:
        reader, parts = self._reader, self._parts
        while True:
            try:
                line = await reader.readuntil(separator)
            except asyncio.IncompleteReadError as end:  # the writer closed it mid-line
                line = end.partial
            except asyncio.LimitOverrunError as over:  # a long line: its start, kept
                parts.append(await reader.readexactly(over.consumed))  # held: no wait
                continue
            if parts:
                line, parts[:] = b"".join([*parts, line]), []
            return line

    def wake(self) -> None:
        """End a wait in progress (:meth:`readuntil` returns None); from any thread."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._wake()
            return
        try:
            self.loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # its loop has closed: no wait is going on
            pass

    def _wake(self) -> None:
        if self._task is not None and not self._task.done():
            self._woken = True
            self._task.cancel()

    def close(self) -> bytes:
        """Close the transport (its own descriptor); the file is blocking again.

        Returns what the reader held, unread.
        """
        held = b"".join(self._parts) + bytes(getattr(self._reader, "_buffer", b""))
        descriptor = self._transport.get_extra_info("pipe")
        try:
            self._transport.close()
        except RuntimeError:  # its loop has closed: it cannot close its descriptor itself
            if descriptor is not None:
                descriptor.close()
        try:
            os.set_blocking(self._fd, self._blocking)
        except OSError:  # the file was closed meanwhile
            pass
        return held
