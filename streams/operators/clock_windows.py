"""Sliding and keyed windows on processing time: ``timed_window(size, slide=, key=)``.

Without ``time=``, ``timed_window`` cuts the stream by the node's clock
(:func:`streams.clock.get_clock`, a :class:`~streams.clock.VirtualClock` in
tests). The tumbling window is :class:`~streams.operators.timed.TimedWindow`;
with ``slide=`` or ``key=`` the node is a :class:`ClockSlidingWindow`:

* windows are ``[origin + i * slide, origin + i * slide + size)`` for every
  integer ``i`` whose window overlaps the node's life (``origin`` is its
  creation), so from the start every element is in ``size / slide`` windows
  (when ``slide`` divides ``size``), as on event time;
* an element joins every window open when it arrives; a window is emitted
  when the clock reaches its end, by a timer and by the check made when an
  element arrives (a producer that never yields still gets its windows);
* without ``key``, every window is emitted as a list, **empty windows
  included** (as the tumbling window, as streamz; but, as there, the timer
  skips the empty ones that come due while downstream is still busy with an
  earlier window); with ``key``, a window is
  emitted as ``(key, elements)`` once per key that has elements in it, keys
  in the order they first arrived in it (nothing for an empty window: the
  keys are not known beforehand);
* at ``close()``, every window still open that holds something is emitted,
  in time order, without waiting for its end: nothing held is dropped.

Engines run the node as they run the tumbling one: the node that feeds the
engine reads the clock and sends ticks (:mod:`streams.window_clock`); a tick
closes the window that ends next or opens the one that starts next (when
``slide`` does not divide ``size``, windows start between two ends).

Internally the elements are kept once, in *panes*: the elements that arrived
between two ticks. A window is the panes from its start to its end, so an
element costs one append whatever the number of windows holding it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..clock import Handle, get_clock
from ..core import Stream
from ..metadata import release_refs, retain_refs
from ..pending import emit_each, gather_pending
from ..spec import Traits
from ..window_clock import TickTimes
from ._checks import key_function, one_key
from ._outbox import EPSILON, Outbox, arm, arm_for, armed_here
from .durations import SAME_RATIO, check_interval, check_slide
from .pacing import call_when_free, locked_method, locked_timer

__all__ = ["ClockSlidingWindow"]

_NO_KEY = None  # the one key of a window without key=


class ClockSlidingWindow(Stream[Any]):
    """Sliding or keyed windows on processing time: ``timed_window(size, slide=...)``.

    See the module docstring for the semantics. ``slide`` defaults to
    ``size`` (tumbling windows, one set per key).

    Parameters
    ----------
    interval : float or str
        The window size, in seconds (or ``"500ms"``, ``"2s"``...).
    slide : float or str, optional
        The distance between window starts; at most ``interval`` (a longer
        slide would leave elements in no window).
    key : callable or hashable, optional
        One set of windows per ``key(x)`` (or ``x[key]``); windows are
        emitted as ``(key, elements)``.

    Examples
    --------
    Windows of 2 seconds, one every second (the first, ``[-1, 1)``, began
    before the node did):

    >>> from streams import Stream, VirtualClock, use_clock
    >>> with use_clock(VirtualClock()) as clock:
    ...     source = Stream()
    ...     L = source.timed_window(2, slide=1).sink_to_list()
    >>> source.emit("a")
    >>> clock.advance(1)
    >>> source.emit("b")
    >>> clock.advance(2)
    >>> L
    [['a'], ['a', 'b'], ['b']]
    >>> source.close()  # [2, 4) is open and empty: nothing to flush
    >>> L
    [['a'], ['a', 'b'], ['b']]

    Per key, tumbling (nothing is emitted for a key without elements):

    >>> with use_clock(VirtualClock()) as clock:
    ...     source = Stream()
    ...     L = source.timed_window(10, key=0).sink_to_list()
    >>> for x in [("a", 1), ("b", 2), ("a", 3)]:
    ...     source.emit(x)
    >>> clock.advance(10)
    >>> L
    [('a', [('a', 1), ('a', 3)]), ('b', [('b', 2)])]
    """

    __slots__ = ("_clock", "_inside", "_key", "_lock", "_metadata", "_next", "_outbox", "_panes",
                 "_step", "_tick_times", "_timer", "_width", "interval", "key", "slide")
    _operator = "timed_window"
    _local_only = None
    _params = ("interval", "slide", "key")
    # _elapsed (a property): how far past its last tick the node is, so a
    # restored node goes on from the same point between two ticks.
    _state = ("_panes", "_step", "_elapsed")
    _graphviz_shape = "octagon"

    def __init__(self, upstream: Stream[Any], interval: float | str,
                 slide: float | str | None = None, key: Any = None, lateness: float | str = 0.0,
                 **kwargs: Any) -> None:
        op = "timed_window"
        self.interval = check_interval(op, interval)
        self.slide = check_slide(op, self.interval, slide)
        if check_interval(op, lateness, "lateness", zero=True):
            raise ValueError(f"{op}(): lateness= needs time=, the element's event time; "
                             "without it windows follow the clock")
        self.key = key
        self._key = None if key is None else key_function(key, "timed_window")
        self._clock = get_clock()
        size, step = self.interval, self.slide
        ratio = size / step
        whole = round(ratio)
        if abs(ratio - whole) <= SAME_RATIO * ratio:  # as check_slide takes a slide
            # Every window starts where another ends: one tick per slide.
            self._width, self._inside = 1, whole - 1
            times = TickTimes(self._clock.now(), step)
        else:
            # A window ends (tick 2k) and another starts (tick 2k + 1) in each slide.
            whole = math.floor(ratio)
            rest = size - whole * step
            self._width, self._inside = 2, 2 * whole
            times = TickTimes(self._clock.now(), step, backs=(step - rest, 0.0),
                              closes=(True, False))
        # Window i holds the panes max(width * i, 0) ... width * i + inside;
        # tick n closes window (n - inside) / width when times says it closes.
        self._tick_times = times
        self._step = 0  # ticks taken; the elements arriving now go to pane _step
        self._next = times.at(0)
        self._panes: dict[int, dict[Any, list[Any]]] = {}
        # streamz's metadata of the held elements (refs retained), as the panes.
        self._metadata: dict[int, dict[Any, list[Any]]] = {}
        self._timer: Handle | None = None
        # Its timer may fire on the loop thread while its producer emits (see
        # streams.operators.pacing): one at a time inside.
        self._lock = threading.RLock()
        self._outbox = Outbox(self)
        Stream.__init__(self, upstream, **kwargs)
        self._arm(arm_for)

    def _traits(self) -> Traits:
        return replace(super()._traits(), ticked=True)

    @property
    def _elapsed(self) -> float:
        """Seconds since the last tick taken (since creation before the first)."""
        return self._clock.now() - self._tick_times.at(self._step - 1)

    @_elapsed.setter
    def _elapsed(self, seconds: float) -> None:
        # Time stops while a pipeline is down: the restored node is as far
        # past its last tick now as the snapshot was.
        times = self._tick_times
        times.origin += self._clock.now() - seconds - times.at(self._step - 1)
        self._next = times.at(self._step)

    def restore(self, state: dict[str, Any]) -> None:
        """Set the held windows from a snapshot; they go on from where it was taken.

        The time between the snapshot and now does not count: the node is
        as far past its last tick as it was then (on an engine, whose clock
        never moves, ticks alone move the windows).
        """
        for held in self._metadata.values():
            for metadata in held.values():
                for ms in metadata:
                    release_refs(ms)
        self._metadata = {}
        super().restore(state)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._arm()

    # -- the schedule --------------------------------------------------------

    def _arm(self, how: Callable[..., Handle | None] | None = None) -> None:
        """Arm the timer for the next closing (``how``: :func:`arm_for`, when built)."""
        if not self._closed:
            times = self._tick_times
            when = times.at(times.next_closing(self._step))
            self._timer = (arm(self._clock, when, self._on_timer) if how is None
                           else how(self, self._clock, when, self._on_timer))

    @locked_timer
    def _on_timer(self, due: float) -> None:
        self._advance(self._outbox.send_window, max(self._clock.now(), due))
        self._arm()

    def _advance(self, emit: Callable[..., Any], now: float) -> Any:
        """Take every tick that has come by ``now``."""
        count = self._tick_times.due(self._step, now)
        if count == 1:
            return self._tick(emit)
        pending = []
        for taken in range(count):
            if self._key is not None and not self._panes:
                # Keyed, an empty window is not emitted: the ticks left close
                # nothing, and a clock that jumped a day ahead of a 1 ms window
                # would take 86 million of them.
                self._step += count - taken
                self._next = self._tick_times.at(self._step)
                break
            pending.append(self._tick(emit))
        return gather_pending(pending)

    @locked_method
    def tick(self) -> Any:
        """Take the next tick now, as the clock would: close a window, or open one.

        An engine running this node far from the local clock calls it when
        the clock here says so (see :class:`streams.window_clock.WindowClock`).

        Examples
        --------
        >>> from streams import Stream, VirtualClock, use_clock
        >>> with use_clock(VirtualClock()):
        ...     source = Stream()
        ...     window = source.timed_window(60, slide=30)
        ...     L = window.sink_to_list()
        >>> source.emit(1)
        >>> window.tick()  # [-30, 30) ends
        >>> L
        [[1]]
        """
        return self._tick(self._outbox.emit)

    def _tick(self, emit: Callable[..., Any]) -> Any:
        n = self._step
        times = self._tick_times
        self._step = n + 1
        self._next = times.at(n + 1)
        if not times.closes[n % self._width]:
            return None
        i = (n - self._inside) // self._width
        pending = self._emit_window(emit, i, n)
        for pane in range(max(self._width * i, 0), max(self._width * (i + 1), 0)):
            self._panes.pop(pane, None)  # no later window holds it
            held = self._metadata.pop(pane, None)
            for metadata in (held or {}).values():
                for ms in metadata:
                    release_refs(ms)
        return pending

    def _emit_window(self, emit: Callable[..., Any], i: int, last: int) -> Any:
        """Emit window ``i`` from its panes up to ``last``; empty only without key."""
        first = max(self._width * i, 0)
        panes = self._panes
        by_key: dict[Any, list[Any]] = {}
        for pane in range(first, last + 1):
            for k, xs in panes.get(pane, {}).items():
                held = by_key.get(k)
                if held is None:
                    by_key[k] = list(xs)
                else:
                    held.extend(xs)
        if self._key is None:
            return self._emit_held(emit, by_key.get(_NO_KEY, []), _NO_KEY, first, last)
        return gather_pending([self._emit_held(emit, (k, xs), k, first, last)
                               for k, xs in by_key.items()])

    def _emit_held(self, emit: Callable[..., Any], x: Any, k: Any, first: int,
                   last: int) -> Any:
        """``emit(x)``, with the metadata of key ``k``'s elements in the panes, if any."""
        if not self._metadata:
            return emit(x)
        flat = [m for pane in range(first, last + 1)
                for ms in self._metadata.get(pane, {}).get(k, ()) for m in ms]
        return emit(x, flat) if flat else emit(x)

    # -- elements ------------------------------------------------------------

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if not self._lock.acquire(False):
            return call_when_free(self._lock, self.update, x, who, metadata)
        try:  # the body here, not in a method: a call per element costs 5% (timed_ops.py)
            pending = None
            now = self._clock.now()
            if now >= self._next - EPSILON:
                pending = self._advance(self._outbox.emit, now)
            k = _NO_KEY
            if self._key is not None:
                try:
                    k = one_key(self._key(x))
                    hash(k)
                except Exception as e:
                    return gather_pending([pending, self._fail(x, e)])
            pane = self._panes.get(self._step)
            if pane is None:
                self._panes[self._step] = {k: [x]}
            else:
                held = pane.get(k)
                if held is None:
                    pane[k] = [x]
                else:
                    held.append(x)
            if metadata:
                retain_refs(metadata)
                self._metadata.setdefault(self._step, {}).setdefault(k, []).append(metadata)
            if not armed_here(self._timer):
                self._arm()  # built with no loop running (or one since closed): start it now
            if pending is None:
                return self._outbox.wait()
            return pending
        finally:
            self._lock.release()

    # -- end of stream -------------------------------------------------------

    @locked_method
    def _flush(self) -> Any:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        step, width = self._step, self._width
        # The windows open now: from the first not closed to the last started.
        open_now = [i for i in range(-((self._inside - step) // width), step // width + 1)
                    if any(pane in self._panes for pane in range(max(width * i, 0), step + 1))]
        try:  # no later closing sends what a failure leaves: every window goes
            sent = emit_each(lambda i: self._emit_window(self._outbox.emit, i, step), open_now)
        finally:
            for held in self._metadata.values():
                for metadata in held.values():
                    for ms in metadata:
                        release_refs(ms)
            self._panes, self._metadata = {}, {}
        return gather_pending([sent, self._outbox.wait()])
