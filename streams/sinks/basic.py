"""Sinks: call a function, collect into a list, write to a text file."""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import weakref
from collections.abc import Callable
from typing import IO, Any

from ..core import NO_DEFAULT, Stream
from ..fusion import Fuser, recompiled_when_set
from ..metadata import release_refs, retain_refs
from ..operators._checks import check_callable, check_keywords
from ..operators._outbox import being_cancelled

__all__ = ["Sink", "SinkToList", "SinkToTextfile", "check_encoding",
           "check_text_write_mode", "sink_to_file"]


#: streamz's registry of live sinks (it keeps them from being collected).
#: Downstream nodes are held by their upstreams here, so a weak set is
#: enough: it only tells which sinks exist.
_global_sinks: weakref.WeakSet[Stream[Any]] = weakref.WeakSet()


def _deferred_tornado_coroutine(func: Any) -> Any:
    """A Tornado ``@gen.coroutine`` function as a coroutine function.

    Tornado runs such a function up to its first ``yield`` when it is called,
    and its ``gen.sleep`` wants the current loop then: on a synchronous
    stream with no loop running there is none yet (streamz had its loop
    thread). As a coroutine function it runs only once awaited, on the loop
    that will finish it. Other callables are returned as they are.

    >>> from tornado import gen
    >>> @gen.coroutine
    ... def write(x):
    ...     yield gen.sleep(0)
    >>> import inspect
    >>> inspect.iscoroutinefunction(_deferred_tornado_coroutine(write))
    True
    """
    from tornado import gen

    if not gen.is_coroutine_function(func):
        return func

    @functools.wraps(func)
    async def call(*args: Any, **kwargs: Any) -> Any:
        return await func(*args, **kwargs)

    return call


@Stream.register_api()
class Sink(Stream[Any]):
    """Call ``func(x, *args, **kwargs)`` on every element.

    If ``func`` is a coroutine function (or returns an awaitable), the
    awaitable is what ``emit`` waits for: on an asynchronous stream, ``await
    emit`` resolves after the sink finished. streamz dropped it. A failure of
    the awaitable goes to the node's error policy, ``CancelledError`` too (a
    request cancelled under the sink fails that element; the producer is not
    cancelled); a producer cancelled while it awaits is.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> _ = source.sink(print)
    >>> source.emit("hello")
    hello
    """

    __slots__ = ("_func", "args", "kwargs")
    _func: Any
    func = recompiled_when_set("_func", "The function called on each element.")
    _operator = "sink"
    _local_only = "its side effects belong in this process"
    _takes_function = True
    _params = ("args", "kwargs")
    _graphviz_shape = "trapezium"

    def __init__(self, upstream: Stream[Any], func: Any = NO_DEFAULT,
                 *args: Any, **kwargs: Any) -> None:
        # ``func`` may be left out: streamz's ``Sink(upstream)`` is a base class
        # whose subclasses define ``update``. ``sink(None)`` is still refused.
        if func is NO_DEFAULT:
            func = None
        else:
            check_callable("sink", func)
            func = _deferred_tornado_coroutine(func)
        stream_name = kwargs.pop("stream_name", None)
        check_keywords("sink", func, kwargs, ("stream_name",))
        self.func = func
        self.args = args
        self.kwargs = kwargs
        Stream.__init__(self, upstream, stream_name=stream_name)
        _global_sinks.add(self)

    def destroy(self, streams: list[Stream[Any]] | None = None) -> None:
        super().destroy(streams)
        _global_sinks.discard(self)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if self._func is None:
            return self._push(x)
        try:
            result = self._func(x, *self.args, **self.kwargs)
        except Exception as e:
            return self._fail(x, e)
        if result is not None and inspect.isawaitable(result):
            if metadata is None:
                return self._guard(x, result)
            # Held until the coroutine ends: the caller lets its refs go when
            # this returns, and a streamz source commits an element at 0.
            retain_refs(metadata)
            return self._guard_held(x, result, metadata)
        return None

    async def _guard_held(self, x: Any, result: Any, metadata: Any) -> None:
        try:
            await self._guard(x, result)
        finally:
            release_refs(metadata)

    async def _guard(self, x: Any, result: Any) -> None:
        try:
            await result
        except Exception as e:
            pending = self._fail(x, e)
        except asyncio.CancelledError as e:
            if being_cancelled():
                raise  # the producer awaiting emit is cancelled: that must go on
            # The coroutine ended cancelled (a request cancelled under it):
            # this element failed. Raised as it is, it would pass for the
            # producer's own cancellation and end its task without a word.
            pending = self._fail(x, e)
        else:
            return
        if pending is not None:
            await pending

    def _fusable(self) -> bool:
        # A coroutine sink is fused too: the compiled step returns its guarded
        # coroutine, which is what ``await emit`` waits for (issue 3: the
        # per-element cost of an async sink is one coroutine, not a method call).
        # A ``Sink`` without a function passes elements on, through ``update``.
        return self.func is not None

    def _fuse(self, f: Fuser, x: str) -> str | None:
        r = f.fresh("r")
        f.step(self, x, f"{r} = {f.call(self.func, x, self.args, self.kwargs)}")
        guard = f.bind(self._guard, "guard")
        if inspect.iscoroutinefunction(self.func):
            f.line(f"return {guard}({x}, {r})")
            return None
        f.line(f"if {r} is not None and {f.bind(inspect.isawaitable, 'isawaitable')}({r}):\n"
               f"    return {guard}({x}, {r})")
        return None


