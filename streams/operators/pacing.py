"""Operators that pace elements in time: delay, rate_limit.

As the windows of :mod:`streams.operators.timed`, they read time only from
the clock in force when the node is created (a virtual clock in tests), and
nothing they hold is dropped at close.

A node whose timer changes what it holds (``delay`` here, ``partition(n,
timeout=)``) keeps one thread at a time inside with a re-entrant lock: with
no loop running, its timer fires on the shared loop thread
(:mod:`streams.loop_thread`) while its producer emits from its own. Its
emissions happen under the lock too, so they stay in order. A thread
running a loop never waits for that lock (:func:`call_when_free`,
:func:`retry_when_free`): it would stop the loop, and the holder, a
synchronous ``emit``, may be waiting for work on that loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ..clock import Handle, LoopClock, get_clock
from ..core import Stream
from ..errors import short_repr
from ..metadata import emit_held, release_refs, retain_refs
from ..pending import gather_pending as _gather_pending
from ..pending import until_done
from ._outbox import (
    EPSILON,
    Outbox,
    arm,
    armed_here,
    being_cancelled,
    downstream_cancelled,
    running_loop,
)
from .durations import check_interval

__all__ = ["Delay", "RateLimit", "call_when_free", "locked_method", "locked_timer",
           "retry_when_free"]

logger = logging.getLogger("streams")


#: Seconds between a loop thread's tries of a lock another thread holds.
_RETRY = 0.001


def call_when_free(lock: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` holding ``lock``, a re-entrant lock another thread holds now.

    For an element arriving at a node (``fn`` its ``update``, which takes
    the lock again). A thread with no loop running waits its turn. A thread
    running a loop gets an awaitable instead, which takes the lock once it
    is free, runs ``fn`` and awaits what it returns: the element's producer
    awaits it, and sends its later elements behind it.

    >>> import asyncio, threading
    >>> lock = threading.RLock()
    >>> call_when_free(lock, lambda x: x + 1, 1)
    2
    >>> async def main():
    ...     return await call_when_free(lock, lambda x: None, 1)
    >>> asyncio.run(main())
    """
    if running_loop() is None:
        with lock:
            return fn(*args)
    return _when_free(lock, fn, args)


