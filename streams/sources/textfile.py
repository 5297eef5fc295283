"""``Stream.from_textfile``: lines of a text file, read incrementally."""

from __future__ import annotations

import asyncio
import codecs
import io
import os
import stat
from collections.abc import Iterator
from typing import Any

from .._checkpoint_io import CheckpointError
from ..clock import get_clock
from ..core import Stream
from .base import YIELD_EVERY, logger
from .file_source import FileSource, underneath
from .line_bytes import delimiter_bytes
from .pipes import PipeReader, pollable
from .positions import bytes_before, check_before, size_of

__all__ = ["FromTextfile"]

#: Bytes read at a time: memory stays bounded by this plus the longest line.
_CHUNK = 1 << 16


def _end_when_built(f: Any) -> tuple[int, int, int] | None:
    """Where ``from_end`` starts, taken when the source is built (streamz seeks then).

    A path's regular file: its device, inode and size (read from at the
    first open if it is still that file). A caller's seekable file is moved
    to its end now, and read from where it stands. None otherwise (no file
    yet, a FIFO, an unseekable file): the end at the first open.
    """
    if hasattr(f, "read"):
        try:
            if getattr(f, "seekable", lambda: False)():
                f.seek(0, 2)
        except (OSError, ValueError):  # closed, or it cannot tell: its end at start()
            pass
        return None
    try:
        st = os.stat(f)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size) if stat.S_ISREG(st.st_mode) else None


