"""``sink_to_durable_textfile``: a text file written transactionally with checkpoints.

Exactly-once output needs a sink whose effects roll back with the pipeline's
state. This sink records the file's length in every checkpoint (after
flushing, and optionally fsyncing, what it wrote) and, when the pipeline is
restored, truncates the file to that length: lines written after the last
checkpoint by a process that then crashed are removed, and the restarted
pipeline writes them again, once. With a :class:`~streams.state.Checkpointer`
the fsync is done by its background writer, before it writes the checkpoint
that records the length, so the file is never shorter than a checkpoint on
disk says.
"""

from __future__ import annotations

import codecs
import os
import weakref
from typing import IO, Any

from ..core import Stream
from .basic import check_encoding

__all__ = ["SinkToDurableTextfile"]


@Stream.register_api()
class SinkToDurableTextfile(Stream[Any]):
    """Write every element, a string, as a line of a file that rolls back with checkpoints.

    Without a checkpoint this is ``sink_to_textfile`` with ``mode="w"`` (the
    file is truncated at the first write): a run after a crash writes it
    anew, which loses the lines of what a source that resumes (a Redis
    consumer group) had acknowledged; without a checkpoint, give each run
    its own file. With a
    :class:`~streams.state.Checkpointer`, the file's length is part of each
    checkpoint and a restored pipeline truncates the file to it, so the file
    holds each output line exactly once however often the process is killed.

    Parameters
    ----------
    file : str or path
        The file (created if needed).
    end : str
        Written after each element.
    encoding : str
        How the text is encoded (checked when the sink is built). An
        encoding with a byte-order mark (``utf-16``, ``utf-8-sig``...) writes
        it once, at the start of the file: not when the file is written on
        from a restored length.
    fsync : bool
        Flush the file to disk at each checkpoint (needed to survive a power
        loss; a killed process loses nothing without it).

    Examples
    --------
    >>> import os, tempfile
    >>> from streams import Stream
    >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> source = Stream()
    >>> sink = source.map(str).sink_to_durable_textfile(path)
    >>> source.emit(1)
    >>> saved = sink.snapshot()          # what a checkpoint records
    >>> source.emit(2); source.close()
    >>> open(path).read()
    '1\\n2\\n'
    >>> sink.restore(saved)              # what a restart does
    >>> open(path).read()
    '1\\n'
    """

    # _encoder: the codec's incremental encoder, which writes a byte-order
    # mark at the start of the file only (encoding each line alone wrote one
    # before every line).
    __slots__ = ("_encoder", "_fp", "encoding", "end", "file", "fsync", "length")
    _operator = "sink_to_durable_textfile"
    _local_only = "its side effects belong in this process"
    _params = ("file", "end", "encoding", "fsync")
    _state = ("length",)
    _state_params = ("file",)  # the length is of that file
    _graphviz_shape = "trapezium"

    def __init__(self, upstream: Stream[Any], file: str | os.PathLike[str], end: str = "\n",
                 encoding: str = "utf-8", fsync: bool = True, **kwargs: Any) -> None:
        if hasattr(file, "write"):
            raise TypeError("sink_to_durable_textfile() takes a path (it truncates and "
                            "reopens the file on restore), not a file object")
        check_encoding("sink_to_durable_textfile", encoding)
        self.file = os.fspath(file)
        self.end = end
        self.encoding = encoding
        self.fsync = fsync
        #: The file's committed length in bytes (what a restore truncates to).
        self.length = 0
        self._fp: IO[bytes] | None = None
        self._encoder = codecs.getincrementalencoder(encoding)()  # a new one at each _open
        Stream.__init__(self, upstream, **kwargs)

    def _open(self) -> IO[bytes]:
        # Opened at the first write, not at construction: a restore that comes
        # after construction must find the previous run's file intact.
        fp = open(self.file, "r+b" if os.path.exists(self.file) else "wb")  # noqa: SIM115
        size = fp.seek(0, os.SEEK_END)
        if size < self.length:
            fp.close()
            raise RuntimeError(
                f"{self._label()}: {self.file} has {size} bytes but the checkpoint recorded "
                f"{self.length}; the file was changed or lost outside the pipeline")
        fp.truncate(self.length)
        fp.seek(self.length)
        encoder = codecs.getincrementalencoder(self.encoding)()
        if self.length:
            encoder.setstate(0)  # written on: its mark, if any, is at the start (as io does)
        self._fp, self._encoder = fp, encoder
        weakref.finalize(self, fp.close)
        return fp

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if not isinstance(x, str):
            return self._fail(x, TypeError(
                f"sink_to_durable_textfile writes strings, got {type(x).__name__}; add "
                ".map(str) or .map(json.dumps) before it"))
        try:
            fp = self._fp if self._fp is not None else self._open()
            # final: a stateful codec's line ends complete, where a checkpoint may cut.
            fp.write(self._encoder.encode(x + self.end, final=True))
        except Exception as e:
            if self._fp is not None and not self._fp.closed and not self._fp.tell():
                self._encoder.reset()  # utf-8-sig counts its mark written even when this failed
            return self._fail(x, e)
        return None

    def snapshot(self) -> dict[str, Any]:
        """Flush what was written and return the file's length as the state."""
        fp = self._fp if self._fp is not None else self._open()
        if not fp.closed:
            fp.flush()
            if self.fsync:
                os.fsync(fp.fileno())
            self.length = fp.tell()
        return {"length": self.length}

    def _checkpoint_state(self) -> tuple[dict[str, Any], int | None]:
        """The state for a checkpoint, and a descriptor to fsync before it is written.

        The data is flushed to the kernel here (a killed process loses
        nothing after that); the fsync, for power loss, is left to the
        checkpoint writer, on a duplicate descriptor it closes.
        """
        fp = self._fp if self._fp is not None else self._open()
        if fp.closed:
            return {"length": self.length}, None
        fp.flush()
        self.length = fp.tell()
        return {"length": self.length}, os.dup(fp.fileno()) if self.fsync else None

    def restore(self, state: dict[str, Any]) -> None:
        """Roll the file back to the length recorded in ``state``."""
        if self._fp is not None:
            self._fp.close()
            self._fp = None
        self.length = state["length"]
        self._open()

    def _barrier(self) -> None:
        """Hand what was written to the kernel (and the disk, with ``fsync``).

        A source that acknowledges its input without a checkpoint
        (``from_redis``) calls this first, so an acknowledged entry's line
        survives the process being killed. A checkpoint does it through
        :meth:`_checkpoint_state` instead (its fsync in the background).
        """
        fp = self._fp
        if fp is not None and not fp.closed:
            fp.flush()
            if self.fsync:
                os.fsync(fp.fileno())

    def _flush(self) -> Any:
        if self._fp is not None and not self._fp.closed:
            self._fp.flush()
            if self.fsync:
                os.fsync(self._fp.fileno())
            self.length = self._fp.tell()
            self._fp.close()
        return None
