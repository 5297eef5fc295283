"""Time for ``timed_window`` on a Dask segment: the client keeps the clock.

The timing is the core's (:mod:`streams.window_clock`, shared with the
Spark backend); here a tick travels to the workers as a
:class:`~streams_dask.worker.Tick` among the elements of a batch, at the
place the window closes, and the worker's window emits what it holds when
the tick reaches it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streams import window_clock

from .worker import Tick

__all__ = ["WindowClock"]


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
