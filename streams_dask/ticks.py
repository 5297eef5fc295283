"""Time for ``timed_window`` on a Dask segment: the client keeps the clock.

A processing-time window closes at moments of the client's clock, which a
worker cannot see. So the ``scatter()`` node reads the clock where an
in-process window would (when an element arrives, and from a timer), and
puts a :class:`~streams_dask.worker.Tick` for that window into the stream
of elements, at the place the window closes. The worker's window emits what
it holds when the tick reaches it. With the steps before the window taking
no time (as in-process, synchronously), the windows hold exactly what they
hold in-process, empty windows included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from streams.clock import Clock, Handle, get_clock
from streams.core import Stream

from .worker import Tick

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
        # The node's own clock and start time when it exposes them: windows
        # count from the node's creation, as in-process.
        self.clock: Clock = getattr(node, "_clock", None) or get_clock()
        self.origin: float = getattr(node, "_origin", None) or self.clock.now()
        self.index = 0
        self.deadline = self.origin + self.interval

    def due(self, out: list[Any]) -> None:
        """Append a tick for every window whose end has passed."""
        now = self.clock.now()
        if now < self.deadline - EPSILON:
            return
        count = max(1, math.floor((now + EPSILON - self.origin) / self.interval) - self.index)
        tick = Tick(self.node_id)
        out.extend([tick] * count)
        self.index += count
        self.deadline = self.origin + (self.index + 1) * self.interval


class WindowClock:
    """Ticks for every processing-time ``timed_window`` of a segment.

    Windows are added as the graph is built (:meth:`add`), and timed from
    then on, as the in-process windows are from their creation.

    Parameters
    ----------
    on_tick : callable
        Called with the ticks a timer found due (to queue and submit them).

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
        self.windows: list[_Window] = []
        self.on_tick = on_tick
        self.timers: list[Handle | None] = []
        self.stopped = False

    @staticmethod
    def wants(node: Stream[Any]) -> bool:
        """Whether ``node`` is a window closed by the client's clock."""
        return node._operator == "timed_window" and node.describe().params.get("time") is None

    def add(self, node: Stream[Any]) -> None:
        """Time the windows of ``node`` from now on."""
        self.windows.append(_Window(node))
        self.timers.append(None)
        self._arm(len(self.windows) - 1)

    def due(self, out: list[Any]) -> None:
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
        ticks: list[Any] = []
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
