"""The base of every source: a node with ``start()`` and ``stop()``."""

from __future__ import annotations

import asyncio
from typing import Any

from ..core import Stream

__all__ = ["Source"]


class Source(Stream[Any]):
    """A node that produces elements itself once started.

    With no running loop, ``start()`` produces everything synchronously and
    closes the stream at the end. With a loop running (a Tornado service,
    Jupyter), it schedules production on that loop and returns the task,
    which finishes when the source is exhausted or stopped; each element is
    awaited through the graph before the next one, so a slow sink slows the
    producer (backpressure).
    """

    __slots__ = ("_task", "started", "stopped")
    _graphviz_shape = "doubleoctagon"

    def __init__(self, start: bool = False, **kwargs: Any) -> None:
        self.started = False
        self.stopped = True
        self._task: asyncio.Task[None] | None = None
        Stream.__init__(self, **kwargs)
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

    async def _run_async(self) -> None:
        raise NotImplementedError
