"""``Stream.from_textfile``: lines of a text file."""

from __future__ import annotations

from typing import Any

from ..clock import get_clock
from ..core import Stream
from .base import Source

__all__ = ["FromTextfile"]


@Stream.register_api(staticmethod)
class FromTextfile(Source):
    """Emit the lines of a text file, delimiter included (as streamz does).

    Without a running loop the file is read to its end, a last line without
    delimiter included, and the stream closes. Started inside a running loop
    it *follows* the file: lines appended later are emitted as they are
    completed (a partial last line waits for its delimiter), checking every
    ``poll_interval`` seconds, each line awaited through the graph before the
    next (backpressure), until ``stop()``.

    Parameters
    ----------
    f : str, path or file object
    poll_interval : float
        Seconds between checks for new data when following the file.
    delimiter : str
        What separates lines.
    encoding : str
        How the file's bytes are decoded.
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

    # The file is read as bytes and ``offset`` counts bytes, so that seek()
    # after a restore lands exactly after the last emitted line (a count of
    # characters is not a file position once a line holds non-ASCII text).
    __slots__ = ("_clock", "_delim", "_fp", "delimiter", "encoding", "file",
                 "from_end", "offset", "poll_interval")
    _operator = "from_textfile"
    _replayable = True
    _params = ("file", "poll_interval", "delimiter", "from_end", "encoding")
    _state = ("offset",)

    def __init__(self, f: Any, poll_interval: float = 0.1, delimiter: str = "\n",
                 start: bool = False, from_end: bool = False, encoding: str = "utf-8",
                 **kwargs: Any) -> None:
        if not delimiter:
            raise ValueError("from_textfile(): delimiter must be a non-empty string")
        self.file = f
        self.poll_interval = poll_interval
        self.delimiter = delimiter
        self.encoding = getattr(f, "encoding", None) or encoding
        self._delim = delimiter.encode(self.encoding)
        self.from_end = from_end
        #: Bytes consumed so far: where a restart resumes.
        self.offset = 0
        self._fp: Any = None
        # Following polls on the clock in force at creation (a virtual one in tests).
        self._clock = get_clock()
        super().__init__(start=start, **kwargs)

    def _open(self) -> Any:
        if self._fp is None:
            if hasattr(self.file, "read"):
                # A text file object: read its bytes underneath when it has them.
                fp = getattr(self.file, "buffer", self.file)
            else:
                fp = open(self.file, "rb")  # noqa: SIM115 - kept open while following
            if self.offset:  # restored from a checkpoint: that position wins
                fp.seek(self.offset)
            elif self.from_end:
                fp.seek(0, 2)
                self.offset = fp.tell()
            self._fp = fp
        return self._fp

    def _lines(self, data: bytes) -> tuple[list[bytes], bytes]:
        parts = data.split(self._delim)
        rest = parts.pop()
        return [p + self._delim for p in parts], rest


    def _run_sync(self) -> None:
        fp = self._open()
        lines, rest = self._lines(fp.read())
        if rest:
            lines.append(rest)
        encoding = self.encoding
        for line in lines:
            if self.stopped:
                return
            pending = self._push(line.decode(encoding))
            self.offset += len(line)
            self._element_done_sync(pending)
        self._end_sync()

    async def _run_async(self) -> None:
        fp = self._open()
        buffer = b""
        ckpt = self._checkpointer
        try:
            while not self.stopped:
                data = fp.read()
                if not data:
                    await self._clock.sleep(self.poll_interval)
                    continue
                lines, buffer = self._lines(buffer + data)
                for line in lines:
                    if ckpt is not None:
                        ckpt.begin()
                    pending = self._push(line.decode(self.encoding))
                    self.offset += len(line)
                    if pending is not None:
                        await pending
                    if ckpt is not None and (pending := ckpt.step()) is not None:
                        await pending
        finally:
            # A partial last line was read but not emitted: after stop(), a
            # new start() reads it again from the last emitted position.
            if buffer and not fp.closed:
                fp.seek(self.offset)
