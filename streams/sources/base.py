"""The base of every source: a node with ``start()`` and ``stop()``."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from ..clock import run_sync
from ..core import Stream

__all__ = ["Source", "listen", "require_loop"]


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


class Source(Stream[Any]):
    """A node that produces elements itself once started.

    With no running loop, ``start()`` produces everything synchronously and
    closes the stream at the end. With a loop running (a Tornado service,
    Jupyter), it schedules production on that loop and returns the task,
    which finishes when the source is exhausted or stopped; each element is
    awaited through the graph before the next one, so a slow sink slows the
    producer (backpressure).
    """

    # _checkpointer: the streams.state.Checkpointer told of each finished
    # element (None when the pipeline is not checkpointed).
    __slots__ = ("_checkpointer", "_task", "started", "stopped")
    #: Whether the source keeps an offset it can resume from (a checkpoint
    #: of its pipeline is possible); servers and timers cannot.
    _replayable: ClassVar[bool] = False
    #: Whether the source produces on a loop only (a timer, a server): with
    #: none running, ``start()`` runs it on the shared loop thread, as
    #: streamz does (issue 15; streams.loop_thread).
    _needs_loop: ClassVar[bool] = False
    _graphviz_shape = "doubleoctagon"

    def __init__(self, start: bool = False, **kwargs: Any) -> None:
        self.started = False
        self.stopped = True
        self._checkpointer: Any = None
        self._task: asyncio.Task[None] | None = None
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

    def start(self) -> Any:
        """Start producing; see the class description for what it returns."""
        if self.started and not self.stopped:
            return self._task
        self.started, self.stopped = True, False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if self._needs_loop:
                from ..loop_thread import io_loop, start_task

                if self.loop is None:  # a loop= given by the user is honoured
                    self.loop = io_loop()
                self._task = start_task(self._run_async(), self.loop)  # type: ignore[assignment]
                return self._task
            try:
                self._run_sync()
            finally:
                self.stopped = True  # also after a failure: start() may be called again
            return None
        self._task = loop.create_task(self._run_async())
        return self._task

    def stop(self) -> None:
        """Stop producing after the element in progress; the stream stays open."""
        self.stopped = True

    def _run_sync(self) -> None:
        raise NotImplementedError

    def _element_done_sync(self, pending: Any) -> None:
        """Finish an element's pending work, then offer a checkpoint.

        Between two elements nothing is half-processed, so a checkpoint
        taken here is consistent.
        """
        if pending is not None:
            run_sync(pending)
        ckpt = self._checkpointer
        if ckpt is not None and (pending := ckpt.step()) is not None:
            run_sync(pending)

    def _end_sync(self) -> None:
        """The source is exhausted: close the stream, then the last checkpoint."""
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
        raise NotImplementedError