class SinkToList(Stream[Any]):
    """Collect every element into a list that is returned.

    ``stream.sink_to_list()`` returns the list (the node's ``results``).

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.sink_to_list()
    >>> source.emit(1)
    >>> L
    [1]
    """

    __slots__ = ("results",)
    _operator = "sink_to_list"
    _local_only = "its side effects belong in this process"
    _graphviz_shape = "trapezium"

    def __init__(self, upstream: Stream[Any], **kwargs: Any) -> None:
        self.results: list[Any] = []
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        self.results.append(x)
        return None

    def _fusable(self) -> bool:
        return True

    def _fuse(self, f: Fuser, x: str) -> str | None:
        # ``results.append(x)``, not a bound ``append``: Python runs a list's
        # append called by name without a call (about 3% of ``filter -> map``).
        f.line(f"{f.bind(self.results, 'results')}.append({x})")
        return None


def _returning_results(make: Callable[..., SinkToList]) -> Callable[..., list[Any]]:
    """``sink_to_list()`` returns the list, not the node (as streamz)."""

    @functools.wraps(make)
    def sink_to_list(*args: Any, **kwargs: Any) -> list[Any]:
        results: list[Any] = make(*args, **kwargs).results
        return results

    return sink_to_list


Stream.register_api(modifier=_returning_results)(SinkToList)


@Stream.register_api()
class SinkToTextfile(Stream[Any]):
    """Write every element, a string, to a text file followed by ``end``.

    Parameters
    ----------
    file : str, path or file object
        Opened with ``mode`` (append by default) and line buffering if a
        path; closed when the stream closes.
    end : str
        Written after each element.
    mode : str
        The mode a path is opened with: one that writes text, ``"a"``
        (append), ``"w"`` (truncate) or ``"x"`` (create, failing if the
        file exists), optionally with ``"t"`` or ``"+"``.
    encoding : str, optional
        The encoding a path is opened with (Python's default when None).

    Examples
    --------
    >>> import os, tempfile
    >>> from streams import Stream
    >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> source = Stream()
    >>> _ = source.map(str).sink_to_textfile(path)
    >>> source.emit(1); source.emit(2); source.close()
    >>> open(path).read()
    '1\\n2\\n'
    """

    __slots__ = ("_fp", "encoding", "end", "file", "mode")
    _operator = "sink_to_textfile"
    _local_only = "its side effects belong in this process"
    _params = ("file", "end", "mode", "encoding")
    _graphviz_shape = "trapezium"

    def __init__(self, upstream: Stream[Any], file: Any, end: str = "\n", mode: str = "a",
                 encoding: str | None = None, **kwargs: Any) -> None:
        if not (isinstance(file, (str, os.PathLike)) or hasattr(file, "write")):
            # open(3) would write to file descriptor 3: never what was meant.
            raise TypeError(
                f"sink_to_textfile(): file must be a path (str or pathlib.Path) or an open "
                f"text file, got {type(file).__name__} {file!r:.60}")
        if not isinstance(end, str):
            raise TypeError(f"sink_to_textfile(): end must be a str (written after each "
                            f"element), got {type(end).__name__} {end!r:.60}")
        if encoding is not None and hasattr(file, "write"):
            raise ValueError("sink_to_textfile(): encoding= is for a path; an open file "
                             "writes in the encoding it was opened with")
        if encoding is not None:
            check_encoding("sink_to_textfile", encoding)
        check_text_write_mode("sink_to_textfile", mode)
        self.file = file
        self.end = end
        self.mode = mode
        self.encoding = encoding
        if hasattr(file, "write"):
            self._fp: IO[str] = file
        else:  # closed at close()
            try:
                self._fp = open(file, mode=mode, buffering=1, encoding=encoding)  # noqa: SIM115
            except OSError as e:  # the same type, its message naming the operator
                hint = " (make its directory first)" if isinstance(e, FileNotFoundError) else ""
                raise type(e)(e.errno, f"sink_to_textfile(): cannot write to {file!r}: "
                                       f"{e.strerror}{hint}") from e
            weakref.finalize(self, self._fp.close)
        Stream.__init__(self, upstream, **kwargs)
        _global_sinks.add(self)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if not isinstance(x, str):
            return self._fail(x, TypeError(
                f"sink_to_textfile writes strings, got {type(x).__name__}; add .map(str) "
                "or .map(json.dumps) before it"))
        try:
            self._fp.write(x + self.end)
        except Exception as e:
            return self._fail(x, e)
        return None

    def _flush(self) -> Any:
        if self._fp is not self.file:
            self._fp.close()
        else:
            self._fp.flush()
        return None


