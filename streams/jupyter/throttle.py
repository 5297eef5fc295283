"""Redraws at most once per interval: the :class:`Throttle` of live views and plots.

A live view redraws at the first change after a quiet period and once at
the end of the interval for later ones, whatever the element rate
(:class:`Throttle`). Changes still waiting when a Jupyter cell ends are
drawn then (:func:`flush_all`, registered by :mod:`streams.jupyter.display`
as IPython's ``post_execute``).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any

from ..clock import Clock, Handle, LoopClock, get_clock

logger = logging.getLogger("streams")

__all__ = ["DEFAULT_INTERVAL", "Throttle", "flush_all"]

#: Seconds between two redraws of a live view: fast enough to look live,
#: slow enough that a stream of a million elements per second sends the
#: browser five small messages per second.
DEFAULT_INTERVAL = 0.2


class _NoLoop:
    """Marks a throttle that could not schedule a timer (no running loop)."""

    __slots__ = ()

    def cancel(self) -> None:
        pass


_NO_LOOP = _NoLoop()


class Throttle:
    """Call ``render()`` at most once per ``interval`` seconds of clock time.

    :meth:`poke` says "something changed". The first poke after a quiet
    period renders at once (leading edge); later ones within the interval
    schedule one render at its end (trailing edge), so the last change is
    always drawn. Time comes from the clock in force when the throttle is
    created (``streams.clock.get_clock()``). Without a running loop no timer
    can be scheduled: the pending render then happens at the next poke after
    the interval, or at :meth:`flush` (called at the end of a Jupyter cell
    and at the end of the stream).

    Parameters
    ----------
    render : callable
        Called with no arguments to draw.
    interval : float
        Minimum time between two renders, in seconds.
    clock : Clock, optional
        Defaults to ``get_clock()``.

    Examples
    --------
    >>> from streams import VirtualClock
    >>> clock, drawn = VirtualClock(), []
    >>> t = Throttle(lambda: drawn.append(clock.now()), interval=1.0, clock=clock)
    >>> t.poke(); t.poke(); t.poke()
    >>> drawn
    [0.0]
    >>> clock.advance(2.0); drawn
    [0.0, 1.0]
    """

    __slots__ = ("__weakref__", "_clock", "_due", "_timer", "interval", "pending", "render")

    def __init__(self, render: Callable[[], Any], interval: float = DEFAULT_INTERVAL,
                 clock: Clock | None = None) -> None:
        if not interval >= 0:
            raise ValueError(f"Throttle: interval must be >= 0 seconds, got {interval!r}")
        self.render = render
        self.interval = float(interval)
        self._clock = clock if clock is not None else get_clock()
        self._due = float("-inf")
        self._timer: Handle | None = None
        #: True when a change has not been drawn yet.
        self.pending = False

    def poke(self) -> None:
        """Record a change; render now or schedule a render."""
        self.pending = True
        now = self._clock.now()
        if now >= self._due:
            self._fire(now)
        elif self._timer is None:
            if isinstance(self._clock, LoopClock) and not _loop_running():
                # No loop in this thread: render at a later poke or flush. The
                # clock would run the timer on the shared loop thread, drawing
                # widgets from a second thread and starting a thread that
                # synchronous code must not (contract 2).
                self._timer = _NO_LOOP
            else:
                try:
                    self._timer = self._clock.call_later(self._due - now, self._on_timer)
                except RuntimeError:  # a clock with no loop to schedule on
                    self._timer = _NO_LOOP
            _pending.add(self)

    def flush(self) -> None:
        """Render now if a change is waiting."""
        if self.pending:
            self._fire(self._clock.now())

    def cancel(self) -> None:
        """Drop any scheduled render."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.pending = False
        _pending.discard(self)

    def _on_timer(self) -> None:
        self._timer = None
        try:
            self.flush()
        except Exception:  # a loop's callback: say whose drawing failed
            logger.exception("drawing %r failed", self.render)

    def _fire(self, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        _pending.discard(self)
        self.pending = False
        self._due = now + self.interval
        self.render()


#: Throttles with a change not drawn yet; flushed at the end of each cell.
_pending: weakref.WeakSet[Throttle] = weakref.WeakSet()


def flush_all() -> None:
    """Draw every pending change now (registered as IPython's ``post_execute``).

    A cell that emits quickly leaves its last elements waiting for a timer
    that fires after the cell; drawing them when the cell ends makes what
    the notebook shows (and saves) the final state of the cell.

    Examples
    --------
    >>> from streams import Stream, VirtualClock, use_clock
    >>> from streams.jupyter import LiveView
    >>> with use_clock(VirtualClock()):
    ...     source = Stream()
    ...     view = LiveView(source, widget=False)
    ...     source.emit("first"); source.emit("last")
    >>> view.renders        # "first" was drawn; "last" waits for a timer
    1
    >>> flush_all()
    >>> view.renders
    2
    """
    for throttle in list(_pending):
        try:
            throttle.flush()
        except Exception:  # one view's failure must not keep the others stale
            logger.exception("drawing %r failed", throttle.render)
    for drawn in list(cell_end):
        drawn._cell_end()


#: What else draws when a cell ends, by its ``_cell_end()``: the progress
#: bars of :mod:`streams.jupyter.progress`, which tqdm redraws only every
#: ``mininterval`` seconds.
cell_end: weakref.WeakSet[Any] = weakref.WeakSet()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
