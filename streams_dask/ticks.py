"""Time for ``timed_window`` on a Dask segment: the client keeps the clock.

The timing is the core's (:mod:`streams.window_clock`, shared with the
Spark backend); here a tick travels to the workers as a
:class:`~streams_dask.worker.Tick` among the elements of a batch, at the
place the window closes, and the worker's window emits what it holds when
the tick reaches it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streams import window_clock
from streams.operators._outbox import running_loop

from .worker import Tick

if TYPE_CHECKING:
    from .async_driver import AsyncDriver
    from .runner import Runner

__all__ = ["TimedWindows", "WindowClock"]

logger = logging.getLogger("streams")


class WindowClock(window_clock.WindowClock):
    """The core's :class:`~streams.window_clock.WindowClock`, ticking with :class:`Tick`.

    Its timers take no ticks: they call ``on_due()``, and the thread that
    sends the elements takes them with :meth:`due` (see :class:`TimedWindows`),
    so that each goes before the elements that arrive after it, whatever
    thread the timer runs on.

    Examples
    --------
    >>> from streams import Stream, VirtualClock, use_clock
    >>> with use_clock(VirtualClock()) as clock:
    ...     ticks = WindowClock(lambda: print("due"))
    ...     ticks.add(Stream().timed_window(1.0))
    >>> clock.advance(2.5)
    due
    due
    >>> out = []
    >>> ticks.due(out)
    >>> out
    [Tick(node_id=...), Tick(node_id=...)]
    """

    def __init__(self, on_due: Callable[[], None]) -> None:
        super().__init__(self._ticks_not_taken)
        self.on_due = on_due

    @staticmethod
    def _ticks_not_taken(ids: list[int]) -> None:
        raise AssertionError("this clock's timers take no ticks")  # pragma: no cover

    def _fire(self, i: int) -> None:
        self.timers[i] = None
        if self.stopped:
            return
        self._arm(i, self.windows[i].upcoming())  # the ticks that came are left in place
        self.on_due()

    def due(self, out: list[Any]) -> None:
        """Put the ticks that are due into ``out`` (before the next element)."""
        ids: list[int] = []
        super().due(ids)
        out.extend(Tick(i) for i in ids)


class TimedWindows:
    """Where a Dask segment's processing-time windows tick (the entry node's part).

    A tick must go before every element that arrives after its time, so it
    is taken (:meth:`WindowClock.due`) only by the thread that sends the
    elements, where it sends them: on an asynchronous stream's loop, and,
    for a synchronous stream, by whichever thread holds the runner's lock
    (the producer takes them before each element). A timer, which may run
    on another thread (a synchronous stream's timers run on the shared loop
    thread), only asks for that: on the loop, with ``call_soon_threadsafe``;
    for a synchronous runner, it takes them itself if no thread holds the
    lock, and never waits for it, as the holder may be waiting for the loop
    thread; the holder then takes them when it lets go (``after_release``).
    A plain ``scatter()`` (no batching: each ``emit`` waits for its
    element's results) delivers a tick's results as an ``emit`` would:
    the timer waits for them, else a window closed while the producer is
    quiet would come out only with its next element.
    Before the runner starts, the first element or the close takes them.
    """

    __slots__ = ()
    asynchronous: bool
    _on_loop: bool
    _overlap: bool
    flush: Callable[[], Any]
    _label: Callable[[], str]
    _driver: AsyncDriver | None
    _runner: Runner | None
    _ticks: WindowClock | None

    def _on_due(self) -> None:
        """A timer: ticks are due. Have them taken where the elements are sent."""
        driver = self._driver
        if driver is not None:
            if running_loop() is driver.loop:
                self._take_due_on_loop()
            elif not driver.loop.is_closed():
                driver.loop.call_soon_threadsafe(self._take_due_on_loop)
        elif self._runner is not None and not (self.asynchronous or self._on_loop):
            self._take_due(self._runner)

    def _take_due(self, runner: Runner) -> None:
        """A synchronous runner's due ticks, sent on unless another thread holds it."""
        ticks = self._ticks
        if ticks is None or runner.closed or not runner.lock.acquire_if_free():
            return  # (the holder sends them as it lets go: after_release)
        try:
            if self._overlap:
                ticks.due(runner.pending)
                runner.pump()  # delivered as they finish (deliver_as_done)
            else:  # plain scatter(): results are delivered by whoever sends, here the timer
                try:
                    self.flush()
                except Exception as e:
                    # No caller here (the loop's callback would only log it):
                    # the producer's next emit, or the close, raises it first.
                    logger.error("%s: a window its timer closed failed downstream: %s",
                                 self._label(), e)
                    runner.background_errors.insert(0, e)
        finally:
            runner.lock.release(settle=False)

    def _take_ticks(self, pending: list[Any]) -> None:
        """The due ticks into ``pending``, by the thread holding the runner's lock."""
        if self._ticks is not None:
            self._ticks.due(pending)

    def _after_release(self) -> None:
        """The runner's lock let go: send the ticks a timer could not (it found it held)."""
        if self._runner is not None:
            self._take_due(self._runner)

    def _take_due_on_loop(self) -> None:
        driver = self._driver
        if driver is None or driver.runner.closed or self._ticks is None:
            return
        self._ticks.due(driver.runner.pending)
        driver.runner.pump()
        driver.kick()

    def _ticks_came(self) -> bool:
        """Whether a window's closing tick came before the runner started (at the close)."""
        return self._ticks is not None and self._ticks.closing()

    def _last_ticks(self, pending: list[Any] | None) -> None:
        """At the close: the ticks due into ``pending`` (if the runner started), no timer more."""
        if self._ticks is not None:
            if pending is not None:
                self._ticks.due(pending)
            self._ticks.stop()
