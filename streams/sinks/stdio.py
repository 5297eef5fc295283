"""``sink_to_stdout``: one element per line of standard output (JSON lines by default)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ..core import Stream

__all__ = ["SinkToStdout"]

_FORMATS = ("json", "text")

#: The exit status of a Unix tool whose reader went away (128 + SIGPIPE).
EXIT_PIPE_CLOSED = 141


def _reader_gone() -> None:
    """Standard output's reader has closed the pipe (``... | head -3``): exit quietly.

    As Unix tools do: no traceback, status 128 + SIGPIPE. Standard output
    is pointed at /dev/null first, so the interpreter's last flush is quiet.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file: nothing to silence
        pass
    raise SystemExit(EXIT_PIPE_CLOSED)


@Stream.register_api()
class SinkToStdout(Stream[Any]):
    """Write each element as one line of standard output.

    Parameters
    ----------
    format : {"json", "text"}
        ``"json"``: ``json.dumps(x)`` (JSON lines, read back by
        ``Stream.from_stdin()``); ``"text"``: ``str(x)``.
    file : file object, optional
        Write here instead of ``sys.stdout``.
    flush : bool
        Flush after every line. Off by default: like ``grep``, output to a
        pipe is block-buffered (much faster); it is flushed at checkpoints
        and when the stream closes. Turn it on for live, line-by-line pipes.

    Notes
    -----
    When the reader of standard output goes away (``python app.py | head -3``)
    the program exits quietly, as Unix tools do: no traceback, exit status
    141 (128 + SIGPIPE), ``finally`` blocks run (``SystemExit``).

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> _ = source.sink_to_stdout()
    >>> source.emit({"a": [1, 2]}); source.emit("x"); source.close()
    {"a": [1, 2]}
    "x"
    """

    __slots__ = ("_dumps", "file", "flush", "format")
    _operator = "sink_to_stdout"
    _local_only = "its side effects belong in this process"
    _params = ("format", "flush")
    _graphviz_shape = "trapezium"

    def __init__(self, upstream: Stream[Any], format: str = "json", file: Any = None,
                 flush: bool = False, **kwargs: Any) -> None:
        if format not in _FORMATS:
            raise ValueError(
                f"sink_to_stdout(): format must be one of {_FORMATS}, got {format!r}")
        if file is not None and not hasattr(file, "write"):
            raise TypeError(f"sink_to_stdout(): file must be an open text file (with a "
                            f"write() method) or None for sys.stdout, got "
                            f"{type(file).__name__} {file!r:.60}")
        self.format = format
        self.file = file
        self.flush = flush
        self._dumps = json.dumps if format == "json" else str
        Stream.__init__(self, upstream, **kwargs)

    def _out(self) -> Any:
        # Looked up at each write: doctest and pytest replace sys.stdout.
        return sys.stdout if self.file is None else self.file

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            out = self._out()
            out.write(self._dumps(x) + "\n")
            if self.flush:
                out.flush()
        except BrokenPipeError as e:
            if self.file is not None:
                return self._fail(x, e)
            _reader_gone()
        except Exception as e:
            return self._fail(x, e)
        return None

    def _flush_out(self) -> None:
        try:
            self._out().flush()
        except BrokenPipeError:
            if self.file is not None:
                raise
            _reader_gone()

    def _barrier(self) -> None:
        """Flush: called before a checkpoint is written."""
        self._flush_out()

    def _flush(self) -> Any:
        self._flush_out()
        return None
