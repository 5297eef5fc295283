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

__all__ = ["EPSILON", "WindowClock"]

#: As the core's windows: a deadline within this many seconds is reached.
EPSILON = 1e-9


class _Window:
    """The timing of one processing-time ``timed_window`` node."""

    __slots__ = ("clock", "deadline", "index", "interval", "node_id", "origin")

    def __init__(self, node: Stream[Any]) -> None:
        spec = node.describe()
        self.node_id = spec.id
        self.interval = float(spec.params["interval"])
        # The node's own clock and start time: windows count from the node's
        # creation, as in-process.
        self.clock: Clock = getattr(node, "_clock", None) or get_clock()
        self.origin: float = getattr(node, "_origin", None) or self.clock.now()
        self.index = 0
        self.deadline = self.origin + self.interval

    def due(self, out: list[int]) -> None:
        """Append this window's node id once for every window whose end has passed."""
        now = self.clock.now()
        if now < self.deadline - EPSILON:
            return
        count = max(1, math.floor((now + EPSILON - self.origin) / self.interval) - self.index)
        out.extend([self.node_id] * count)
        self.index += count
        self.deadline = self.origin + (self.index + 1) * self.interval


class WindowClock:
    """Ticks for every processing-time ``timed_window`` of a segment.

    A tick is the window node's id; one tick closes one window. Windows are
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
        """Put the ticks that are due into ``out`` (before the next element)."""
        for window in self.windows:
            window.due(out)

    def _arm(self, i: int) -> None:
        window = self.windows[i]
        try:
            self.timers[i] = window.clock.call_later(
                max(window.deadline - window.clock.now() - EPSILON, 0.0), self._fire, i)
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
