"""``Stream.from_process``: the output lines of a subprocess."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
from typing import Any

from ..clock import run_sync
from ..core import Stream
from .base import Source

__all__ = ["FromProcess"]

#: Longest line accepted from the process. asyncio's reader stops reading the
#: pipe once it holds twice this much, which is what bounds memory and makes
#: a slow pipeline block the process's writes.
_LINE_LIMIT = 2**20

#: Seconds a terminated process has to exit before it is killed. Real time:
#: it bounds how long an operating-system process is waited for.
_GRACE = 5.0


@Stream.register_api(staticmethod)
class FromProcess(Source[bytes]):
    """Emit each line (bytes, newline included) a subprocess writes to stdout.

    A line is read only after downstream has finished with the previous one,
    so a slow pipeline fills the pipe and the process blocks on its writes:
    backpressure reaches the producer. When the process ends, its last
    partial line (if any, with ``with_end``) is emitted and the stream closes;
    ``stop()`` terminates the process without closing the stream. With no
    loop running, ``start()`` runs the process to its end before returning.

    The process runs in a session of its own (``start_new_session``; give
    ``open_kwargs={"start_new_session": False}`` to keep it in yours). When
    the run ends early (``stop()``, a failure in the pipeline, a
    cancellation), the process and every process it started are sent
    SIGTERM, then SIGKILL if they have not exited within 5 seconds: the run
    ends, and a failure is raised, without waiting for the process to end
    on its own.

    Parameters
    ----------
    cmd : list of str or str
        The program and its arguments (a string is split with ``shlex``;
        no shell is involved).
    open_kwargs : dict, optional
        Extra arguments for ``asyncio.create_subprocess_exec`` (``stdout`` is
        the source's).
    with_stderr : bool
        Merge the process's stderr into the lines.
    with_end : bool
        Emit a last line that has no newline.

    Lines are limited to 1 MiB; at most 2 MiB of output waits in this
    process before the subprocess is made to wait.

    Examples
    --------
    >>> import sys
    >>> from streams import Stream
    >>> source = Stream.from_process([sys.executable, "-c", "print('a'); print('b')"])
    >>> L = source.sink_to_list()
    >>> source.start()
    >>> L
    [b'a\\n', b'b\\n']
    """

    # _group: the process leads a process group of its own, signalled as a whole.
    __slots__ = ("_group", "cmd", "open_kwargs", "process", "returncode", "with_end",
                 "with_stderr")
    _operator = "from_process"
    _params = ("cmd", "with_stderr", "with_end")

    def __init__(self, cmd: list[str] | str, open_kwargs: dict[str, Any] | None = None,
                 with_stderr: bool = False, with_end: bool = True, start: bool = False,
                 **kwargs: Any) -> None:
        args = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        if not args:
            raise ValueError("from_process(): cmd is empty; give a program and its arguments")
        self.cmd = args
        self.open_kwargs = dict(open_kwargs or {})
        self.with_stderr = with_stderr
        self.with_end = with_end
        self.process: asyncio.subprocess.Process | None = None
        #: The exit status once the process has ended.
        self.returncode: int | None = None
        self._group = False
        super().__init__(start=start, **kwargs)

    def _run_sync(self) -> None:
        try:
            run_sync(self._run_async())
        except BaseException:
            # A KeyboardInterrupt leaves the run suspended, its cleanup not run:
            # the process must not outlive it.
            if self.process is not None and self.process.returncode is None:
                self._signal(signal.SIGKILL)
            raise

    async def _run_async(self) -> None:
        loop = asyncio.get_running_loop()
        options = dict(self.open_kwargs)
        if "process_group" not in options:
            options.setdefault("start_new_session", True)
        self._group = bool(options.get("start_new_session"))
        stderr = subprocess.STDOUT if self.with_stderr else None
        # The pipe is this source's, not asyncio's: the process's wait() then
        # never waits for the pipe to close, which a process that left
        # children writing to it, or a full pipe nobody reads, would delay for ever.
        read_fd, write_fd = os.pipe()
        try:
            self.process = process = await asyncio.create_subprocess_exec(
                *self.cmd, stdout=write_fd, stderr=stderr, **options)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the process has its copy: its end is our end of file
        reader = asyncio.StreamReader(limit=_LINE_LIMIT, loop=loop)
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        transport = None
        ended = False  # the process closed its output: it ends on its own
        try:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
            while not self.stopped:
                try:
                    line = await reader.readline()
                except ValueError as e:  # asyncio's "chunk is longer than limit"
                    raise ValueError(
                        f"{self._label()}: a line of the process's output is longer than "
                        f"{_LINE_LIMIT // (1 << 20)} MiB, the longest this source reads; "
                        "have the program split it (or write it to a file and read that "
                        "with from_textfile)") from e
                if not line or (not line.endswith(b"\n") and not self.with_end):
                    ended = True
                    break
                pending = self._push(line)
                if pending is not None:
                    await pending
        finally:
            # What is left unread is dropped, and a writer gets EPIPE.
            if transport is not None:
                transport.close()
            else:
                pipe.close()
            if ended:
                self.returncode = await process.wait()
            else:
                await self._end_process(process)
        if not self.stopped:
            self.stopped = True
            await self.aclose()

    async def _end_process(self, process: asyncio.subprocess.Process) -> None:
        """Terminate the process (and its group), wait a grace period, then kill it."""
        self._signal(signal.SIGTERM)
        try:
            self.returncode = await asyncio.wait_for(process.wait(), _GRACE)
        except TimeoutError:
            self._signal(signal.SIGKILL)
            self.returncode = await process.wait()

    def _signal(self, sig: int) -> None:
        """Send ``sig`` to the process, and to its group when it leads one."""
        process = self.process
        if process is None:
            return
        try:
            if self._group:
                # Also after the leader has exited: its children may still hold
                # the pipe. The group's id is not reused while a member lives.
                os.killpg(process.pid, sig)
            elif process.returncode is None:
                process.send_signal(sig)
        except ProcessLookupError:  # already gone
            pass

    def stop(self) -> Any:
        """Terminate the process (and its group); the stream stays open.

        Returns what :meth:`Source.stop` returns: on a loop, an awaitable of
        the end of the run, which raises if the source failed.
        """
        end = super().stop()
        if self.process is not None and self.process.returncode is None:
            self._signal(signal.SIGTERM)
        return end
