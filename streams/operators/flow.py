"""Flow control on the loop: buffer, latest (and ``map_async``, in its own module).

These operators decouple a producer from a slow consumer with a task of
their own. Each is bounded: ``buffer(n)`` holds at most ``n`` elements and
``map_async`` runs at most ``parallelism`` calls; past that, ``await emit``
waits, which is the backpressure. With no loop running there is nothing to
run concurrently, so they pass elements straight through. Closing waits for
everything they hold and every call in flight.
A coroutine ending in ``CancelledError`` (a request cancelled under it) fails
its element only; a worker cancelled itself leaves elements that close reports.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..core import Stream
from ..metadata import emit_held, release_refs, retain_refs
from ..pending import gather_pending as _gather_pending
from ..pending import until_done
from ..spec import Traits
from ._checks import check_count
from ._outbox import downstream_cancelled, running_loop

__all__ = ["Buffer", "Latest"]

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

    def _held(self) -> int:
        """How many elements are here, not yet emitted downstream."""
        raise NotImplementedError

    async def _deliver(self, x: Any, send: Callable[..., Any], *args: Any) -> None:
        """``send(*args)`` (``x`` downstream), then await its work; a failure is the worker's."""
        try:
            pending = send(*args)
            if pending is not None:
                await pending
        except Exception as e:
            self._failed(e)
        except asyncio.CancelledError as e:
            self._cancelled_downstream(x, e)

    def _cancelled_downstream(self, x: Any, exc: asyncio.CancelledError) -> None:
        """``x``'s work downstream ended cancelled: its failure, unless the worker's own."""
        self._failed(downstream_cancelled(self, x, exc))

    def _barrier(self) -> Any:
        """Before a checkpoint: what is held here sent downstream, its work done.

        ``await emit`` returns once the element is held here, so its source
        counts it done and a checkpoint covers it before its outputs exist: a
        crash then would lose it. The checkpoint waits for the worker instead
        (the pipeline pauses while it drains; see :class:`~streams.Checkpointer`).
        """
        return None if self._idle() else self._delivered()

    async def _delivered(self) -> None:
        while not self._idle():
            assert self._worker is not None
            await until_done(self._worker)  # it may run on another thread's loop

    async def _drained(self) -> None:
        await self._delivered()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if left := self._held():  # its worker was cancelled: they would vanish unreported
            raise RuntimeError(f"{self._label()}: {left} element(s) were never emitted "
                               "downstream: the task emitting them was cancelled or never ran")

    def _flush(self) -> Any:
        if self._idle() and self._error is None and not self._held():
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

    __slots__ = ("_metadata", "_queue", "_restored", "_waiting", "n")
    _operator = "buffer"
    _local_only = None
    _params = ("n",)
    _state = ("_queue",)
    _state_params = ()  # held elements are elements, whatever n
    _graphviz_shape = "diamond"

    def _traits(self) -> Traits:
        # It decouples producer and consumer in this process; on an engine the
        # batches already do.
        return replace(super()._traits(), identity_on_engine=True)

    def __init__(self, upstream: Stream[Any], n: int, **kwargs: Any) -> None:
        n = check_count("buffer", "n", n)
        self.n = n
        self._queue: deque[Any] = deque()
        self._waiting: deque[tuple[Any, asyncio.Future[None]]] = deque()
        # streamz's metadata of the held elements, queued and waiting, in
        # arrival order (refs retained); None until an element comes with some.
        self._metadata: deque[Any] | None = None
        # Restored holding elements (a snapshot taken while they waited, or a
        # checkpoint of an older version): no worker sends them yet.
        self._restored = False
        super().__init__(upstream, **kwargs)

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._restored = bool(self._queue)

    def _send_restored(self, loop: asyncio.AbstractEventLoop | None) -> Any:
        """Send on the elements a restore put here: from a worker, or now without a loop."""
        if loop is not None:
            self._restored = False
            if self._idle():
                self._start_worker(loop, self._drain())
            return None
        queue = self._queue
        pending = []
        while queue:  # a failure raised leaves the rest for the next element
            pending.append(self._send(queue.popleft()))
        self._restored = False
        return _gather_pending(pending)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        loop = running_loop()
        if self._restored:
            sent = self._send_restored(loop)
            if sent is not None:
                rest = self.update(x, who, metadata)
                return _gather_pending([sent, rest])
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
            await self._deliver(x, self._send, x)

    def _send(self, x: Any) -> Any:
        if self._metadata is None:
            return self._emit(x)
        return emit_held(self._emit, x, [self._metadata.popleft()])

    def _held(self) -> int:
        return len(self._queue) + len(self._waiting)

    def _flush(self) -> Any:
        if self._restored:
            sent = self._send_restored(running_loop())
            if sent is not None:
                return _gather_pending([sent, super()._flush()])
        return super()._flush()


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
            await self._deliver(x, self._send, x)

    def _send(self, x: Any) -> Any:
        return self._emit(x, self._metadata) if self._metadata else self._emit(x)

    def _held(self) -> int:
        return int(self._has_next)

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
