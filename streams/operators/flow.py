"""Flow control on the loop: buffer, latest, map_async.

These operators decouple a producer from a slow consumer with a task of
their own. Each is bounded: ``buffer(n)`` holds at most ``n`` elements and
``map_async`` runs at most ``parallelism`` calls; past that, ``await emit``
waits, which is the backpressure. With no loop running there is nothing to
run concurrently, so they pass elements straight through. Closing waits for
everything they hold and every call in flight.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..core import Stream
from ..metadata import emit_held, release_refs, retain_refs
from ..spec import Traits
from ._checks import check_callable, check_count
from ._outbox import running_loop

__all__ = ["Buffer", "Latest", "MapAsync"]

logger = logging.getLogger("streams")


class _Worker(Stream[Any]):
    """A node whose elements go downstream from a task of its own."""

    __slots__ = ("_error", "_worker")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._worker: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        Stream.__init__(self, *args, **kwargs)

    def _idle(self) -> bool:
        """Whether no worker runs: none was started, or it has returned.

        A worker that returned is done at once, but its done-callback (which
        clears ``_worker``) runs a loop turn later; a producer woken in
        between must start a new worker, or what it adds is never emitted.
        """
        w = self._worker
        return w is None or w.done()

    def _start_worker(self, loop: asyncio.AbstractEventLoop, coro: Any) -> None:
        self._worker = loop.create_task(coro)
        self._worker.add_done_callback(self._worker_done)

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        if task is self._worker:
            self._worker = None

    def _failed(self, exc: BaseException) -> None:
        # Nobody awaits the worker: log now, and raise at close so the
        # failure cannot go unnoticed (the other elements still go through).
        logger.error("%s: emitting downstream failed", self._label(), exc_info=exc)
        if self._error is None:
            self._error = exc

    async def _drained(self) -> None:
        while not self._idle():
            assert self._worker is not None
            await asyncio.wait((self._worker,))
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _flush(self) -> Any:
        if self._idle() and self._error is None:
            return None
        return self._drained()


@Stream.register_api()
class Buffer(_Worker):
    """Let up to ``n`` elements pile up here, ahead of a slower downstream.

    The producer runs ahead of downstream by at most ``n`` elements: when
    the buffer is full, ``await emit`` waits for room (streamz's buffer did
    too; its synchronous ``emit`` could not). With no loop running, elements
    pass straight through.

    Parameters
    ----------
    n : int
        How many elements may wait here (at least 1).

    Examples
    --------
    >>> import asyncio
    >>> from streams import Stream
    >>> async def slow(x):
    ...     await asyncio.sleep(0)
    ...     out.append(x)
    >>> out = []
    >>> source = Stream(asynchronous=True)
    >>> _ = source.buffer(10).sink(slow)
    >>> async def main():
    ...     for i in range(100):
    ...         await source.emit(i)   # waits whenever 10 are already held
    ...     await source.aclose()      # waits for the buffer to drain
    >>> asyncio.run(main())
    >>> out == list(range(100))
    True
    """

    __slots__ = ("_metadata", "_queue", "_waiting", "n")
    _operator = "buffer"
    _local_only = None
    _params = ("n",)
    _state = ("_queue",)
    _graphviz_shape = "diamond"

    def _traits(self) -> Traits:
        # It decouples producer and consumer in this process; on an engine the
        # batches already do.
        return replace(super()._traits(), identity_on_engine=True)

    def __init__(self, upstream: Stream[Any], n: int, **kwargs: Any) -> None:
        check_count("buffer", "n", n)
        self.n = n
        self._queue: deque[Any] = deque()
        self._waiting: deque[tuple[Any, asyncio.Future[None]]] = deque()
        # streamz's metadata of the held elements, queued and waiting, in
        # arrival order (refs retained); None until an element comes with some.
        self._metadata: deque[Any] | None = None
        super().__init__(upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        loop = running_loop()
        if loop is None and not self._queue:
            return self._emit(x) if metadata is None else self._emit(x, metadata)
        if metadata is not None or self._metadata is not None:
            if self._metadata is None:  # the first metadata: earlier elements had none
                self._metadata = deque([] for _ in range(len(self._queue) + len(self._waiting)))
            retain_refs(metadata)
            self._metadata.append(metadata or [])
        if len(self._queue) < self.n and not self._waiting:
            self._queue.append(x)
            if loop is not None and self._idle():
                self._start_worker(loop, self._drain())
            return None
        # Full: the element waits with its producer, in arrival order, and
        # enters the buffer as soon as the worker takes one out.
        room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((x, room))
        return room

    async def _drain(self) -> None:
        queue, waiting = self._queue, self._waiting
        while queue:
            x = queue.popleft()
            if waiting:
                y, room = waiting.popleft()
                queue.append(y)
                if not room.done():
                    room.set_result(None)
            try:
                if self._metadata is None:
                    pending = self._emit(x)
                else:
                    pending = emit_held(self._emit, x, [self._metadata.popleft()])
                if pending is not None:
                    await pending
            except Exception as e:
                self._failed(e)


@Stream.register_api()
class Latest(_Worker):
    """Pass on the newest element; those that arrive while it waits replace it.

    On a running loop elements go downstream from a task of this node:
    when it runs (at the loop's next turn, or once downstream has finished
    with the previous element) it emits the newest element that arrived
    meanwhile; those it replaced are skipped: that is this operator's
    purpose (for dashboards and the like), as in streamz. ``await emit``
    waits only until that task has taken an element, never for downstream.
    With no loop running, elements pass straight through. At close the held
    element is emitted.

    Examples
    --------
    >>> import asyncio
    >>> from streams import Stream
    >>> gate = None
    >>> async def slow(x):
    ...     out.append(x)
    ...     await gate.wait()
    >>> out = []
    >>> source = Stream(asynchronous=True)
    >>> _ = source.latest().sink(slow)
    >>> async def main():
    ...     global gate
    ...     gate = asyncio.Event()
    ...     for i in range(5):
    ...         await source.emit(i)   # 0 keeps the sink busy; 1..4 replace each other
    ...     gate.set()
    ...     await source.aclose()
    >>> asyncio.run(main())
    >>> out
    [0, 4]
    """

    __slots__ = ("_has_next", "_metadata", "_next", "_taken")
    _operator = "latest"
    _local_only = "it depends on when downstream reads"
    _state = ("_next", "_has_next")
    _graphviz_shape = "octagon"

    def __init__(self, upstream: Stream[Any], **kwargs: Any) -> None:
        self._next: Any = None
        self._has_next = False
        # Resolved when the worker takes an element: what the emit that
        # started the worker returns (the producer yields to it once).
        self._taken: asyncio.Future[None] | None = None
        # streamz's metadata of the newest element, held (refs retained)
        # until a newer one replaces it or the stream closes.
        self._metadata: Any = None
        super().__init__(upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if metadata is not None or self._metadata is not None:
            retain_refs(metadata)
            release_refs(self._metadata)
            self._metadata = metadata
        loop = running_loop()
        if loop is None:
            return self._emit(x) if not self._metadata else self._emit(x, self._metadata)
        self._next, self._has_next = x, True
        if not self._idle():
            return None
        self._taken = taken = loop.create_future()
        self._start_worker(loop, self._run())
        return taken

    async def _run(self) -> None:
        while self._has_next:
            x, self._next, self._has_next = self._next, None, False
            taken, self._taken = self._taken, None
            if taken is not None and not taken.done():
                taken.set_result(None)
            try:
                pending = self._emit(x) if not self._metadata else self._emit(x, self._metadata)
                if pending is not None:
                    await pending
            except Exception as e:
                self._failed(e)

    def _flush(self) -> Any:
        pending = super()._flush()
        if self._metadata is None:
            return pending
        if pending is None:
            self._release_held()
            return None
        return self._release_after(pending)

    def _release_held(self) -> None:
        held, self._metadata = self._metadata, None
        release_refs(held)

    async def _release_after(self, pending: Any) -> None:
        try:
            await pending
        finally:
            self._release_held()


@Stream.register_api()
class MapAsync(_Worker):
    """Apply a coroutine function, up to ``parallelism`` calls at once, in order.

    Results go downstream in input order whatever order the calls finish
    in. ``await emit(x)`` resolves once ``x`` has a slot: when
    ``parallelism`` calls are already running or waiting to be emitted, it
    waits (backpressure). Close waits for every call. With no loop running,
    each call is awaited before ``emit`` returns. A call that raises goes to
    the node's error policy; under ``"raise"`` it is logged at once and
    raised again at close (streamz logged it and went on).

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

    __slots__ = ("_running", "_stopped", "_waiting", "args", "func", "kwargs", "parallelism",
                 "stop_on_exception")
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
        self.kwargs = kwargs
        # (element, its call, its streamz metadata or None) in input order;
        # the waiting ones have no slot yet, their producer waits on ``room``.
        self._running: deque[tuple[Any, asyncio.Future[Any], Any]] = deque()
        self._waiting: deque[tuple[Any, asyncio.Future[None], Any]] = deque()
        self._stopped = False  # by a failed call under stop_on_exception
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
        try:
            result = await call
        except Exception as e:
            pending = self._fail(x, e)
        else:
            pending = self._emit(result) if metadata is None else self._emit(result, metadata)
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
            try:
                if call.cancelled():
                    raise asyncio.CancelledError(f"map_async({self._label()}) call cancelled")
                exc = call.exception()
                if exc is not None:
                    release_refs(metadata)
                    if self.stop_on_exception:
                        self._stop_on(exc)
                    pending = self._fail(x, exc)
                elif metadata is None:
                    pending = self._emit(call.result())
                else:
                    pending = emit_held(self._emit, call.result(), [metadata])
                if pending is not None:
                    await pending
            except Exception as e:
                self._failed(e)
            running.popleft()
            self._admit(loop)

    def _stop_on(self, exc: BaseException) -> None:
        """stop_on_exception: hold what is here and stop the sources upstream."""
        logger.warning("%s: stopping after a call raised %s: %s (it resumes on the next "
                       "element, start() or close)", self._label(), type(exc).__name__, exc)
        self._stopped = True
        self.stop()

    def _resume(self, loop: asyncio.AbstractEventLoop) -> None:
        self._stopped = False
        self._admit(loop)
        if self._running and self._idle():
            self._start_worker(loop, self._drain())

    def start(self) -> Any:
        """Resume after a stop on exception, then start the sources upstream."""
        loop = running_loop()
        if self._stopped and loop is not None:
            self._resume(loop)
        return super().start()

    def _flush(self) -> Any:
        loop = running_loop()
        if self._stopped and loop is not None:
            self._resume(loop)  # close delivers what a stop held
        return super()._flush()
