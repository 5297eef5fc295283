"""A source's run on a loop: the task ``start()`` returns, and what ``stop()`` returns.

:class:`SourceRun` is an ``asyncio.Task`` that knows whether it is awaited,
so that a failure of the run is logged only when nobody awaits it (an
awaited run raises to its awaiter, and a log line would report it twice).
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from ..pending import ELEMENT_TASKS

__all__ = ["SourceRun"]


class SourceRun(asyncio.Task[None]):
    """The task of a source running on a loop (what ``start()`` returns there).

    An ``asyncio.Task`` in every way, except that a notebook cell ending in
    ``source.start()`` shows nothing rather than ``<Task pending ...>``, and
    that it knows whether it was awaited (:attr:`awaited`).
    """

    #: Whether some code awaited this run (``await source.start()``, or the
    #: awaitable of ``stop()``): its failure then reaches that code.
    awaited = False

    def __await__(self) -> Any:
        self.awaited = True
        return super().__await__()

    def _ipython_display_(self, **kwargs: Any) -> None:
        """Display nothing: the run is shown by the views of the stream."""


#: The run whose element the current code works for: the run's task, and the
#: tasks the library starts for its elements (each branch's coroutine sink), which
#: copy its context (so do a sink's own tasks, which are not the run's: see
#: streams.pending.ELEMENT_TASKS).
_RUN: contextvars.ContextVar[asyncio.Task[None] | None] = contextvars.ContextVar(
    "streams_source_run", default=None)


class _RunEnd:
    """What ``stop()`` returns on a loop: awaiting it waits for the run to end."""

    __slots__ = ("_task",)

    def __init__(self, task: asyncio.Task[None]) -> None:
        self._task = task

    def __await__(self) -> Any:
        current = asyncio.current_task()
        if current is self._task or (_RUN.get() is self._task and current in ELEMENT_TASKS):
            return None  # called by the run's own graph: it ends after this element
        try:
            return (yield from self._task.__await__())
        except asyncio.CancelledError:
            # The run was cancelled (an interrupt): it has ended, as stop() asks; a
            # cancellation of the task awaiting this goes on.
            if self._task.cancelled() and not (current is not None and current.cancelling()):
                return None
            raise

    def _ipython_display_(self, **kwargs: Any) -> None:
        """Display nothing (a cell ending in ``source.stop()``)."""