@Stream.register_api(staticmethod)
class FromTextfile(FileSource[str]):
    """Emit the lines of a text file, delimiter included (as streamz does).

    The file is read incrementally: memory stays bounded (a chunk and the
    longest line) whatever the size of the file, and a file the source
    opened is closed when it ends or stops.

    ``follow`` says what happens at the end of the file:

    - ``follow=False``: emit the last line (even without a delimiter) and
      close the stream, with or without a running loop. On a loop,
      ``await source.start()`` returns then, and windows and partitions
      have flushed what they held. Use it in Jupyter to read a file once.
    - ``follow=True``: keep the file open like ``tail -f``: lines appended
      later are emitted as they are completed (a partial last line waits
      for its delimiter), checking every ``poll_interval`` seconds, until
      ``stop()``. A file truncated meanwhile is read again from its start,
      with a warning. Needs a running loop (Tornado, ``asyncio.run``, Jupyter).
    - ``follow=None`` (default, as streamz): follow on a running loop,
      read to the end and close without one.

    On a loop each line is awaited through the graph before the next one
    (backpressure), and a pipe or FIFO is read without blocking the loop:
    ``stop()`` ends a wait for its writer at once, and the next ``start()``
    reads what came meanwhile. A FIFO named by its path, followed, waits for
    its next writer when one closes it; a pipe has no positions, so it goes
    on where it stands (it cannot be replayed from a checkpoint).

    An open file is read from where it stands (after a header its caller
    read) and stays open; ``offset`` is then its position in the file, as a
    checkpoint records it. A checkpoint also keeps the 256 bytes before
    the offset: restored over another file at the path (a rotated log, an
    export written again), it is refused, not applied to other bytes. A
    last line without its delimiter, emitted with ``follow=False``, counts
    as read: a file still being written and read again from a checkpoint
    gives the rest of that line as a line of its own (follow it instead).

    Parameters
    ----------
    f : str, path or file object
    poll_interval : float
        Seconds between checks for new data when following the file.
    delimiter : str
        What separates lines.
    start : bool
        Start right away.
    from_end : bool
        Start at the end the file has when the source is built, as streamz
        does: lines appended before ``start()`` are read. A caller's file is
        moved to its end then. Where the path held no regular file when the
        source was built, or holds another file or fewer bytes at the first
        ``start()`` (replaced, truncated), that start's end is used instead.
    encoding : str
        How the file's bytes are decoded.
    follow : bool or None
        Keep reading lines appended to the file (see above).

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

    On a loop, ``follow=False`` reads the file once and ends the stream:

    >>> import asyncio
    >>> source = Stream.from_textfile(path, follow=False)
    >>> parts = source.map(str.strip).partition(2).sink_to_list()
    >>> async def read_once():
    ...     await source.start()
    >>> asyncio.run(read_once())
    >>> parts
    [('a', 'b'), ('c',)]
    """

    # The file is read as bytes and ``offset`` counts bytes, so that seek()
    # after a restore lands exactly after the last emitted line (a count of
    # characters is not a file position once a line holds non-ASCII text);
    # an io.StringIO, read as text, counts and seeks characters.
    # _positioned: the first open has placed the file (from_end applied).
    # _expected: a restored checkpoint's bytes before the offset, checked at
    # the next open; _closed_at: (offset, those bytes) when the file closed.
    # _restored: the offset is a restored checkpoint's, not yet applied.
    # _end_at: with from_end, (device, inode, size) of the path's file when built.
    __slots__ = ("_clock", "_closed_at", "_delim", "_end_at", "_expected", "_fp", "_line_encoding",
                 "_positioned", "_restored", "_text", "delimiter", "encoding", "file", "follow",
                 "from_end", "poll_interval")
    _operator = "from_textfile"
    _replayable = True
    _params = ("file", "poll_interval", "delimiter", "from_end", "encoding", "follow")
    # _before: the bytes before the offset, which say the file is the one
    # the offset was taken in (a checkpoint over a file replaced at the same
    # path is refused, not applied to other bytes).
    _state = ("offset", "_before")
    _state_added = ("_before",)

    def __init__(self, f: Any, poll_interval: float = 0.1, delimiter: str = "\n",
                 start: bool = False, from_end: bool = False, encoding: str = "utf-8",
                 follow: bool | None = None, **kwargs: Any) -> None:
        if not (isinstance(f, (str, os.PathLike)) or hasattr(f, "read")):
            raise TypeError(
                f"from_textfile(): f must be a path (str or pathlib.Path) or an open file, "
                f"got {type(f).__name__} {f!r:.60}")
        if not isinstance(delimiter, str) or not delimiter:
            raise ValueError("from_textfile(): delimiter must be a non-empty string")
        if follow not in (None, True, False):
            raise TypeError(f"from_textfile(): follow must be True, False or None, "
                            f"got {follow!r}")
        if not poll_interval > 0:
            raise ValueError(f"from_textfile(): poll_interval must be > 0 seconds, "
                             f"got {poll_interval!r}")
        self.file = f
        self.poll_interval = poll_interval
        self.delimiter = delimiter
        self.encoding = getattr(f, "encoding", None) or encoding
        self._delim: Any = delimiter_bytes("from_textfile", delimiter, self.encoding)
        # A byte-order mark starts the file, not each line: the lines after it are UTF-8.
        sig = codecs.lookup(self.encoding).name == "utf-8-sig"
        self._line_encoding = "utf-8" if sig else self.encoding
        self._text = False  # read as text (an io.StringIO), not bytes
        self.from_end = from_end
        self._end_at = _end_when_built(f) if from_end else None
        self.follow = follow
        #: Bytes consumed so far: where a restart resumes.
        self.offset = 0
        self._fp: Any = None
        self._pipe: PipeReader | None = None
        self._positioned = self._restored = False
        self._expected: bytes | None = None
        self._closed_at: tuple[int, bytes | None] | None = None
        # Following polls on the clock in force at creation (a virtual one in tests).
        self._clock = get_clock()
        super().__init__(start=start, **kwargs)

    @classmethod
    def _from_spec(cls, spec: Any, upstreams: list[Stream[Any]]) -> Stream[Any]:
        # The file is described as ``file`` (its attribute) but passed as ``f``.
        params = dict(spec.params)
        f = params.pop("file")
        if spec.stream_name is not None:
            params["stream_name"] = spec.stream_name
        return cls(f, **params)

    def _check_start(self, on_loop: bool) -> None:
        if self.follow and not on_loop:
            raise RuntimeError(
                f"{self._label()}: follow=True waits for new lines on an event loop; call "
                "start() inside a running loop (asyncio.run, Tornado, Jupyter), or pass "
                "follow=False to read the file to its end")

    def _open(self, on_loop: bool = False) -> Any:
        if self._fp is None:
            here: int | None = 0
            if on_loop and not hasattr(self.file, "read") and stat.S_ISFIFO(
                    os.stat(self.file).st_mode):
                # Opened for reading, a FIFO waits for a writer: not on the loop.
                fd = os.open(self.file, os.O_RDONLY | os.O_NONBLOCK)
                fp: Any = os.fdopen(fd, "rb", buffering=0)
            elif not hasattr(self.file, "read"):
                fp = open(self.file, "rb")  # noqa: SIM115 - closed by _close()
            elif self._positioned:  # started again: the file is where this source left it
                fp, here = getattr(self.file, "buffer", self.file), None
            else:
                fp, here = underneath(self.file, "from_textfile")
            self._fp = fp  # closed by _close() (if its own), whatever fails next
            self._text = isinstance(fp, io.TextIOBase)
            if self._text:
                self._delim = self.delimiter
            pipe = pollable(fp)
            if pipe:  # a pipe has no positions: it goes on where it stands
                if self._restored and self.offset:
                    raise CheckpointError(
                        f"{self._label()}: cannot resume at byte {self.offset}: the file is a "
                        "pipe, which cannot be read again; remove the checkpoint to start "
                        "afresh")
                self._expected = None  # a checkpoint's at 0: nothing to check
            elif self.offset or self._positioned:  # resuming (or restored): that position wins
                fp.seek(self.offset)
                self._check_before(fp)
            elif here is not None and hasattr(self.file, "read"):
                # A caller's file: where its own reading stopped (from_end: moved
                # to its end when the source was built).
                self.offset = here
            elif self.from_end:
                self.offset = self._built_end(fp)
            self._positioned, self._restored = True, False
            if not (on_loop and pipe):  # the loop's pipe: off its first line (_unmarked)
                self._past_mark(fp)
        return self._fp

    def _built_end(self, fp: Any) -> int:
        """Seek ``fp`` to where ``from_end`` starts, and return that position.

        The end recorded when the source was built, if the file is still the
        one it was then (device and inode) and holds that many bytes; else
        the end it has now (no file was there, or it was replaced or
        truncated meanwhile: its bytes at the old end are other lines).
        """
        end: int = fp.seek(0, 2)
        built = self._end_at
        if built is not None:  # (a path's file: fp is the one this source opened)
            st = os.fstat(fp.fileno())
            if (st.st_dev, st.st_ino) == built[:2] and built[2] <= end:
                end = fp.seek(built[2])
        return end

    def _past_mark(self, fp: Any) -> None:
        """At the start of a file of ``utf-8-sig``, past its byte-order mark (a line's own stays).

        A pipe, which cannot tell where it stands, is looked at when it can
        be (``peek``); else its lines are decoded as ``utf-8-sig`` each.
        """
        if self._text or self._line_encoding == self.encoding:
            return
        mark = codecs.BOM_UTF8
        try:
            at_start = fp.tell() == 0
        except (OSError, ValueError):
            if hasattr(fp, "peek") and not self.offset:
                if fp.peek(len(mark))[:len(mark)] == mark:
                    self.offset += len(fp.read(len(mark)))
            else:
                self._line_encoding = self.encoding
            return
        if at_start:
            if fp.read(len(mark)) == mark:
                self.offset = len(mark)
            else:
                fp.seek(0)

    def _unmarked(self, data: bytes, mark: bytes) -> bytes:
        """``data`` without ``mark`` (the byte-order mark or b""), where ``data`` starts the file.

        Read on the loop: a followed file empty when opened, whose mark came
        with its first write, and a pipe, which is not looked at when opened.
        """
        if mark and not self.offset and data.startswith(mark):
            self.offset = len(mark)
            return data[len(mark):]
        return data

    @property
    def _before(self) -> bytes | None:
        """The bytes before ``offset`` that tell the file (None: a file that cannot tell).

        Read from the open file, or kept when it closed: the path is never
        opened again for it (a FIFO would block; another file may be there).
        """
        if self._expected is not None:  # restored, not yet checked: the checkpoint's stand
            return self._expected
        if self._fp is not None:
            return bytes_before(self._fp, self.offset)
        if self._closed_at is not None and self._closed_at[0] == self.offset:
            return self._closed_at[1]
        return None

    @_before.setter
    def _before(self, expected: bytes | None) -> None:
        self._expected = expected  # restoring: checked when the file is opened

    def _check_before(self, fp: Any) -> None:
        """Refuse a restored offset into another file than the checkpoint's."""
        # The expected bytes are kept on a refusal: a start() again checks again.
        check_before(self._label(), fp, self.offset, self._expected)
        self._expected = None  # checked (or nothing to check): the file's own from now

    def restore(self, state: dict[str, Any]) -> None:
        super().restore({"_before": None, **state})
        self._positioned = self._restored = True  # a restored offset wins over from_end, 0 too

    def _close(self) -> None:
        """Close the file if the source opened it (a caller's file stays open)."""
        if self._fp is not None:
            self._closed_at = (self.offset, bytes_before(self._fp, self.offset))
        fp, self._fp = self._fp, None
        if fp is not None and not hasattr(self.file, "read"):
            fp.close()

    def _split(self, rest: list[Any], data: Any) -> list[Any]:
        """The complete lines of the chunks ``rest`` then ``data``; ``rest`` keeps what follows.

        A chunk without the delimiter is only kept: joining the whole line
        again at each chunk took time quadratic in a long line's length.
        """
        delim = self._delim
        edge = len(delim) - 1  # a delimiter of several characters may straddle two chunks
        if delim not in data and not (edge and rest and delim in (
                data[:0].join(rest[-edge:])[-edge:] + data[:edge])):
            rest.append(data)
            return []
        parts = data[:0].join([*rest, data]).split(delim)
        last = parts.pop()
        rest[:] = [last] if last else []
        return [p + delim for p in parts]

    def _read_lines(self, fp: Any) -> Iterator[Any]:
        """Every line to the end of the file, the last one maybe without delimiter."""
        if self._delim == b"\n" and hasattr(fp, "readline"):
            # The file itself, line by line in C. (A generator's ``yield from
            # fp`` would pass its closing on to a caller's file, closing it.)
            return iter(fp)
        return self._chunked_lines(fp)

    def _chunked_lines(self, fp: Any) -> Iterator[Any]:
        """The lines of ``fp`` read in chunks, split at the delimiter."""
        rest: list[Any] = []
        while data := fp.read(_CHUNK):
            yield from self._split(rest, data)
        if rest:
            yield data[:0].join(rest)

    def _run_sync(self) -> None:
        __tracebackhide__ = True  # pytest, IPython: show the user's frames
        try:
            fp = self._open()
            encoding, text = self._line_encoding, self._text
            for line in self._read_lines(fp):
                if self.stopped:
                    return
                self._element_done_sync(
                    self._push(line if text else line.decode(encoding)), len(line))
        finally:
            self._close()
        self._end_sync()

    async def _read_pipe(self, follow: bool) -> bool:
        """Emit a pipe's lines through the loop; whether it ended (else stopped).

        Its reads would hold up the loop. The reader, with what it holds, is
        kept when stopped. At the end of a FIFO named by a path, following
        waits for its next writer; of another pipe, the stream ends.
        """
        ckpt, encoding = self._checkpointer, self._line_encoding
        mark = codecs.BOM_UTF8 if encoding != self.encoding else b""
        countdown = YIELD_EVERY  # a full pipe's buffered lines are read without a wait
        while not self.stopped:
            pipe = self._pipe
            if pipe is None or pipe.loop is not asyncio.get_running_loop():
                pipe = self._pipe = await PipeReader.connect(self._open(on_loop=True), pipe)
                continue  # stopped meanwhile?
            line = await pipe.readuntil(self._delim)
            if line is None:  # stopped while the pipe was silent: nothing was read
                return False
            if not line:  # its writers closed it
                pipe.close()
                self._pipe = None
                self._close()
                if not follow or hasattr(self.file, "read"):
                    return True
                await self._clock.sleep(self.poll_interval)
                continue
            line = self._unmarked(line, mark)  # offset 0: the pipe's first line
            if ckpt is not None:
                ckpt.begin()
            pending = self._push(line.decode(encoding))
            if pending is not None:
                await pending  # failing, the line is gone: a pipe cannot be read again
            self.offset += len(line)
            if ckpt is not None and (pending := ckpt.step()) is not None:
                await pending
            countdown -= 1
            if not countdown:
                countdown = YIELD_EVERY
                await asyncio.sleep(0)  # let the loop's other tasks run; not a timing device
        return False

    async def _run_async(self) -> None:
        follow = self.follow is not False
        try:
            pipe = self._pipe is not None or pollable(self._open(on_loop=True))
        except BaseException:  # a checkpoint refused at the open: the file is closed
            self._close()
            raise
        if pipe:
            try:
                ended = await self._read_pipe(follow)
            finally:
                self._close()
            if ended:
                await self._end_async()
            return
        buffer: list[Any] = []
        ckpt = self._checkpointer
        last_size: int | None = None  # the file's size at the last end reached
        try:
            fp = self._open()
            encoding, text = self._line_encoding, self._text
            mark = codecs.BOM_UTF8 if encoding != self.encoding else b""  # off the file only
            while not self.stopped:
                data = fp.read(_CHUNK)
                if not data:
                    if not follow:
                        break
                    size = size_of(fp)
                    if size is not None and last_size is not None and size < min(
                            last_size, fp.tell()):  # truncated, as tail -f sees it
                        logger.warning(
                            "%s: the file was truncated (it holds fewer bytes than the %d "
                            "read); reading it again from its start", self._label(), fp.tell())
                        fp.seek(0)
                        self.offset, buffer = 0, []
                        self._past_mark(fp)
                    last_size = size
                    await self._clock.sleep(self.poll_interval)
                    continue
                if not buffer:
                    data = self._unmarked(data, mark)
                lines = self._split(buffer, data)
                # A synchronous graph takes lines without a wait: the loop's other
                # tasks run after each YIELD_EVERY of them (a count per line cost 6%).
                for at in range(0, len(lines), YIELD_EVERY):
                    for line in lines[at:at + YIELD_EVERY]:
                        if self.stopped:
                            break
                        if ckpt is not None:
                            ckpt.begin()
                        pending = self._push(line if text else line.decode(encoding))
                        if pending is not None:
                            await pending  # failing, the line is read again by a new start()
                        self.offset += len(line)
                        if ckpt is not None and (pending := ckpt.step()) is not None:
                            await pending
                    await asyncio.sleep(0)  # not a timing device
            else:
                return  # stopped: a new start() resumes after the last emitted line
            if buffer and not self.stopped:
                # follow=False at the end of the file: the last line has no delimiter.
                last = buffer[0][:0].join(buffer)
                if ckpt is not None:
                    ckpt.begin()
                pending = self._push(last if text else last.decode(encoding))
                if pending is not None:
                    await pending
                self.offset += len(last)
                if ckpt is not None and (pending := ckpt.step()) is not None:
                    await pending
        finally:
            # A partial last line read but not emitted is read again by the
            # next start(), which reopens the file at the last emitted line.
            self._close()
        await self._end_async()
