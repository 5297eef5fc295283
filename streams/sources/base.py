"""The base of every source: a node with ``start()`` and ``stop()``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, TypeVar

from ..clock import LoopClock, run_sync
from ..core import Stream
from ..cycles import recursion_error
from ..errors import NodeError, SourceError
from ..pending import until_done
from . import streamz_run
from .run_task import _RUN, SourceRun, _RunEnd

__all__ = ["YIELD_EVERY", "Source", "SourceRun", "listen", "on_loop_thread", "require_loop",
           "serve_here", "stop_serving"]

#: Elements a run emits between two yields to the loop when no step awaited
#: (the loop's other tasks run meanwhile; not a timing device).
YIELD_EVERY = 1000

#: What a source emits: each source names it (``Source[bytes]``...), so
#: that ``Stream.from_tcp(...)`` is a ``Stream[bytes]`` with the source's
#: own attributes.
T = TypeVar("T")

logger = logging.getLogger("streams")


def require_loop(source: Source) -> None:
    """Raise a clear error unless called with an event loop running (servers need one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            f"{source._operator}() serves on an event loop: call start() inside a running "
            "loop (asyncio.run, Tornado, Jupyter)") from None


def listen(source: Any, server: Any) -> None:
    """Serve ``server`` (a Tornado server) on ``source.port`` and ``source.address``.

    Port 0 picks a free port, stored back in ``source.port``.
    """
    from tornado.netutil import bind_sockets

    sockets = bind_sockets(source.port, source.address)
    source.port = sockets[0].getsockname()[1]
    server.add_sockets(sockets)
    source._server = server
    source.started, source.stopped = True, False


def serve_here(source: Any) -> bool:
    """Whether a server source's ``start()`` should bind and serve now, in this thread.

    False when it already serves, or when no loop is running: as streamz,
    it then serves from the shared loop thread, where ``start()`` is handed.
    Raises a clear error when it cannot serve (see :func:`require_loop`).
    """
    if source._server is not None:
        return False
    from ..loop_thread import call_in_loop_thread, io_loop, running_io_loop

    if running_io_loop() is None:  # as streamz: serve from the shared loop thread
        source.loop = io_loop()
        call_in_loop_thread(source.start)
        return False
    require_loop(source)
    return True


def on_loop_thread(loop: Any) -> bool:
    """Whether ``loop`` (a Tornado IOLoop, or None) is the shared loop thread's.

    Asks without starting that thread: a source stopped on the caller's own
    loop must not start a thread only to learn that it is not its loop.
    """
    from .. import loop_thread

    # loop_thread.io_loop() would start the thread; its loop, if any, is here.
    return loop is not None and loop is loop_thread._io_loop


def stop_serving(source: Any, close: Callable[[], None] | None = None) -> Any:
    """Stop ``source`` and the server :func:`listen` started, then ``close()``.

    Returns what :meth:`Source.stop` promises. On a loop: an awaitable that
    is done once the elements in flight (those of ``source._handlers``, the
    tasks handling a connection or a request) are through the graph, so
    nothing is emitted after ``await source.stop()``; awaited from one of
    those tasks (a sink that stops its source), it is done at once. With no
    loop running: None. The server belongs to the loop it serves on: called
    from another thread while it serves on the shared loop thread, the whole
    stop (``close`` included) is handed to that thread, which it waits for.
    """
    from ..loop_thread import asyncio_loop_running, call_in_loop_thread, in_loop_thread

    if source._server is not None and on_loop_thread(source.loop) and not in_loop_thread():
        call_in_loop_thread(source.stop)  # the server belongs to the loop thread
        return None
    Source.stop(source)
    if source._server is not None:
        source._server.stop()
        source._server = None
    if close is not None:
        close()
    return _InFlight(set(source._handlers)) if asyncio_loop_running() else None


