"""Time for ``timed_window`` on a Dask segment: the client keeps the clock.

The timing is the core's (:mod:`streams.window_clock`, shared with the
Spark backend); here a tick travels to the workers as a
:class:`~streams_dask.worker.Tick` among the elements of a batch, at the
place the window closes, and the worker's window emits what it holds when
the tick reaches it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streams import window_clock
from streams.operators._outbox import running_loop

from .worker import Tick

if TYPE_CHECKING:
    from .async_driver import AsyncDriver
    from .runner import Runner

__all__ = ["TickInbox", "TimedWindows", "WindowClock"]


class WindowClock(window_clock.WindowClock):
    """The core's :class:`~streams.window_clock.WindowClock`, ticking with :class:`Tick`.

    Examples
    --------
    >>> from streams import Stream, VirtualClock, use_clock
    >>> with use_clock(VirtualClock()) as clock:
    ...     ticks = WindowClock(print)
    ...     ticks.add(Stream().timed_window(1.0))
    >>> out = []
    >>> clock.advance(2.5)
    [Tick(node_id=...)]
    [Tick(node_id=...)]
    >>> ticks.due(out)
    >>> len(out)
    0
    """

    def __init__(self, on_tick: Callable[[list[Any]], None]) -> None:
        super().__init__(lambda ids: on_tick([Tick(i) for i in ids]))

    def due(self, out: list[Any]) -> None:
        """Put the ticks that are due into ``out`` (before the next element)."""
        ids: list[int] = []
        super().due(ids)
        out.extend(Tick(i) for i in ids)


class TickInbox:
    """Ticks of a synchronous stream's timers, for the thread that drives its runner.

    A synchronous stream's timers run on the shared loop thread, while the
    producer (or distributed's callback thread) may be inside the runner:
    a tick added to its pending elements then could be cut off with a batch
    (or an element with it). So a timer leaves its ticks here and sends
    them only if no other thread holds the runner's lock; never waiting for
    it, since the holder may be waiting for the loop thread. Whoever holds
    the lock moves them first (:meth:`move`), and the producer looks again
    once it lets go (:meth:`send`): a tick left while it held the lock is
    left before the timer tries it, so the producer sees it.

    Examples
    --------
    >>> inbox = TickInbox()
    >>> inbox.ticks.extend(["t1", "t2"])
    >>> pending = ["x"]
    >>> inbox.move(pending)
    >>> pending
    ['x', 't1', 't2']
    """

    __slots__ = ("ticks",)

    def __init__(self) -> None:
        self.ticks: deque[Any] = deque()  # appended and popped thread-safely

    def move(self, pending: list[Any]) -> None:
        """Put the ticks left here into ``pending`` (its runner's lock held)."""
        ticks = self.ticks
        while ticks:
            pending.append(ticks.popleft())

    def send(self, runner: Runner) -> None:
        """Send the ticks left here on, unless another thread holds the runner."""
        while self.ticks and not runner.closed and runner.lock.acquire_if_free():
            try:
                self.move(runner.pending)
                runner.pump()
            finally:
                runner.lock.release_to_callbacks()


class TimedWindows:
    """Where the ticks of a Dask segment's processing-time windows go (the entry node's part).

    Each tick goes where the runner is driven: on the loop of an
    asynchronous stream's driver, or through a synchronous stream's
    :class:`TickInbox`.
    """

    __slots__ = ()
    asynchronous: bool
    _driver: AsyncDriver | None
    _early: list[Any]
    _inbox: TickInbox
    _runner: Runner | None

    def _on_ticks(self, ticks: list[Any]) -> None:
        """A window closed while no element arrived: send its tick on."""
        driver = self._driver
        if driver is None:
            if self.asynchronous and self._runner is None:
                self._early.extend(ticks)  # the loop's: before the elements queued after
                return
            self._inbox.ticks.extend(ticks)  # a synchronous stream's: see TickInbox
            if self._runner is not None:
                self._inbox.send(self._runner)
            return
        if running_loop() is not driver.loop:  # a timer armed on the shared loop thread
            driver.loop.call_soon_threadsafe(self._on_ticks, ticks)
            return
        if driver.runner.closed:
            return
        driver.runner.pending.extend(ticks)
        driver.runner.pump()
        driver.kick()