async def _when_free(lock: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    while not lock.acquire(False):
        # The holder, in another thread, goes on meanwhile, and other work on
        # this loop too; a millisecond, not a turn: the loop would spin, taking
        # the GIL from the very thread it waits for.
        await asyncio.sleep(_RETRY)
    try:
        pending = fn(*args)
    finally:
        lock.release()
    if pending is not None:
        await pending


def retry_when_free(lock: Any, fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)`` holding ``lock``, for a timer that found another thread holding it.

    On a loop, ``fn`` (the timer callback, which takes the lock again) is
    tried again on the loop's next turn rather than waited for; with no
    loop (a virtual clock advanced from another thread), it waits its turn.
    """
    loop = running_loop()
    if loop is not None:
        loop.call_later(_RETRY, fn, *args)  # not call_soon: see _when_free
        return
    with lock:
        fn(*args)


def locked_method(method: Callable[..., Any]) -> Callable[..., Any]:
    """A node's ``method``, run holding its lock (``node._lock``; None: run as is).

    For the calls off an element's path (``tick``, ``_flush``): a thread
    running a loop that finds the lock held gets an awaitable instead
    (:func:`call_when_free`). An ``update`` writes the same out in its body:
    the call this adds costs an element 5% (``benchmarks/timed_ops.py``).
    """
    @functools.wraps(method)
    def run(node: Any, *args: Any) -> Any:
        lock = node._lock
        if lock is None:
            return method(node, *args)
        if not lock.acquire(False):
            return call_when_free(lock, run, node, *args)
        try:
            return method(node, *args)
        finally:
            lock.release()
    return run


def locked_timer(body: Callable[[Any, float], None]) -> Callable[[Any, float], None]:
    """A node's timer callback, run holding its lock, and not at all once it is closed.

    ``body(node, due)`` runs with the node's ``_timer`` cleared; a timer that
    finds the lock held is retried (:func:`retry_when_free`). Flushed or
    destroyed, what the node held is not its to send.
    """
    def on_timer(node: Any, due: float) -> None:
        if not node._lock.acquire(False):
            retry_when_free(node._lock, node._on_timer, due)
            return
        try:
            if not node._closed:
                node._timer = None
                body(node, due)
        finally:
            node._lock.release()
    return on_timer


@Stream.register_api()
class Delay(Stream[Any]):
    """Emit every element ``interval`` seconds after it arrived, in order.

    ``await emit`` does not wait for the delay (the element is held, as in
    streamz), only for downstream work still running from earlier elements.
    With no loop running, held elements are emitted when a later element
    arrives after their time, and at close; close emits whatever is still
    held rather than dropping it. Its timer then fires on the shared loop
    thread (streams-loop) while the producer emits from its own: the node
    lets one thread in at a time, and the elements still go out in order.

    Examples
    --------
    >>> from streams import Stream, VirtualClock, use_clock
    >>> with use_clock(VirtualClock()) as clock:
    ...     source = Stream()
    ...     L = source.delay(2.0).sink_to_list()
    >>> source.emit("a"); clock.advance(1.0); source.emit("b")
    >>> clock.advance(1.0); L
    ['a']
    >>> clock.advance(1.0); L
    ['a', 'b']
    """

    __slots__ = ("_clock", "_held", "_lock", "_metadata", "_outbox", "_timer", "interval")
    _operator = "delay"
    _local_only = "time-based delivery is done in this process"
    _params = ("interval",)
    _state = ("_held",)
    _state_params = ()  # the held elements keep the time they had left
    _graphviz_shape = "octagon"

    def __init__(self, upstream: Stream[Any], interval: float | str, **kwargs: Any) -> None:
        self.interval = check_interval("delay", interval)
        self._clock = get_clock()
        self._held: deque[tuple[float, Any]] = deque()
        # streamz's metadata of the held elements (refs retained), in step
        # with _held; None until an element comes with metadata.
        self._metadata: deque[Any] | None = None
        self._timer: Handle | None = None
        self._outbox = Outbox(self)
        # Its timer may fire on the loop thread while its producer emits (see
        # the module docstring); held across emissions, which stay in order.
        self._lock = threading.RLock()
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if not self._lock.acquire(False):
            return call_when_free(self._lock, self.update, x, who, metadata)
        try:
            now = self._clock.now()
            pending = self._release(now, self._outbox.emit)
            if metadata is not None or self._metadata is not None:
                if self._metadata is None:  # the first metadata: earlier elements had none
                    self._metadata = deque([] for _ in self._held)
                retain_refs(metadata)
                self._metadata.append(metadata or [])
            self._held.append((now + self.interval, x))
            if not armed_here(self._timer):
                # None, or a timer of a loop since closed (fed under one
                # asyncio.run(), then under the next or with no loop): it
                # would never fire, and the elements would wait for the next.
                self._timer = arm(self._clock, self._held[0][0], self._on_timer)
            return pending if pending is not None else self._outbox.wait()
        finally:
            self._lock.release()

    def snapshot(self) -> dict[str, Any]:
        """The held elements with the time each has left to wait.

        A clock's readings mean nothing in another process: restored, each
        waits what it had left (the time the pipeline was down does not count).
        """
        with self._lock:
            now = self._clock.now()
            return {"_held": deque((due - now, x) for due, x in self._held), "relative": True}

    def restore(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._restore(state)

    def _restore(self, state: dict[str, Any]) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for ms in self._metadata or ():
            release_refs(ms)
        self._metadata = None
        held = state["_held"]
        if state.get("relative"):  # older snapshots hold this clock's due times
            now = self._clock.now()
            held = deque((now + left, x) for left, x in held)
        super().restore({"_held": held})
        if self._held:
            self._timer = arm(self._clock, self._held[0][0], self._on_timer)

    def _release(self, now: float, emit: Callable[..., Any]) -> Any:
        pending = []
        while self._held and self._held[0][0] <= now + EPSILON:
            x = self._held.popleft()[1]
            if self._metadata is None:
                pending.append(emit(x))
            else:
                pending.append(emit_held(emit, x, [self._metadata.popleft()]))
        return _gather_pending(pending)

    @locked_timer
    def _on_timer(self, due: float) -> None:
        self._release(max(self._clock.now(), due), self._outbox.send)
        if self._held:
            self._timer = arm(self._clock, self._held[0][0], self._on_timer)

    @locked_method
    def _flush(self) -> Any:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return _gather_pending([self._release(math.inf, self._outbox.emit),
                                self._outbox.wait()])


@Stream.register_api()
class RateLimit(Stream[Any]):
    """Let at most one element through per ``interval`` seconds.

    An element arriving too soon waits for its turn, and ``await emit``
    waits with it: that is the backpressure. A producer that stops waiting
    (its ``emit`` cancelled, a timeout) does not take its element back: it
    goes at its turn, as in streamz and as ``buffer`` does, and a failure
    nobody is left to hear of is raised at close. Close waits for every
    element still waiting for its turn. On the synchronous API with no loop
    running, ``emit`` blocks for the wait (on the loop's clock). streamz's
    metadata goes along, its refs held while the element waits.

    Elements leave in the order they came. streamz lets an element whose
    turn came while its producer blocked the loop pass one still waiting
    (emitted a, b, then d after blocking past both turns: a, d, b); here
    it goes after it.

    Examples
    --------
    >>> import asyncio
    >>> from streams import Stream, VirtualClock, use_clock
    >>> with use_clock(VirtualClock()) as clock:
    ...     source = Stream(asynchronous=True)
    ...     L = source.rate_limit(1.0).sink_to_list()
    >>> async def main():
    ...     await source.emit("a")
    ...     waiting = asyncio.ensure_future(source.emit("b"))
    ...     await clock.advance_async(0.5)
    ...     before = list(L)
    ...     await clock.advance_async(0.5)
    ...     await waiting
    ...     return before
    >>> asyncio.run(main()), L
    (['a'], ['a', 'b'])
    """

    __slots__ = ("_ahead", "_clock", "_error", "_next", "_turns", "interval")
    _operator = "rate_limit"
    _local_only = "time-based delivery is done in this process"
    _params = ("interval",)
    _graphviz_shape = "octagon"

    def __init__(self, upstream: Stream[Any], interval: float | str, **kwargs: Any) -> None:
        self.interval = check_interval("rate_limit", interval)
        self._clock = get_clock()
        self._next = -math.inf
        # The tasks of the elements waiting for their turn on a loop, and the
        # first failure of one whose producer had stopped waiting.
        self._turns: set[asyncio.Task[None]] = set()
        self._error: BaseException | None = None
        # Resolved once the last element to wait on a loop has gone: a later
        # one goes after it, even if its own turn has come (see _later).
        self._ahead: asyncio.Future[None] | None = None
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        now = self._clock.now()
        turn = self._next
        self._next = max(now, turn) + self.interval
        ahead = self._ahead
        due = now >= turn - EPSILON
        if due and (ahead is None or ahead.done()):
            return self._emit(x) if metadata is None else self._emit(x, metadata)
        loop = running_loop()
        if loop is None:
            if due:  # those waiting are on a loop of another thread: nothing to wait on here
                return self._emit(x) if metadata is None else self._emit(x, metadata)
            if not isinstance(self._clock, LoopClock):
                # Waiting on a virtual clock needs someone to advance it: with
                # no loop running nobody can, and the emit would hang forever.
                self._next = turn
                raise RuntimeError("rate_limit() on a virtual clock waits on a running loop: "
                                   "emit from async code and advance with advance_async()")
            retain_refs(metadata)  # released once emitted
            return self._later(turn, x, metadata)  # run by the synchronous emit
        if ahead is not None and (ahead.done() or ahead.get_loop() is not loop):
            ahead = None  # gone, or of a loop since ended: nothing to wait behind
        retain_refs(metadata)
        # The wait is a task of this node, not of the producer: cancelling
        # the producer's ``await emit`` must not take the element (and its
        # turn) away. The producer waits on ``done``.
        done: asyncio.Future[None] = loop.create_future()
        gone = self._ahead = loop.create_future()
        task = loop.create_task(self._turn(turn, x, metadata, done, ahead, gone))
        self._turns.add(task)
        task.add_done_callback(self._turns.discard)
        return done

    async def _later(self, turn: float, x: Any, metadata: Any,
                     ahead: asyncio.Future[None] | None = None,
                     gone: asyncio.Future[None] | None = None) -> None:
        """Emit ``x`` at time ``turn``, after the element ``ahead`` of it has gone.

        The wait is measured when the task runs, to ``turn``, not for the
        wait there was at arrival: a producer that blocks the loop between
        two emits starts the first task late, and a wait counted from then
        would let a later element wake first. An element whose turn came
        while the loop was blocked still waits for the one ahead, whose
        timer has not fired yet: streamz lets it pass (a, d, b where a, b,
        d were emitted); here they leave in the order they came. ``gone``
        is resolved once ``x`` has been emitted, or has failed to be.
        """
        try:
            try:
                wait = turn - self._clock.now()
                if wait > EPSILON:
                    await self._clock.sleep(wait)
                if ahead is not None and not ahead.done():
                    # Shielded: cancelling this task must not cancel the
                    # future the element behind this one waits for too.
                    await asyncio.shield(ahead)
            except BaseException:
                release_refs(metadata)
                raise
            pending = self._emit(x) if metadata is None else emit_held(self._emit, x, [metadata])
        finally:
            # Not on a loop since closed (a task destroyed unfinished): its
            # callbacks could not be scheduled, and nobody is left to wait.
            if gone is not None and not gone.done() and not gone.get_loop().is_closed():
                gone.set_result(None)
        if pending is not None:
            await pending

    async def _turn(self, turn: float, x: Any, metadata: Any, done: asyncio.Future[None],
                    ahead: asyncio.Future[None] | None, gone: asyncio.Future[None]) -> None:
        """Emit ``x`` at its turn (:meth:`_later`); tell its producer through ``done``."""
        try:
            await self._later(turn, x, metadata, ahead, gone)
        except asyncio.CancelledError as e:
            if being_cancelled():  # the loop is ending: tell the producer, and close
                done.cancel()
                self._failed(RuntimeError(f"{self._label()}: the work for element "
                                          f"{short_repr(x)} was cancelled before it finished"))
                raise
            error: BaseException = downstream_cancelled(self, x, e)
        except Exception as e:
            error = e
        else:
            if not done.done():
                done.set_result(None)
            return
        if done.done():  # its producer stopped waiting: nobody else hears of it
            self._failed(error)
        else:
            done.set_exception(error)

    def _failed(self, exc: BaseException) -> None:
        logger.error("%s: emitting downstream failed", self._label(), exc_info=exc)
        if self._error is None:
            self._error = exc

    def _flush(self) -> Any:
        if not self._turns and self._error is None:
            return None
        return self._drained()

    async def _drained(self) -> None:
        while self._turns:
            await until_done(next(iter(self._turns)))
        if self._error is not None:
            error, self._error = self._error, None
            raise error
