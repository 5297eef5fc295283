"""``Stream.from_stdin``: one element per line of standard input.

Lines are JSON by default (JSON lines), so pipelines compose with Unix
pipes: ``producer | python pipeline.py | consumer``.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Callable
from itertools import islice
from typing import Any

from ..core import Stream
from .base import YIELD_EVERY
from .file_source import FileSource, underneath
from .line_bytes import delimiter_bytes
from .pipes import PipeReader, pollable
from .positions import bytes_before, check_before

__all__ = ["FromStdin"]

_FORMATS = ("json", "text")


def _parser(fmt: str, encoding: str) -> Callable[[bytes | str], Any]:
    """How a line (bytes, or str from a text file with no binary buffer) becomes an element."""
    if fmt == "json":
        return json.loads  # takes both

    def text(line: bytes | str) -> str:
        if isinstance(line, str):
            return line.rstrip("\r\n")
        return line.rstrip(b"\r\n").decode(encoding)

    return text


@Stream.register_api(staticmethod)
class FromStdin(FileSource[Any]):
    """Emit each line of standard input, parsed, then close at end of input.

    Parameters
    ----------
    format : {"json", "text"}
        ``"json"``: each line is a JSON document (blank lines are skipped);
        ``"text"``: each line is emitted as a string without its newline.
    file : file object, optional
        Read this instead of ``sys.stdin`` (binary or text: a text file is
        read through its binary buffer when it has one).
    encoding : str
        For ``"text"``: how the bytes are decoded (checked when the source
        is built).
    start : bool
        Start right away.

    Without a running loop the input is read to its end and the stream
    closes. On a loop, a pipe or terminal is read without blocking the loop,
    and ``stop()`` ends a wait for its writer at once.
    A line that does not parse goes to the node's error policy (by default a
    :class:`~streams.errors.NodeError` showing the line). ``offset`` counts
    bytes: a pipeline reading a file redirected to stdin (``< file``) can
    resume from a checkpoint, and a ``start()`` after a failure reads the
    failing line again; a pipe cannot be replayed. A text file object
    with no binary buffer (``io.StringIO``) is read as text, and ``offset``
    then counts characters, the positions such a file seeks to.

    Examples
    --------
    >>> import io
    >>> from streams import Stream
    >>> source = Stream.from_stdin(file=io.BytesIO(b'{"a": 1}\\n\\n[2, 3]\\n'))
    >>> L = source.sink_to_list()
    >>> source.start()
    >>> L
    [{'a': 1}, [2, 3]]
    """

    # _read_here: this source read the input up to offset (a start() after stop()
    # goes on there). _expected: a restored checkpoint's bytes before the
    # offset, checked when the input is opened: a checkpoint over another
    # file redirected is refused, not applied to its bytes.
    __slots__ = ("_expected", "_parse", "_read_here", "encoding", "file", "format")
    _operator = "from_stdin"
    _replayable = True
    _params = ("format", "encoding")
    _state = ("offset", "_before")
    _state_added = ("_before",)

    def __init__(self, format: str = "json", file: Any = None, encoding: str = "utf-8",
                 start: bool = False, **kwargs: Any) -> None:
        if format not in _FORMATS:
            raise ValueError(f"from_stdin(): format must be one of {_FORMATS}, got {format!r}")
        delimiter_bytes("from_stdin", "\n", encoding)  # a text encoding, its lines split as bytes
        self.format = format
        self.file = file
        self.encoding = encoding
        self._parse = _parser(format, encoding)
        #: Bytes consumed so far (where a restart over a seekable input resumes).
        self.offset = 0
        self._read_here = False
        self._expected: bytes | None = None
        self._pipe: PipeReader | None = None
        super().__init__(start=start, **kwargs)

    def restore(self, state: dict[str, Any]) -> None:
        super().restore({"_before": None, **state})
        self._read_here = False  # the offset is a checkpoint's: seek to it

    @property
    def _before(self) -> bytes | None:
        """The bytes before ``offset`` in the input, a file (None: one that cannot tell)."""
        if self._expected is not None:  # restored, not yet checked: the checkpoint's stand
            return self._expected
        f = sys.stdin if self.file is None else self.file
        return bytes_before(getattr(f, "buffer", f), self.offset)

    @_before.setter
    def _before(self, expected: bytes | None) -> None:
        self._expected = expected  # restoring: checked when the input is opened

    def _input(self) -> Any:
        """The file to read: a text file's binary buffer when it has one."""
        f = sys.stdin if self.file is None else self.file
        if not self.offset and not self._read_here:
            # From where the caller's reading stands; ``offset`` a file position
            # then, as a restore seeks to it (a pipe's counts from its start).
            f, here = underneath(f, "from_stdin")
            self.offset = here or 0
            self._expected = None  # a checkpoint's at 0 holds nothing to check
            return f
        f = getattr(f, "buffer", f)
        if self.offset and not self._read_here:
            if not f.seekable():
                raise RuntimeError(
                    f"{self._label()}: cannot resume at byte {self.offset}: standard input "
                    "is a pipe, which cannot be replayed (redirect a file instead)")
            f.seek(self.offset)
            check_before(self._label(), f, self.offset, self._expected)
            self._expected = None  # checked (or nothing to check)
        return f

    def _element(self, line: bytes | str) -> tuple[bool, Any]:
        """(True, element) or (False, pending-or-None) when the line is skipped or bad."""
        if self.format == "json" and not line.strip():
            return False, None
        try:
            return True, self._parse(line)
        except Exception as e:
            shown = line if isinstance(line, str) else line.decode(self.encoding, "replace")
            return False, self._fail(shown, e)

    def _position(self, f: Any) -> tuple[int, int] | None:
        """Where a seekable ``f`` stands, and ``offset`` there (None: it cannot go back).

        Only a binary file or an ``io.StringIO``: their positions count what
        ``offset`` counts (another text file's ``tell()`` is an opaque
        number).
        """
        if not isinstance(f, (io.RawIOBase, io.BufferedIOBase, io.StringIO)):
            return None
        try:
            return (f.tell(), self.offset) if f.seekable() else None
        except (OSError, ValueError):
            return None

    def _failed(self, f: Any, at: tuple[int, int] | None) -> None:
        """After an element failed: a seekable input goes back to the line after the last counted.

        ``offset`` has not counted the failing element's line (contract 9):
        the next start() reads it again. ``at`` is where the run began
        (:meth:`_position`); ``offset`` counts from there, however far
        into the file that was. A pipe cannot go back: it goes on after
        the failing line.
        """
        if at is not None:
            try:
                f.seek(at[0] + self.offset - at[1])
            except (OSError, ValueError):  # closed by the pipeline
                pass

    def _run_sync(self) -> None:
        f = self._input()
        self._read_here = True
        at = self._position(f)
        try:
            for line in f:  # a line read is emitted, also after stop(): it is gone from a pipe
                ok, x = self._element(line)
                self._element_done_sync(self._push(x) if ok else x, len(line))
                if self.stopped:
                    return
        except BaseException:
            self._failed(f, at)
            raise
        self._end_sync()

    async def _lines(self, f: Any) -> Any:
        """Lines from ``f`` without blocking the loop (pipes, terminals).

        Neither a regular file's lines nor those a pipe holds wait: the
        loop's other tasks run after each :data:`YIELD_EVERY` of them, or
        they would wait until a synchronous graph had taken them all. Ends
        early when stopped then.
        """
        if self._pipe is None and not pollable(f):
            # A regular file (or an in-memory one) cannot be polled, and
            # reading it never blocks for long. Counted by the slice (a count
            # per line cost 3%); islice reads no line ahead, which stop() would lose.
            while True:
                line = None
                for line in islice(f, YIELD_EVERY):
                    yield line
                if line is None:
                    return
                await asyncio.sleep(0)  # not a timing device
                if self.stopped:
                    return
        pipe = self._pipe
        if pipe is None or pipe.loop is not asyncio.get_running_loop():
            pipe = self._pipe = await PipeReader.connect(f, pipe)  # pipe: another loop's
        # Kept when stop() ends the run: the next start() reads what its reader holds.
        countdown = YIELD_EVERY  # small beside the await of each line
        while not self.stopped:
            line = await pipe.readuntil(b"\n")
            if not line:
                break
            yield line
            countdown -= 1
            if not countdown:
                countdown = YIELD_EVERY
                await asyncio.sleep(0)  # not a timing device
        if self.stopped:  # (maybe while the pipe was silent): nothing is lost
            return
        pipe.close()  # its end
        self._pipe = None

    async def _run_async(self) -> None:
        f = self._input()
        at = self._position(f)
        try:
            await self._read_async(f)
        except BaseException:
            self._failed(f, at)
            raise

    async def _read_async(self, f: Any) -> None:
        ckpt = self._checkpointer
        lines = self._lines(f)
        self._read_here = True
        async for line in lines:
            # A line read is emitted, also after stop(): it is gone from a pipe.
            if ckpt is not None:
                ckpt.begin()
            ok, x = self._element(line)
            pending = self._push(x) if ok else x
            if pending is not None:
                await pending  # failing, the line is read again by a new start()
            self.offset += len(line)
            if ckpt is not None and (pending := ckpt.step()) is not None:
                await pending
            if self.stopped:
                return
        if self._pipe is None and not self.stopped:  # else stopped between lines (_lines)
            await self._end_async()