class _InFlight:
    """What a server source's ``stop()`` returns on a loop: awaiting it waits for the
    elements in flight, the tasks of its connections (see :func:`stop_serving`), or,
    given ``closed``, for that (the server's close, which waits for them), raising
    what it raises. Awaited from one of those tasks, it is done at once."""

    __slots__ = ("_closed", "_tasks")

    def __init__(self, tasks: set[asyncio.Task[Any]],
                 closed: asyncio.Future[None] | None = None) -> None:
        self._tasks = tasks
        self._closed = closed

    def __await__(self) -> Any:
        if asyncio.current_task() in self._tasks:
            return None  # called by an element's own graph: it ends after this element
        if self._closed is not None:
            return (yield from self._closed.__await__())
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            yield from asyncio.wait(pending).__await__()
        return None

    def _ipython_display_(self, **kwargs: Any) -> None:
        """Display nothing (a cell ending in ``source.stop()``)."""


class Source(Stream[T]):
    """A node that produces elements itself once started.

    With no running loop, ``start()`` produces everything synchronously and
    closes the stream at the end. With a loop running (a Tornado service,
    Jupyter), it schedules production on that loop and returns the task,
    which finishes when the source is exhausted or stopped; each element is
    awaited through the graph before the next one, so a slow sink slows the
    producer (backpressure).

    A source that needs a loop (a timer, a server), or whose graph keeps
    time on the real clock (``rate_limit``, ``delay``, ``timed_window``,
    ``partition(timeout=)``), started with no loop running, runs on the
    shared loop thread as streamz runs it: ``start()`` returns a
    ``concurrent.futures.Future`` of the run at once (see
    :mod:`streams.loop_thread`).

    A custom source is written as for streamz: a subclass overrides
    ``async def _run(self)``, one step, called again until ``self.stopped``,
    or ``async def run(self)``. As in streamz, ``start()`` runs it on a
    loop: as a task of the running loop, else on the shared loop thread
    (returning the ``concurrent.futures.Future`` of the run); ``stop()``
    ends it; the stream stays open. Inside, ``self.emit(x)`` and ``await
    self.emit(x)`` both push ``x`` through the graph. Its failures reach
    the user as a built-in source's do (see :meth:`start`).

    Examples
    --------
    >>> from streams import Source
    >>> class CountTo(Source):
    ...     def __init__(self, n, **kwargs):
    ...         self.n, self.i = n, 0
    ...         super().__init__(**kwargs)
    ...     async def _run(self):
    ...         if self.i == self.n:
    ...             self.stopped = True
    ...             return
    ...         await self.emit(self.i)
    ...         self.i += 1
    >>> source = CountTo(3)
    >>> L = source.sink_to_list()
    >>> source.start().result()  # no loop running: a run on the loop thread
    >>> L
    [0, 1, 2]
    """

    # _checkpointer: the streams.state.Checkpointer told of each finished
    # element (None when the pipeline is not checkpointed).
    # _resuming: start() was called while the run stopped before was still
    # finishing its element; the new run begins once that one has ended (see
    # _run_next). _unsent: the item a run had taken from its input when it
    # saw stop(), as a 1-tuple (streams.fused_loop sets it too), or None.
    __slots__ = ("_checkpointer", "_resuming", "_stopped", "_task", "_unsent", "started")
    #: Whether the source keeps an offset it can resume from (a checkpoint
    #: of its pipeline is possible); servers and timers cannot.
    _replayable: ClassVar[bool] = False
    #: Whether the source produces on a loop only (a timer, a server): with
    #: none running, ``start()`` runs it on the shared loop thread, as
    #: streamz does (issue 15; streams.loop_thread).
    _needs_loop: ClassVar[bool] = False
    _graphviz_shape = "doubleoctagon"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        streamz_run.adopt(cls, Source, _RUN)  # a class written to streamz's protocol

    def __init__(self, start: bool = False, **kwargs: Any) -> None:
        self.started = False
        self.stopped = True
        self._checkpointer: Any = None
        self._task: SourceRun | None = None
        self._resuming = False
        self._unsent: tuple[Any] | None = None
        Stream.__init__(self, **kwargs)
        if self.loop is None:  # streamz's ``source.loop``: the loop it will run on
            from ..loop_thread import running_io_loop

            self.loop = running_io_loop()
        if start:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                # Without a loop, start() runs to the end right here, before any
                # node is attached: every element would be lost.
                raise ValueError(
                    f"{self._label()}: start=True needs a running event loop; without "
                    "one, build the graph first and then call start()"
                ) from None
            self.start()

    @property
    def stopped(self) -> bool:
        """Whether the source is not producing (streamz's flag: code may set it)."""
        return self._stopped

    @stopped.setter
    def stopped(self, value: bool) -> None:
        self._stopped = value
        if value:
            # A compiled loop tests this flag alone (streams.fused_loop): a
            # stop, by stop() or by setting this attribute as streamz code
            # does, must reach it before the next item.
            self._interrupted = True

    def start(self) -> Any:
        """Start producing; see the class description for what it returns.

        On a loop, a failure of the source itself (not of a node, which
        has its own error policy) goes through this node's policy: with
        ``"raise"`` (default) the awaitable returned here, the one
        ``stop()`` returns and ``aclose()`` raise it, and unless the run is
        awaited it is logged at once (nobody may ever await it); ``"skip"``
        logs it; ``"route"`` sends it to :attr:`errors`. What can be checked
        before running (a wrong client, a switch that needs a loop) raises
        from ``start()`` itself.
        """
        __tracebackhide__ = True  # pytest and IPython: the user's call is the cause
        if self.started and (not self.stopped or self._resuming):
            return self._task
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None  # outside the except: errors below chain to nothing
        previous = self._task if self._task is not None and not self._task.done() else None
        if loop is None and (self._needs_loop or self._feeds_timer()):
            # streamz code starts such a source with no loop running: it runs
            # on the one loop thread (see streams.loop_thread).
            from ..loop_thread import io_loop, start_task

            self._check_start(on_loop=True)
            if self.loop is None:  # a loop= given by the user is honoured
                self.loop = io_loop()
            self._task = start_task(self._run_next(previous), self.loop)  # type: ignore[assignment]
            return self._task
        self._check_start(on_loop=loop is not None)
        if loop is None:
            self.started, self.stopped = True, False
            try:
                self._run_sync()
            except Exception as e:
                if self._checkpointer is not None:  # its element failed: no step() follows
                    self._checkpointer.abandon()
                error = self._named(e)
                if error is e:
                    raise
                raise error from e
            finally:
                self.stopped = True  # also after a failure: start() may be called again
            return None
        self._task = SourceRun(self._run_next(previous), loop=loop,
                               name=f"{self._label()} source")
        return self._task

    def _run_next(self, previous: Any) -> Coroutine[Any, Any, None]:
        """The run ``start()`` begins: now, or once ``previous`` (stopped) has ended.

        A run that was stopped still finishes its element (a slow sink's):
        started again meanwhile, the source would produce from two runs at
        once, which took ``stopped`` back to false, each item twice and out
        of order. The source stays stopped until the old run has ended. The
        nodes downstream that stopped it (``map_async(stop_on_exception=
        True)``) resume now: the old run may be waiting for them.
        """
        self.started = True
        if previous is None:
            self.stopped = False
            return self._run_guarded()
        self._resuming = True
        from ..graph import walk

        for node in walk(self):
            resume = getattr(node, "_upstream_started", None)
            if resume is not None:
                resume()
        return self._run_after(previous)

    async def _run_after(self, previous: Any) -> None:
        if isinstance(previous, concurrent.futures.Future):  # a run on the loop thread
            previous = asyncio.wrap_future(previous)
        await until_done(previous)  # of any loop; its failure is its own awaitable's
        if not self._resuming:  # stopped again meanwhile
            return
        self._resuming = False
        self.stopped = False
        await self._run_guarded()

    def _feeds_timer(self) -> bool:
        """Whether a node of this graph keeps time on the real clock.

        Such a graph (``rate_limit``, ``delay``, ``timed_window``,
        ``partition(timeout=)``) relies on a loop as streamz code does, so a
        source started with none running runs on the loop thread, as streamz
        runs it (contract 2). Under a virtual clock no loop is needed.
        """
        from ..graph import walk

        # A source's own clock (a file's polling) is covered by _needs_loop;
        # a window on event time reads the elements' time, never a timer
        # (``_on_clock``: also where its traits do not say so, its late
        # elements being sunk).
        return any(isinstance(getattr(n, "_clock", None), LoopClock)
                   and n._traits().event_time is None and getattr(n, "_on_clock", True)
                   for n in walk(self) if not isinstance(n, Source))

    def _check_start(self, on_loop: bool) -> None:
        """Raise a clear error when the source cannot run here (before it starts)."""

    def _named(self, error: Exception) -> Exception:
        """``error`` as the user should see it: naming this source if it is its own.

        A node's failure is already a NodeError naming the node; a runaway
        feedback loop gets its explanation (streams.cycles).
        """
        if isinstance(error, NodeError) or str(error).startswith(self._label()):
            return error  # already names its node
        if isinstance(error, RecursionError):
            return recursion_error(self, error)
        return SourceError(self, error)

    async def _run_guarded(self) -> None:
        __tracebackhide__ = True  # pytest and IPython: show the user's frames
        _RUN.set(asyncio.current_task())  # in this run's own context (its task's copy)
        try:
            await self._run_async()
        except (Exception, asyncio.CancelledError) as e:
            self.stopped = True
            if self._checkpointer is not None:  # its element failed: no step() follows
                self._checkpointer.abandon()
            if isinstance(e, asyncio.CancelledError):
                # Cancelled (a notebook's interrupt of `await source.start()`):
                # stopped, so that start() runs it again from where it stands.
                raise
            if self._policy != "raise":  # the record holds the original, as a node's
                pending = self._fail(None, e)
                if pending is not None:
                    await pending
                return
            error = self._named(e)
            # Logged now unless awaited: a task nobody awaits would only be
            # reported when collected, if ever, and the pipeline would wait
            # forever. An awaited one raises to its awaiter: reported once.
            if not getattr(asyncio.current_task(), "awaited", False):
                if isinstance(error, SourceError):  # its message names the source
                    logger.error("%s", error)
                else:
                    logger.error("%s failed: %s: %s", self._label(), type(e).__name__, e)
            if error is e:
                raise
            raise error from e

    def stop(self) -> Any:
        """Stop producing after the element in progress; the stream stays open.

        On a loop, returns an awaitable of the end of the run, which raises
        if the source failed (as the one ``start()`` returned); otherwise
        None. A node of the source's own graph may call it
        (``sink(lambda x: source.stop())``): awaited from the run itself, it
        is done at once.
        """
        self.stopped = True  # which a compiled loop sees before its next item
        self._resuming = False
        return None if self._task is None else _RunEnd(self._task)

    async def aclose(self) -> None:
        """Close the stream after the source's run; raise then if the source failed.

        What the graph holds is flushed first (a failed run left it open, for
        a new start() to go on): a service shutting down keeps its tail.
        """
        task = self._task
        failed = task is not None and task.done() and not task.cancelled()
        exc = task.exception() if failed and task is not None else None
        await Stream.aclose(self)
        if exc is not None:
            raise exc

    async def run(self) -> None:
        """Produce until stopped: await :meth:`_run` while not ``self.stopped``.

        streamz's protocol: a custom source overrides this or ``_run``.
        """
        while not self.stopped:
            step = self._run()
            await (step if inspect.isawaitable(step) else asyncio.sleep(0))

    async def _run(self) -> None:
        """One step of :meth:`run`: a custom source overrides it (or ``run``)."""
        raise NotImplementedError(streamz_run.NO_RUN.format(self._label()))

    def _run_sync(self) -> None:
        raise NotImplementedError(streamz_run.NO_RUN.format(self._label()))

    def _end_sync(self) -> None:
        """The source is exhausted: close the stream, then the last checkpoint."""
        __tracebackhide__ = True  # pytest, IPython: show the user's frames
        pending = self.close()
        if pending is not None:
            run_sync(pending)
        ckpt = self._checkpointer
        if ckpt is not None and (pending := ckpt.source_closed(self)) is not None:
            run_sync(pending)

    async def _end_async(self) -> None:
        """As :meth:`_end_sync`, on the running loop."""
        self.stopped = True
        await self.aclose()
        ckpt = self._checkpointer
        if ckpt is not None and (pending := ckpt.source_closed(self)) is not None:
            await pending

    async def _run_async(self) -> None:
        # streamz's protocol (streams.sources.streamz_run): built-ins override this
        ran = self.run()
        if inspect.isawaitable(ran):
            await ran
        self.stopped = True  # as after stop(): start() runs it again
