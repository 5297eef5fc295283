"""Emission from callbacks nobody awaits: timers and worker tasks.

An operator that emits from a timer (``timed_window``, ``delay``) or from a
task of its own (``buffer``, ``latest``, ``map_async``) has no caller to hand
the pending downstream work to. :class:`Outbox` keeps that work as the
node's *in-flight* task, chains later emissions behind it so downstream sees
them in order, and lets ``update`` return it so producers wait for a slow
downstream (backpressure). Work started when an element arrives is in
flight too, so a timer never sends past it. A failure of work sent from a
timer is logged naming the node and raised again when the node closes:
nothing fails silently.

Timers go through :func:`arm`, which returns None when no loop can run them
(the loop's clock with no running loop): operators then rely on the checks
they make when elements arrive, and on ``close()``.

The in-flight task may belong to another loop than the one waiting for it
(a timer on the loop thread, a synchronous ``emit`` on a private loop):
:func:`~streams.pending.until_done` waits across threads. With no loop
running, the work an element leaves pending is run by the synchronous
caller once the node has let go of its lock: a :class:`_Claim` marks it in
flight meanwhile, so that a timer on the loop thread queues behind it
instead of sending the next element past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..clock import Clock, Handle, LoopClock, run_sync
from ..errors import NodeError
from ..metadata import release_refs, retain_refs
from ..pending import gather_pending, until_done

if TYPE_CHECKING:
    from ..core import Stream

__all__ = ["EPSILON", "Outbox", "arm", "being_cancelled", "downstream_cancelled", "running_loop"]

logger = logging.getLogger("streams")

#: Timers may fire up to the loop's clock resolution early, and float sums
#: round: a deadline within this many seconds counts as reached.
EPSILON = 1e-9


def _on_private_loop() -> bool:
    from ..clock import private_loop

    loop = running_loop()
    return loop is not None and loop is private_loop()


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


def armed_here(timer: Handle | None) -> bool:
    """Whether a node's processing-time ``timer`` will fire where its elements run.

    None is not; nor is a timer of an event loop since closed (a pipeline
    built under one ``asyncio.run()``, fed under the next: the timer went
    with the old loop). An asynchronous node built with no loop running
    arms none (:func:`arm_for`): its first element arms it on its loop.
    """
    if timer is None:
        return False
    loop = getattr(timer, "_loop", None)  # an asyncio TimerHandle's
    return loop is None or not loop.is_closed()


def arm_for(node: Stream[Any], clock: Clock, when: float,
            callback: Callable[[float], Any]) -> Handle | None:
    """:func:`arm` for ``node``, unless it is asynchronous and no loop runs here.

    An asynchronous stream's elements run on its loop: a timer on the shared
    loop thread (where :class:`~streams.clock.LoopClock` puts one armed with
    no loop running) would send its windows from another thread, into
    coroutines and queues of that loop. None then: the first element arms it.
    """
    if node.asynchronous and isinstance(clock, LoopClock) and running_loop() is None:
        return None
    return arm(clock, when, callback)


def being_cancelled() -> bool:
    """Whether the running task itself is being cancelled.

    A ``CancelledError`` that reaches a worker from a coroutine it awaited
    (a sink whose request was cancelled) is that element's failure; one
    from the worker's own cancellation must propagate.

    >>> import asyncio
    >>> async def main():
    ...     return being_cancelled()
    >>> asyncio.run(main())
    False
    """
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no loop running: no task to cancel
        return False
    return task is not None and task.cancelling() > 0


def downstream_cancelled(node: Stream[Any], x: Any, exc: asyncio.CancelledError) -> Exception:
    """The failure of ``x``'s work at ``node`` when a coroutine it awaited ended cancelled.

    Kept as a CancelledError it would pass for the cancellation of whoever
    awaits the work (a producer, ``aclose()``) and stop them; as an error
    naming the node and the element it is reported like any other failure.
    Raises ``exc`` when the running task is itself being cancelled (see
    :func:`being_cancelled`): that cancellation must go on.

    >>> import asyncio
    >>> from streams import Stream
    >>> error = downstream_cancelled(Stream(stream_name="s"), 1, asyncio.CancelledError("gone"))
    >>> print(error)
    stream 's' failed on element 1: CancelledError: gone
    """
    if being_cancelled():
        raise exc
    return NodeError(node, x, exc)


class _Claim:
    """Work left pending with no loop running: in flight until its caller has run it.

    Its caller, a synchronous ``emit``, runs it once the node has let go of
    its lock, on its own private loop; a timer on the loop thread waits for
    it meanwhile (:func:`_wait_for`). Not an asyncio Future, which belongs
    to one loop: it is finished in one thread and waited for in another.
    """

    __slots__ = ("__weakref__", "_callbacks", "_done", "_lock", "_watch", "then", "thread")

    def __init__(self) -> None:
        self._done = False
        self._callbacks: list[Callable[[], Any]] = []
        self._lock = threading.Lock()
        self._watch: weakref.ref[Any] | None = None
        self.thread = threading.get_ident()
        # Timer emissions that came in this same thread while the work waited
        # for it to run (a virtual clock advanced inside an emit): waiting for
        # the work there would never end, so they run after it.
        self.then: list[Awaitable[None]] = []

    def done(self) -> bool:
        return self._done

    def finish(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_finish(self, callback: Callable[[], Any]) -> bool:
        """Call ``callback()`` once finished (in the finishing thread); False if it is."""
        with self._lock:
            if self._done:
                return False
            self._callbacks.append(callback)
            return True

    def watch(self, work: Any) -> None:
        """Finish when ``work`` is gone, whether it ran or not.

        Dropped unrun (its caller raised before running it), it must not
        hold up every later element. The callback holds the claim weakly:
        a claim holding its own watcher strongly would be a reference
        cycle, left for the garbage collector, per element.
        """
        self._watch = weakref.ref(work, functools.partial(_abandon, weakref.ref(self)))


def _abandon(claim_ref: weakref.ref[_Claim], _: Any) -> None:
    claim = claim_ref()
    if claim is not None and not claim.done():
        claim.then.clear()  # each dropped one finishes its own claim
        claim.finish()


def _wait_for(work: asyncio.Future[Any] | _Claim) -> Awaitable[None]:
    """An awaitable for the work in flight, which never raises its failure.

    Whoever owns the work reports its failure (see :func:`until_done`).
    """
    if isinstance(work, asyncio.Future):
        return until_done(work)
    return _claimed_done(work)


async def _claimed_done(claim: _Claim) -> None:
    loop = asyncio.get_running_loop()
    woken = loop.create_future()

    def wake() -> None:
        if not woken.done():  # a waiter cancelled has stopped waiting
            woken.set_result(None)

    def finished() -> None:  # in the thread that finished the claim
        with contextlib.suppress(RuntimeError):  # the waiting loop is closed
            loop.call_soon_threadsafe(wake)

    if claim.on_finish(finished):
        await woken


class Outbox:
    """Ordered emission for ``node`` from callbacks; see the module docstring."""

    __slots__ = ("error", "inflight", "node")

    def __init__(self, node: Stream[Any]) -> None:
        self.node = node
        self.inflight: asyncio.Future[Any] | _Claim | None = None
        # The first failure of work sent from a timer, raised when the node
        # closes (nobody awaited that work to hear of it).
        self.error: BaseException | None = None

    def _busy(self) -> asyncio.Future[Any] | _Claim | None:
        """The work in flight, None when there is none or it is done.

        Called holding the node's lock (or with one thread only): done work
        is cleared here, not by a done-callback on the loop that ran it,
        which would race with another thread putting the next in flight.
        """
        inflight = self.inflight
        if inflight is not None and inflight.done():
            self.inflight = inflight = None
        return inflight

    def emit(self, x: Any, metadata: Any = None) -> Any:
        """Emit ``x`` now, or behind the work in flight; return what is pending.

        Work left pending becomes the in-flight work, so that a timer sends
        the next element behind it; its failure goes to the caller, who
        awaits what this returns. With no loop running, the caller (a
        synchronous ``emit``) runs it once the node let go of its lock: it
        is in flight until then, and an element behind other work is put
        off to it too rather than waited for here, holding the lock. The
        caller may release ``metadata``'s refs when this returns: an
        emission put off holds refs of its own until it is done.
        """
        previous = self._busy()
        if previous is not None:
            if running_loop() is None:
                return self._claimed(self._after(previous, x, metadata))
            return self._start(self._after(previous, x, metadata), report=False)
        pending = self.node._emit(x) if metadata is None else self.node._emit(x, metadata)
        if pending is None:
            return None
        if running_loop() is None:
            return self._claimed(self._settle(pending, x))
        return self._start(self._settle(pending, x), report=False)

    def send(self, x: Any, metadata: Any = None) -> None:
        """Emit ``x`` from a callback: pending work becomes the in-flight task.

        Nobody called the timer to hear of a failure: it is logged on the
        library's logger (as streamz does) and raised when the node closes;
        the node keeps going.
        """
        previous = self._busy()
        if previous is not None:
            work = self._after(previous, x, metadata)
            if (isinstance(previous, _Claim) and previous.thread == threading.get_ident()
                    and running_loop() is None):
                # This thread runs that work once back in its caller: waiting
                # for it here would never end. x goes right after it.
                previous.then.append(self._reported(self._claimed(work)))
                return
            self._start(work, report=True)
            return
        try:
            pending = self.node._emit(x) if metadata is None else self.node._emit(x, metadata)
        except Exception as e:
            self._failed(e)
            return
        if pending is not None:
            self._start(self._settle(pending, x), report=True)

    def send_window(self, window: Any, metadata: Any = None) -> None:
        """:meth:`send` a window from a timer; an empty one is skipped while work is in flight.

        Queued behind a window downstream is still busy with, empty windows
        come due faster than a slow sink takes them, and a producer waiting
        on :meth:`wait` would wait without bound: they are dropped instead,
        as streamz skips its ticks while it waits. Windows that hold
        elements are all sent.
        """
        if not window and self._busy() is not None:
            return
        self.send(window, metadata)

    def wait(self) -> Awaitable[None] | None:
        """An awaitable for the work in flight, or None if there is none.

        Once the node is closed (called from its ``_flush``), the awaitable
        also raises the first failure of the work sent from timers.
        """
        if self.inflight is None and self.error is None:
            return None  # the usual case, per element: nothing to wait for
        busy = self._busy()
        if self.node._closed and (busy is not None or self.error is not None):
            return self._drained()
        return None if busy is None else _wait_for(busy)

    async def _drained(self) -> None:
        # Not _busy(): this runs without the node's lock.
        while (busy := self.inflight) is not None and not busy.done():
            await _wait_for(busy)
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def _after(self, previous: asyncio.Future[Any] | _Claim, x: Any,
               metadata: Any = None) -> Any:
        if metadata is None:
            return self._emit_after(previous, x)
        retain_refs(metadata)  # released once emitted, whatever the caller does
        return self._emit_after(previous, x, metadata)

    async def _emit_after(self, previous: asyncio.Future[Any] | _Claim, x: Any,
                          metadata: Any = None) -> None:
        try:
            await _wait_for(previous)
        except BaseException:
            release_refs(metadata)
            raise
        try:
            pending = self.node._emit(x) if metadata is None else self.node._emit(x, metadata)
        finally:
            release_refs(metadata)
        if pending is not None:
            await self._settle(pending, x)

    async def _settle(self, pending: Any, x: Any) -> None:
        if isinstance(pending, list):  # a streamz-style update's
            pending = gather_pending(pending)
            if pending is None:
                return
        try:
            await pending
        except asyncio.CancelledError as e:
            raise downstream_cancelled(self.node, x, e) from e

    def _claimed(self, work: Awaitable[None]) -> Awaitable[None]:
        """``work``, which the synchronous caller runs, put in flight until it has."""
        claim = _Claim()
        self.inflight = claim
        run = self._run_claimed(work, claim)
        claim.watch(run)
        return run

    async def _run_claimed(self, work: Awaitable[None], claim: _Claim) -> None:
        try:
            await work
        finally:
            claim.finish()
            then, claim.then = claim.then, []
            for later in then:
                await later  # reports its own failure

    async def _reported(self, work: Awaitable[None]) -> None:
        """``work`` sent from a timer: its failure is this node's to report."""
        try:
            await work
        except Exception as e:
            self._failed(e)

    def _start(self, coro: Any, report: bool) -> Any:
        """Run ``coro`` as the in-flight task; with no loop, to its end now.

        ``report``: whether its failure is this node's to report (work sent
        from a timer), else the caller's, who awaits what this returns.
        """
        loop = running_loop()
        if loop is None:
            # No loop (a virtual clock advanced by hand): finish now.
            if not report:
                run_sync(coro)
                return None
            try:
                run_sync(coro)
            except Exception as e:
                self._failed(e)
            return None
        task = loop.create_task(coro)
        self.inflight = task
        if report:
            task.add_done_callback(self._done_reported)
        return task

    def _done_reported(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        logger.error("%s: emitting downstream failed", self.node._label(), exc_info=exc)
        if self.error is None:
            self.error = exc
