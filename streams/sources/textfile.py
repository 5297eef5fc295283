"""``Stream.from_textfile``: lines of a text file."""

from __future__ import annotations

from typing import IO, Any

from ..clock import run_sync
from ..core import Stream
from .base import Source

__all__ = ["FromTextfile"]


@Stream.register_api(staticmethod)
class FromTextfile(Source):
    """Emit the lines of a text file, delimiter included (as streamz does).

    Without a running loop the file is read to its end, a last line without
    delimiter included, and the stream closes.

    Parameters
    ----------
    f : str, path or file object
    poll_interval : float
        Seconds between checks for new data when following the file.
    delimiter : str
        What separates lines.
    from_end : bool
        Start at the current end of the file (only new lines).
    start : bool
        Start right away.

    Examples
    --------
    >>> import os, tempfile
    >>> from streams import Stream
    >>> path = os.path.join(tempfile.mkdtemp(), "in.txt")
    >>> _ = open(path, "w").write("a\\nb\\nc")
    >>> source = Stream.from_textfile(path)
    >>> L = source.map(str.strip).sink_to_list()
    >>> source.start()
    >>> L
    ['a', 'b', 'c']
    """

    __slots__ = ("_fp", "delimiter", "file", "from_end", "offset", "poll_interval")
    _operator = "from_textfile"
    _params = ("file", "poll_interval", "delimiter", "from_end")
    _state = ("offset",)

    def __init__(self, f: Any, poll_interval: float = 0.1, delimiter: str = "\n",
                 start: bool = False, from_end: bool = False, **kwargs: Any) -> None:
        if not delimiter:
            raise ValueError("from_textfile(): delimiter must be a non-empty string")
        self.file = f
        self.poll_interval = poll_interval
        self.delimiter = delimiter
        self.from_end = from_end
        #: Characters consumed so far: where a restart resumes.
        self.offset = 0
        self._fp: IO[str] | None = None
        super().__init__(start=start, **kwargs)

    def _open(self) -> IO[str]:
        if self._fp is None:
            fp: IO[str] = self.file if hasattr(self.file, "read") else open(self.file)  # noqa: SIM115
            if self.from_end:
                fp.seek(0, 2)
            elif self.offset:
                fp.seek(self.offset)
            self._fp = fp
        return self._fp

    def _lines(self, data: str) -> tuple[list[str], str]:
        parts = data.split(self.delimiter)
        rest = parts.pop()
        return [p + self.delimiter for p in parts], rest

    def _run_sync(self) -> None:
        fp = self._open()
        lines, rest = self._lines(fp.read())
        if rest:
            lines.append(rest)
        for line in lines:
            if self.stopped:
                return
            pending = self._push(line)
            self.offset += len(line)
            if pending is not None:
                run_sync(pending)
        pending = self.close()
        if pending is not None:
            run_sync(pending)

    async def _run_async(self) -> None:
        from ..clock import get_clock

        fp = self._open()
        buffer = ""
        while not self.stopped:
            data = fp.read()
            if not data:
                await get_clock().sleep(self.poll_interval)
                continue
            lines, buffer = self._lines(buffer + data)
            for line in lines:
                pending = self._push(line)
                self.offset += len(line)
                if pending is not None:
                    await pending