def check_encoding(operator: str, encoding: Any) -> None:
    """Raise a clear error, at build time, for a name that is not a text encoding.

    Encoding and decoding nothing does the lookup and also refuses the
    codecs that are not text encodings (``"hex"``, ``"rot13"``), which
    ``codecs.lookup`` accepts.

    >>> check_encoding("from_stdin", "utf-8")
    >>> check_encoding("from_stdin", "no-such-codec")
    Traceback (most recent call last):
    ...
    ValueError: from_stdin(): unknown text encoding 'no-such-codec'; give a Python codec name ...
    """
    try:
        "".encode(encoding)
        b"".decode(encoding)
    except (LookupError, TypeError):
        raise ValueError(f"{operator}(): unknown text encoding {encoding!r}; give a Python "
                         "codec name such as 'utf-8' or 'latin-1'") from None


def check_text_write_mode(operator: str, mode: Any) -> None:
    """Raise a clear error unless ``mode`` opens a file for writing text.

    Caught when the graph is built: a mode that cannot write (``"r"``) or
    writes bytes (``"ab"``) would otherwise fail on every element.

    >>> check_text_write_mode("sink_to_textfile", "at")
    >>> check_text_write_mode("sink_to_textfile", "r")
    Traceback (most recent call last):
    ...
    ValueError: sink_to_textfile(): mode must write text: 'a' (append), 'w' (truncate) ...
    """
    chars = set(mode) if isinstance(mode, str) else set()
    if (not chars or len(chars) != len(mode) or not chars <= set("awxt+")
            or len(chars & set("awx")) != 1):
        raise ValueError(f"{operator}(): mode must write text: 'a' (append), 'w' (truncate) or "
                         f"'x' (create), optionally with 't' or '+'; got {mode!r}")


def sink_to_file(filename: str, upstream: Stream[Any], mode: str = "w", prefix: str = "",
                 suffix: str = "\n", flush: bool = False) -> IO[str]:
    """Write ``prefix + x + suffix`` to ``filename`` for every element; returns the file.

    streamz's function (importable from ``streams.sources`` as there); the
    caller closes the file.

    Examples
    --------
    >>> import os, tempfile
    >>> from streams import Stream
    >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> source = Stream()
    >>> with sink_to_file(path, source.map(str)) as f:
    ...     source.emit(1)
    >>> open(path).read()
    '1\\n'
    """
    file = open(filename, mode=mode)  # noqa: SIM115 - returned to the caller, who closes it

    def write(text: str) -> None:
        file.write(prefix + text + suffix)
        if flush:
            file.flush()

    upstream.sink(write)
    return file
