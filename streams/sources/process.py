"""``Stream.from_process``: the output lines of a subprocess."""

from __future__ import annotations

import asyncio
import shlex
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


@Stream.register_api(staticmethod)
class FromProcess(Source[bytes]):
    """Emit each line (bytes, newline included) a subprocess writes to stdout.

    A line is read only after downstream has finished with the previous one,
    so a slow pipeline fills the pipe and the process blocks on its writes:
    backpressure reaches the producer. When the process ends, its last
    partial line (if any, with ``with_end``) is emitted and the stream closes;
    ``stop()`` terminates the process without closing the stream. With no
    loop running, ``start()`` runs the process to its end before returning.

    Parameters
    ----------
    cmd : list of str or str
        The program and its arguments (a string is split with ``shlex``;
        no shell is involved).
    open_kwargs : dict, optional
        Extra arguments for ``asyncio.create_subprocess_exec``.
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

    __slots__ = ("cmd", "open_kwargs", "process", "returncode", "with_end", "with_stderr")
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
        super().__init__(start=start, **kwargs)

    def _run_sync(self) -> None:
        run_sync(self._run_async())

    async def _run_async(self) -> None:
        stderr = subprocess.STDOUT if self.with_stderr else None
        self.process = process = await asyncio.create_subprocess_exec(
            *self.cmd, stdout=subprocess.PIPE, stderr=stderr, limit=_LINE_LIMIT,
            **self.open_kwargs)
        assert process.stdout is not None
        try:
            while not self.stopped:
                line = await process.stdout.readline()
                if not line or (not line.endswith(b"\n") and not self.with_end):
                    break
                pending = self._push(line)
                if pending is not None:
                    await pending
        finally:
            if process.returncode is None and self.stopped:
                process.terminate()
            self.returncode = await process.wait()
        if not self.stopped:
            self.stopped = True
            await self.aclose()

    def stop(self) -> Any:
        """Terminate the process; the stream stays open.

        Returns what :meth:`Source.stop` returns: on a loop, an awaitable of
        the end of the run, which raises if the source failed.
        """
        end = super().stop()
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
        return end
