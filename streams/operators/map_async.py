"""``map_async``: a coroutine function over the elements, ``parallelism`` calls at a time.

A flow-control operator as those of :mod:`streams.operators.flow`, whose
worker it shares: outputs leave in input order; past ``parallelism`` calls
in flight ``await emit`` waits (backpressure).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from ..core import Stream
from ..metadata import emit_held, release_refs, retain_refs
from ..pending import until_done
from ._checks import check_callable, check_count, check_keywords
from ._outbox import being_cancelled, running_loop
from .flow import _Worker

__all__ = ["MapAsync"]

logger = logging.getLogger("streams")


@Stream.register_api()
class MapAsync(_Worker):
    """Apply a coroutine function, up to ``parallelism`` calls at once, in order.

    Results go downstream in input order whatever order the calls finish
    in. ``await emit(x)`` resolves once ``x`` has a slot: when
    ``parallelism`` calls are already running or waiting to be emitted, it
    waits (backpressure). Close waits for every call. With no loop running,
    each call is awaited before ``emit`` returns. A call that raises
    (``CancelledError`` too) goes to the node's error policy; under
    ``"raise"`` it is logged at once and raised again at close (streamz
    logged it and went on; a cancelled call stopped its worker for good).

    streamz ran up to ``parallelism + 1`` calls at once (one awaited by its
    worker, ``parallelism`` more queued behind it); here ``parallelism`` is
    the bound, as streamz documents it.

    Parameters
    ----------
    func : coroutine function
        Called as ``func(x, *args, **kwargs)``.
    parallelism : int
        How many calls may run at once (at least 1).
    stop_on_exception : bool
        When a call raises, stop: no further result goes downstream and
        the sources upstream are stopped (:meth:`stop`). The elements
        already here are kept, not dropped: they resume, in order, when an
        element arrives again, when :meth:`start` is called, or at close.
        A checkpoint taken meanwhile waits for them too, so that it never
        covers an element whose result is not out.

    Examples
    --------
    >>> import asyncio
    >>> from streams import Stream
    >>> async def slow_double(x):
    ...     await asyncio.sleep(0.001 * (5 - x))   # later inputs finish sooner
    ...     return 2 * x
    >>> source = Stream(asynchronous=True)
    >>> L = source.map_async(slow_double, parallelism=3).sink_to_list()
    >>> async def main():
    ...     for i in range(5):
    ...         await source.emit(i)
    ...     await source.aclose()
    >>> asyncio.run(main())
    >>> L
    [0, 2, 4, 6, 8]
    """

    __slots__ = ("_resumed", "_running", "_stopped", "_waiting", "args", "func",
                 "kwargs", "parallelism", "stop_on_exception")
    _operator = "map_async"
    _takes_function = True
    _local_only = "coroutines run on this process's event loop"
    _params = ("parallelism", "stop_on_exception", "args", "kwargs")

    def __init__(self, upstream: Stream[Any], func: Callable[..., Any], *args: Any,
                 parallelism: int = 1, stop_on_exception: bool = False, **kwargs: Any) -> None:
        check_callable("map_async", func)
        check_count("map_async", "parallelism", parallelism)
        if not isinstance(stop_on_exception, bool):
            raise TypeError(f"map_async(): stop_on_exception must be True or False, "
                            f"got {stop_on_exception!r}")
        self.parallelism = parallelism
        self.stop_on_exception = stop_on_exception
        self.func = func
        self.args = args
        stream_name = kwargs.pop("stream_name", None)
        check_keywords("map_async", func, kwargs, ("parallelism", "stop_on_exception",
                                                   "stream_name"))
        self.kwargs = kwargs
        # (element, its call, its streamz metadata or None) in input order;
        # the waiting ones have no slot yet, their producer waits on ``room``.
        self._running: deque[tuple[Any, asyncio.Future[Any], Any]] = deque()
        self._waiting: deque[tuple[Any, asyncio.Future[None], Any]] = deque()
        self._stopped = False  # by a failed call under stop_on_exception
        self._resumed: asyncio.Future[None] | None = None  # a checkpoint waits on it
        super().__init__(upstream, stream_name=stream_name)

    @property
    def work_task(self) -> asyncio.Task[None] | None:
        """The task emitting results, None when none runs (streamz's attribute)."""
        return None if self._idle() else self._worker

    def _call(self, x: Any) -> Any:
        return self.func(x, *self.args, **self.kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        loop = running_loop()
        if loop is None:
            try:
                result = self._call(x)
            except Exception as e:
                return self._fail(x, e)
            if inspect.isawaitable(result):
                # Held while the call runs, as on a loop: the caller releases
                # its own refs when this returns, before the call has run.
                retain_refs(metadata)
                return self._await_then(x, result, metadata)
            return self._emit(result) if metadata is None else self._emit(result, metadata)
        retain_refs(metadata)  # released once the result is emitted
        if self._stopped:
            self._resume(loop)  # streamz's worker restarts on the next element
        if len(self._running) < self.parallelism and not self._waiting:
            return self._launch(loop, x, metadata)
        room: asyncio.Future[None] = loop.create_future()
        self._waiting.append((x, room, metadata))
        return room

    async def _await_then(self, x: Any, call: Any, metadata: Any) -> None:
        """Await ``call``, then emit its result; ``metadata``'s retained refs are let go then."""
        try:
            try:
                result = await call
            except Exception as e:
                pending = self._fail(x, e)
            except asyncio.CancelledError as e:
                if being_cancelled():
                    raise
                pending = self._fail(x, e)  # the call ended cancelled: it failed, as on a loop
            else:
                pending = self._emit(result) if metadata is None else self._emit(result, metadata)
        finally:
            release_refs(metadata)  # downstream retained its own if it keeps the result
        if pending is not None:
            await pending

    def _launch(self, loop: asyncio.AbstractEventLoop, x: Any, metadata: Any) -> Any:
        try:
            call = asyncio.ensure_future(self._call(x))
        except Exception as e:
            release_refs(metadata)
            return self._fail(x, e)
        self._running.append((x, call, metadata))
        if self._idle() and not self._stopped:
            self._start_worker(loop, self._drain())
        return None

    def _admit(self, loop: asyncio.AbstractEventLoop) -> None:
        """Launch waiting elements while slots are free; wake their producers."""
        waiting = self._waiting
        while waiting and len(self._running) < self.parallelism and not self._stopped:
            y, room, metadata = waiting.popleft()
            try:
                self._launch(loop, y, metadata)
            except Exception as e:  # its call raised at once, under "raise"
                self._failed(e)
            if not room.done():
                room.set_result(None)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        running = self._running
        while running and not self._stopped:
            x, call, metadata = running[0]
            await asyncio.wait((call,))
            await self._deliver(x, self._outcome, x, call, metadata)
            running.popleft()
            self._admit(loop)

    def _outcome(self, x: Any, call: asyncio.Future[Any], metadata: Any) -> Any:
        """Send on what ``x``'s call ended with: its result, or its failure to the policy."""
        try:
            exc = call.exception()
        except asyncio.CancelledError as e:
            # The call ended cancelled (its coroutine raised CancelledError,
            # or someone cancelled it): that element failed; the worker goes on.
            exc = e
        if exc is not None:
            release_refs(metadata)
            if self.stop_on_exception:
                self._stop_on(exc)
            return self._fail(x, exc)
        if metadata is None:
            return self._emit(call.result())
        return emit_held(self._emit, call.result(), [metadata])

    def _held(self) -> int:
        return len(self._running) + len(self._waiting)

    def _stop_on(self, exc: BaseException) -> None:
        """stop_on_exception: hold what is here and stop the sources upstream."""
        logger.warning("%s: stopping after a call raised %s: %s (it resumes on the next "
                       "element, start() or close)", self._label(), type(exc).__name__, exc)
        self._stopped = True
        if not self._closed:  # what a stop at close holds is close's to report
            self._resumed = asyncio.get_running_loop().create_future()
        self.stop()

    def _resume(self, loop: asyncio.AbstractEventLoop) -> None:
        self._stopped = False
        resumed, self._resumed = self._resumed, None
        if resumed is not None and not resumed.done():
            resumed.set_result(None)
        self._admit(loop)
        if self._running and self._idle():
            self._start_worker(loop, self._drain())

    def _wake(self) -> None:
        """Resume after a stop, on the node's loop (start() and close may come from
        another thread: the shared loop thread runs a synchronous stream's calls)."""
        resumed = self._resumed
        if resumed is None:
            return
        loop = resumed.get_loop()
        if running_loop() is loop:
            self._resume(loop)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self._wake)

    def start(self) -> Any:
        """Resume after a stop on exception, then start the sources upstream."""
        self._upstream_started()
        return super().start()

    def _upstream_started(self) -> None:
        # A source upstream starts again (streams.sources.base): its run that
        # this node stopped may wait for the elements held here.
        self._wake()

    def _barrier(self) -> Any:
        if self._resumed is not None and self._held():
            return self._delivered()
        return super()._barrier()

    async def _delivered(self) -> None:
        # A stop holds elements with no worker running: the sources upstream
        # counted them done, so a checkpoint taken now would lose them in a
        # crash. It waits until start() (or close) has sent them on. The
        # future is read before the test: a resume in between has set it.
        await super()._delivered()
        while (resumed := self._resumed) is not None and self._held():
            await until_done(resumed)
            await super()._delivered()

    def _flush(self) -> Any:
        self._wake()  # close delivers what a stop held
        return super()._flush()
