"""Emission from callbacks nobody awaits: timers and worker tasks.

An operator that emits from a timer (``timed_window``, ``delay``) or from a
task of its own (``buffer``, ``latest``, ``map_async``) has no caller to hand
the pending downstream work to. :class:`Outbox` keeps that work as the
node's *in-flight* task, chains later emissions behind it so downstream sees
them in order, and lets ``update`` return it so producers wait for a slow
downstream (backpressure). Failures are logged naming the node: nothing
fails silently.

Timers go through :func:`arm`, which returns None when no loop can run them
(the loop's clock with no running loop): operators then rely on the checks
they make when elements arrive, and on ``close()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..clock import Clock, Handle, LoopClock, run_sync
from ..metadata import release_refs, retain_refs

if TYPE_CHECKING:
    from ..core import Stream

__all__ = ["EPSILON", "Outbox", "arm", "running_loop"]

logger = logging.getLogger("streams")

#: Timers may fire up to the loop's clock resolution early, and float sums
#: round: a deadline within this many seconds counts as reached.
EPSILON = 1e-9


def _on_private_loop() -> bool:
    from .. import clock

    loop = running_loop()
    return loop is not None and loop is clock._private_loop


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop running in this thread, or None."""
    # asyncio's own lookup that returns None instead of raising: an
    # exception per element would cost more than the operators' work.
    return asyncio._get_running_loop()


def arm(clock: Clock, when: float, callback: Callable[[float], Any]) -> Handle | None:
    """Call ``callback(when)`` at time ``when``; None if nothing can run timers.

    The callback receives the time it was due: it should treat that time as
    reached even if the clock reads a hair earlier (timers fire up to the
    clock's resolution early, and virtual time summed from float steps
    rounds: 0.1 added ten times is 0.9999999999999999).
    """
    if isinstance(clock, LoopClock) and _on_private_loop():
        # The private loop of a synchronous emit stops as soon as that emit's
        # work is done: a timer there would never fire. Arrival checks and
        # close() emit instead, and a later real loop re-arms the timer.
        return None
    try:
        return clock.call_later(max(when - clock.now() - EPSILON, 0.0), callback, when)
    except RuntimeError:
        return None


async def _quietly(task: asyncio.Future[Any]) -> None:
    # Waiting must not re-raise the task's failure in every producer: the
    # failure is logged once, by Outbox._done.
    if not task.done():
        await asyncio.wait((task,))


async def _await(pending: Awaitable[Any]) -> None:
    await pending


class Outbox:
    """Ordered emission for ``node`` from callbacks; see the module docstring."""

    __slots__ = ("inflight", "node")

    def __init__(self, node: Stream[Any]) -> None:
        self.node = node
        self.inflight: asyncio.Future[Any] | None = None

    def emit(self, x: Any, metadata: Any = None) -> Any:
        """Emit ``x`` now, or behind the work in flight; return what is pending.

        The caller may release ``metadata``'s refs when this returns: an
        emission put off holds refs of its own until it is done.
        """
        if self.inflight is None:
            return self.node._emit(x) if metadata is None else self.node._emit(x, metadata)
        self._start(self._after(self.inflight, x, metadata))
        return self.wait()

    def send(self, x: Any, metadata: Any = None) -> None:
        """Emit ``x`` from a callback: pending work becomes the in-flight task."""
        if self.inflight is not None:
            self._start(self._after(self.inflight, x, metadata))
            return
        try:
            pending = self.node._emit(x) if metadata is None else self.node._emit(x, metadata)
        except Exception:
            # Nobody called this timer or task to hear of the failure: log it on
            # the library's logger (as streamz does) and keep the node going.
            logger.exception("%s: emitting downstream failed", self.node._label())
            return
        if pending is not None:
            self._start(_await(pending))

    def send_window(self, window: Any, metadata: Any = None) -> None:
        """:meth:`send` a window from a timer; an empty one is skipped while work is in flight.

        Queued behind a window downstream is still busy with, empty windows
        come due faster than a slow sink takes them, and a producer waiting
        on :meth:`wait` would wait without bound: they are dropped instead,
        as streamz skips its ticks while it waits. Windows that hold
        elements are all sent.
        """
        if not window and self.inflight is not None:
            return
        self.send(window, metadata)

    def wait(self) -> Awaitable[None] | None:
        """An awaitable for the work in flight, or None if there is none."""
        return None if self.inflight is None else _quietly(self.inflight)

    def _after(self, previous: asyncio.Future[Any], x: Any, metadata: Any = None) -> Any:
        if metadata is None:
            return self._emit_after(previous, x)
        retain_refs(metadata)  # released once emitted, whatever the caller does
        return self._emit_after(previous, x, metadata)

    async def _emit_after(self, previous: asyncio.Future[Any], x: Any,
                          metadata: Any = None) -> None:
        await _quietly(previous)
        try:
            pending = self.node._emit(x) if metadata is None else self.node._emit(x, metadata)
        finally:
            release_refs(metadata)
        if pending is not None:
            await pending

    def _start(self, coro: Any) -> None:
        loop = running_loop()
        if loop is None:
            run_sync(coro)  # no loop (a virtual clock advanced by hand): finish now
            return
        task = loop.create_task(coro)
        self.inflight = task
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        if task is self.inflight:
            self.inflight = None
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.error("%s: emitting downstream failed", self.node._label(), exc_info=exc)
