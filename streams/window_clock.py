"""When the processing-time windows of a remote segment close.

A ``timed_window`` on processing time closes at moments of the local clock,
which Dask workers and Spark executors cannot see. So the node that feeds a
remote segment reads the clock where an in-process window would (when an
element arrives, and from a timer) and sends a *tick* for that window along
with the elements, at the place the window closes; the remote copy of the
window emits what it holds when the tick reaches it. With the steps before
the window taking no time (as in-process, synchronously), the windows hold
exactly what they hold in-process, empty windows included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .clock import Clock, Handle, get_clock
from .core import Stream
from .operators._outbox import armed_here

__all__ = ["EPSILON", "TickTimes", "WindowClock"]

#: As the core's windows: a deadline within this many seconds is reached.
EPSILON = 1e-9


class TickTimes:
    """When the ticks of a processing-time window node fall, on its clock.

    Tick ``n`` (from 0) falls at ``origin + (k + 1) * period - backs[j]``,
    with ``k, j = divmod(n, len(backs))``; ``closes[j]`` says whether that
    tick closes (emits) a window. Other ticks only open one: they need no
    timer, as they matter only before the next element or the next closing
    tick. A tumbling window ticks, and closes, once per interval (the
    default); a sliding window whose slide does not divide its size ticks
    twice per slide (a window closes, another opens).

    Examples
    --------
    >>> times = TickTimes(100.0, 4.0, backs=(2.0, 0.0), closes=(True, False))
    >>> [times.at(n) for n in range(4)]
    [102.0, 104.0, 106.0, 108.0]
    >>> times.due(0, 101.0), times.due(0, 104.5), times.next_closing(1)
    (0, 2, 2)
    """

    __slots__ = ("backs", "closes", "origin", "period")

    def __init__(self, origin: float, period: float, backs: tuple[float, ...] = (0.0,),
                 closes: tuple[bool, ...] = (True,)) -> None:
        self.origin = origin
        self.period = period
        self.backs = backs
        self.closes = closes

    def at(self, n: int) -> float:
        """The time of tick ``n`` (``at(-1)`` is the origin)."""
        k, j = divmod(n, len(self.backs))
        return self.origin + (k + 1) * self.period - self.backs[j]

    def next_closing(self, n: int) -> int:
        """The first tick from ``n`` on that closes a window."""
        while not self.closes[n % len(self.closes)]:
            n += 1
        return n

    def due(self, n: int, now: float) -> int:
        """How many ticks from the ``n``-th have come by ``now`` (within EPSILON)."""
        if now < self.at(n) - EPSILON:
            return 0
        if len(self.backs) == 1:  # the tumbling window's own arithmetic
            return max(1, math.floor((now + EPSILON - self.origin) / self.period) - n)
        # From a tick known to be due (a period back), count the rest one by one.
        end = max(n + 1, len(self.backs) * (math.floor((now - self.origin) / self.period) - 1))
        while now >= self.at(end) - EPSILON:
            end += 1
        return end - n


class _Window:
    """The timing of one processing-time window node."""

    __slots__ = ("clock", "deadline", "index", "node_id", "times")

    def __init__(self, node: Stream[Any]) -> None:
        spec = node.describe()
        self.node_id = spec.id
        # The node's own clock and start time: windows count from the node's
        # creation, as in-process. A node that ticks other than once per
        # interval says when (``_tick_times``).
        self.clock: Clock = getattr(node, "_clock", None) or get_clock()
        times: TickTimes | None = getattr(node, "_tick_times", None)
        if times is None:
            origin: float = getattr(node, "_origin", None) or self.clock.now()
            times = TickTimes(origin, float(spec.params["interval"]))
        # A copy: the node's own schedule moves if it is restored.
        self.times = TickTimes(times.origin, times.period, times.backs, times.closes)
        self.index = 0
        self.deadline = times.at(times.next_closing(0))

    def upcoming(self) -> float:
        """The first closing tick's time after now, the ticks that came left in place."""
        index = self.index + self.times.due(self.index, self.clock.now())
        return self.times.at(self.times.next_closing(index))

    def due(self, out: list[int]) -> None:
        """Append this window's node id once for every tick that has come."""
        count = self.times.due(self.index, self.clock.now())
        if not count:
            return
        out.extend([self.node_id] * count)
        self.index += count
        self.deadline = self.times.at(self.times.next_closing(self.index))


class WindowClock:
    """Ticks for every processing-time ``timed_window`` of a segment.

    A tick is the window node's id; one tick closes one window (or, for a
    sliding window, opens one: see :class:`TickTimes`). Windows are
    added as the graph is built (:meth:`add`), and timed from their
    creation, as in-process.

    Parameters
    ----------
    on_tick : callable
        Called with the ticks a timer found due (to send them on).

    Examples
    --------
    >>> from streams import Stream, VirtualClock, use_clock
    >>> with use_clock(VirtualClock()) as clock:
    ...     fired = []
    ...     ticks = WindowClock(fired.append)
    ...     window = Stream().timed_window(1.0)
    ...     ticks.add(window)
    >>> clock.advance(2.5)
    >>> fired == [[window.describe().id], [window.describe().id]]
    True
    >>> out: list[int] = []
    >>> ticks.due(out)  # the timers already sent them
    >>> out
    []
    """

    def __init__(self, on_tick: Callable[[list[int]], None]) -> None:
        self.windows: list[_Window] = []
        self.on_tick = on_tick
        self.timers: list[Handle | None] = []
        self.stopped = False

    @staticmethod
    def wants(node: Stream[Any]) -> bool:
        """Whether ``node`` is a window closed by the local clock."""
        return node.describe().traits.ticked

    def add(self, node: Stream[Any]) -> None:
        """Time the windows of ``node`` from its creation."""
        self.windows.append(_Window(node))
        self.timers.append(None)
        self._arm(len(self.windows) - 1)

    def due(self, out: list[int]) -> None:
        """Put the ticks that are due into ``out`` (before the next element).

        A timer of an event loop since closed (a pipeline built under one
        ``asyncio.run()``, fed under the next, or after it) is armed again
        here: else a window would close only with the next element.
        """
        for i, window in enumerate(self.windows):
            window.due(out)
            timer = self.timers[i]
            if timer is not None and not armed_here(timer):
                self._arm(i)

    def closing(self) -> bool:
        """Whether a window's closing tick has come and is still to be taken."""
        return any(w.clock.now() >= w.deadline - EPSILON for w in self.windows)

    def _arm(self, i: int, deadline: float | None = None) -> None:
        window = self.windows[i]
        when = window.deadline if deadline is None else deadline
        try:
            self.timers[i] = window.clock.call_later(
                max(when - window.clock.now() - EPSILON, 0.0), self._fire, i)
        except RuntimeError:  # no loop to run a timer: arrivals and close() suffice
            self.timers[i] = None

    def _fire(self, i: int) -> None:
        self.timers[i] = None
        if self.stopped:
            return
        ticks: list[int] = []
        self.windows[i].due(ticks)
        self._arm(i)
        if ticks:
            self.on_tick(ticks)

    def stop(self) -> None:
        """Cancel the timers (end of stream)."""
        self.stopped = True
        for timer in self.timers:
            if timer is not None:
                timer.cancel()
        self.timers = [None] * len(self.windows)
        self.windows = []
