"""Time for the stream graph: the loop's clock, and a virtual clock for tests.

Time-based operators never call ``time.monotonic()``, ``loop.call_later`` or
``asyncio.sleep`` themselves: they ask the current :class:`Clock`. Real runs
use :class:`LoopClock` (the running asyncio loop, which is also Tornado 6's
IOLoop); tests install a :class:`VirtualClock`, which moves only when the
test advances it, so timed behaviour is exact and instant to test.

Examples
--------
>>> clock = VirtualClock()
>>> fired = []
>>> _ = clock.call_later(1.5, fired.append, "tick")
>>> clock.advance(1.0); fired
[]
>>> clock.advance(0.5); fired
['tick']
>>> clock.now()
1.5
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

__all__ = [
    "Clock",
    "Handle",
    "LoopClock",
    "VirtualClock",
    "get_clock",
    "private_loop",
    "run_sync",
    "use_clock",
]


class Handle(Protocol):
    """A scheduled callback that can be cancelled."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """What time-based operators need from time."""

    def now(self) -> float:
        """The current time in seconds (monotonic)."""
        ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Handle:
        """Run ``callback(*args)`` after ``delay`` seconds."""
        ...

    def sleep(self, delay: float) -> Awaitable[None]:
        """An awaitable that resolves after ``delay`` seconds."""
        ...


class LoopClock:
    """The running asyncio loop's clock (Tornado's too).

    Without a running loop, ``now()`` still works (monotonic time, the clock
    asyncio loops read) and ``call_later`` runs the callback on the shared
    loop thread (:mod:`streams.loop_thread`), as streamz does.
    """

    def now(self) -> float:
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            return time.monotonic()

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Handle:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # No loop here: as streamz, run the timer on the shared loop thread
            # (started now if it is the first; see streams.loop_thread).
            return _ThreadTimer(delay, callback, args)
        return loop.call_later(delay, callback, *args)

    def sleep(self, delay: float) -> Awaitable[None]:
        return asyncio.sleep(delay)


class _ThreadTimer:
    """A timer on the loop thread, armed and cancelled from any thread."""

    __slots__ = ("_handle", "_loop", "cancelled")

    def __init__(self, delay: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        from .loop_thread import loop_thread

        self.cancelled = False
        self._handle: asyncio.TimerHandle | None = None
        self._loop = loop_thread()

        def arm() -> None:
            if not self.cancelled:
                self._handle = self._loop.call_later(delay, callback, *args)

        self._loop.call_soon_threadsafe(arm)

    def cancel(self) -> None:
        self.cancelled = True
        handle = self._handle
        if handle is not None:
            self._loop.call_soon_threadsafe(handle.cancel)


class _VirtualHandle:
    __slots__ = ("args", "callback", "cancelled", "seq", "when")

    def __init__(self, when: float, seq: int, callback: Callable[..., Any],
                 args: tuple[Any, ...]) -> None:
        self.when, self.seq, self.callback, self.args = when, seq, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: _VirtualHandle) -> bool:
        return (self.when, self.seq) < (other.when, other.seq)


class VirtualClock:
    """A clock that moves only when told to: exact, instant timing tests.

    ``advance(dt)`` runs every callback due within ``dt``, in time order,
    each seeing ``now()`` equal to its due time. In async code use ``await
    clock.advance_async(dt)``, which also lets the tasks woken by
    ``sleep`` run before moving further.

    Parameters
    ----------
    start : float
        The initial time.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._queue: list[_VirtualHandle] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Handle:
        h = _VirtualHandle(self._now + max(delay, 0.0), next(self._seq), callback, args)
        heapq.heappush(self._queue, h)
        return h

    def sleep(self, delay: float) -> Awaitable[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        self.call_later(delay, wake)
        return fut

    def _pop_due(self, until: float) -> _VirtualHandle | None:
        while self._queue and self._queue[0].when <= until:
            h = heapq.heappop(self._queue)
            if not h.cancelled:
                return h
        return None

    def advance(self, dt: float) -> None:
        """Move time forward by ``dt``, running the callbacks that fall due."""
        if dt < 0:
            raise ValueError("VirtualClock.advance(): time does not go backwards")
        until = self._now + dt
        while (h := self._pop_due(until)) is not None:
            self._now = max(self._now, h.when)
            h.callback(*h.args)
        self._now = until

    async def advance_async(self, dt: float) -> None:
        """Like :meth:`advance`, letting woken tasks run at each step."""
        if dt < 0:
            raise ValueError("VirtualClock.advance_async(): time does not go backwards")
        until = self._now + dt
        await _settle_loop()
        while (h := self._pop_due(until)) is not None:
            self._now = max(self._now, h.when)
            h.callback(*h.args)
            await _settle_loop()
        self._now = until

    @property
    def pending(self) -> int:
        """How many callbacks are scheduled and not cancelled."""
        return sum(not h.cancelled for h in self._queue)


async def _settle_loop(rounds: int = 20) -> None:
    # Several zero-sleeps: a woken task may wake another, which may schedule
    # the next timer; twenty rounds covers the chains operators build.
    for _ in range(rounds):
        await asyncio.sleep(0)


_default_clock = LoopClock()
_current: contextvars.ContextVar[Clock] = contextvars.ContextVar("streams_clock")


def get_clock() -> Clock:
    """The clock in force: the one installed by :func:`use_clock`, else the loop's."""
    return _current.get(_default_clock)


@contextlib.contextmanager
def use_clock(clock: Clock) -> Iterator[Clock]:
    """Install ``clock`` for the nodes created and run within the block.

    Examples
    --------
    >>> with use_clock(VirtualClock(start=10.0)) as clock:
    ...     get_clock().now()
    10.0
    """
    token = _current.set(clock)
    try:
        yield clock
    finally:
        _current.reset(token)


class _ThreadLoop:
    """A thread's private loop, closed when the thread ends.

    Kept in a ``threading.local``: when the thread ends, its entry goes, this
    holder with it, and the finalizer closes the loop (its selector's file
    descriptors would leak otherwise, one set per thread that ever emitted).
    The main thread's is closed at exit. Closing does not run the loop
    again: a task an operator left on it (none is left once ``run_sync``
    returns, unless a step never finishes) goes unfinished, as it would have
    on a loop kept for the process.
    """

    __slots__ = ("__weakref__", "loop")

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        # The finalizer holds the loop, never the holder: it would keep it alive.
        closing = weakref.finalize(self, self.loop.close)
        # At exit, only the main thread's: a daemon thread still alive then
        # may be running its loop, and closing a running loop raises.
        closing.atexit = threading.current_thread() is threading.main_thread()


_thread_loops = threading.local()


def private_loop() -> asyncio.AbstractEventLoop | None:
    """This thread's private loop (:func:`run_sync`), or None if it has none yet."""
    holder: _ThreadLoop | None = getattr(_thread_loops, "holder", None)
    return None if holder is None else holder.loop


def run_sync(pending: Awaitable[Any]) -> None:
    """Run pending work to completion when no loop is running.

    Used by a synchronous ``emit`` whose graph has coroutine steps: with no
    running loop there is nothing to hand the work to, so it runs here, on a
    private loop of the calling thread, before ``emit`` returns. One loop per
    thread: two threads each feeding their own pipeline each run their own
    (a loop runs in one thread at a time). A thread's loop is kept while the
    thread lives, and closed when it ends.
    """
    holder: _ThreadLoop | None = getattr(_thread_loops, "holder", None)
    if holder is None or holder.loop.is_closed():
        holder = _thread_loops.holder = _ThreadLoop()
    holder.loop.run_until_complete(_as_coroutine(pending))


async def _as_coroutine(pending: Awaitable[Any]) -> None:
    await pending
