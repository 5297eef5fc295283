"""Processing-time and tumbling event-time windows: timed_window.

Time comes only from the clock in force when the node is created
(:func:`streams.clock.get_clock`): the running loop's clock in real runs, a
:class:`~streams.clock.VirtualClock` in tests. Windows are checked both by a
timer and whenever an element arrives, so a producer that never yields to
the loop still gets its windows; with no loop running at all, the arrival
checks and ``close()`` are what emit them. Nothing held is dropped at close.
"""

from __future__ import annotations

import heapq
import math
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..clock import Handle, get_clock
from ..core import Stream
from ..fusion import Fuser
from ..metadata import emit_held, retain_refs
from ..pending import emit_each
from ..pending import gather_pending as _gather_pending
from ..spec import EventTime, Traits
from ._checks import key_function
from ._late import LateElementError, LateSide, late_error, seconds_code, seconds_of
from ._outbox import EPSILON, Outbox, arm, arm_for, armed_here
from .durations import check_interval
from .pacing import call_when_free, locked_method, locked_timer
from .window_bounds import (
    LAST_MICROS,
    closes_at,
    event_micros,
    first_time,
    micros_of,
    past_last_time,
    seconds,
    watermark_micros,
)

__all__ = ["LateElementError", "TimedWindow"]


@Stream.register_api()
class TimedWindow(LateSide):
    """Emit a list of the elements received in every ``interval`` seconds.

    Processing time (the default): windows follow each other every
    ``interval`` seconds from the node's creation; each emits the list of
    elements that arrived during it, **empty windows included** (as
    streamz). The deadline is also checked when an element arrives, so a
    producer that never yields to the loop still gets one window per
    interval (streamz emitted a single window then). Windows missed while
    nothing ran are emitted, empty, when time is next looked at; but while
    downstream is still busy with an earlier window (backpressure), the
    timer skips the windows that come due empty, which would otherwise
    queue faster than a slow sink takes them. At close the current window
    is emitted if it holds anything.

    Event time (``time=`` given): each element's timestamp ``time(x)`` (a
    number of seconds) puts it in the window ``[k * interval, (k + 1) *
    interval)``, to the microsecond, as Spark cuts windows (see
    :mod:`~streams.operators.window_bounds`: with ``interval=0.1``, a time
    of 0.6 is in ``[0.6, 0.7)``). The watermark is the largest timestamp seen minus
    ``lateness``; a window is emitted, once, when the watermark reaches its
    end, and every window still open is emitted at close, in time order.
    Only windows that received elements are emitted. An element whose window
    was already emitted is late: it goes to :attr:`late` if something is
    connected to it, else to the node's error policy
    (:meth:`~streams.Stream.on_error`, a :class:`LateElementError`), never
    silently dropped.

    With ``slide=`` (sliding windows) or ``key=`` (a window per key), the
    node is a :class:`~streams.operators.event_windows.SlidingTimedWindow`
    on event time, or a
    :class:`~streams.operators.clock_windows.ClockSlidingWindow` on
    processing time: windows ``[origin + i * slide, origin + i * slide +
    interval)`` on the clock, each holding the elements that arrived while it
    was open, emitted when the clock reaches its end (empty ones included
    without ``key=``; with it, one ``(key, elements)`` per key in the window),
    the open ones that hold something at close.

    Parameters
    ----------
    interval : float or str
        Window length in seconds (or ``"500ms"``, ``"2s"``...).
    time : callable or key, optional
        Event-time mode: ``time(x)`` (or ``x[time]``) is ``x``'s timestamp,
        in seconds, or a ``datetime`` (taken as its POSIX ``timestamp()``).
    lateness : float or str
        Event-time mode: how far behind the largest timestamp seen an
        element may be and still be counted.
    slide : float or str, optional
        Start a window every ``slide`` seconds (``<= interval``).
    key : callable or hashable, optional
        One set of windows per ``key(x)`` (or ``x[key]``); each window is
        emitted as ``(key, elements)``.
    bounds : bool
        Event-time mode: emit each window as a :class:`~streams.Window`
        ``(start, end, elements)`` (see
        :class:`~streams.operators.event_windows.SlidingTimedWindow`).

    Examples
    --------
    >>> from streams import Stream, VirtualClock, use_clock
    >>> with use_clock(VirtualClock()) as clock:
    ...     source = Stream()
    ...     L = source.timed_window(1.0).sink_to_list()
    >>> source.emit(1); source.emit(2)
    >>> clock.advance(1.0)
    >>> source.emit(3)
    >>> clock.advance(2.0)
    >>> L
    [[1, 2], [3], []]

    Sliding, on the clock: two-second windows, one every second.

    >>> with use_clock(VirtualClock()) as clock:
    ...     source = Stream()
    ...     L = source.timed_window(2.0, slide=1.0).sink_to_list()
    >>> source.emit(1); clock.advance(1.0); source.emit(2); clock.advance(1.0)
    >>> L
    [[1], [1, 2]]

    By event time, allowing elements 5 seconds late:

    >>> source = Stream()
    >>> L = source.timed_window(10, time=lambda x: x, lateness=5).sink_to_list()
    >>> for t in [1, 12, 3, 16, 14]:
    ...     source.emit(t)
    >>> L
    [[1, 3]]
    >>> source.close()
    >>> L
    [[1, 3], [12, 16, 14]]
    """

    # Event time: window k holds the times whose microsecond is in
    # [k * _size_us, (k + 1) * _size_us) (see window_bounds). _lo, _hi, _open:
    # the last window an element joined, whose times and list the fused step
    # checks first; _due_us: when the earliest window held ends; _due: the
    # largest time seen from which that window is closed. _closing: the
    # indexes of _windows as a heap (ends grow with the index), so a closing
    # takes the windows it closes and looks at no other: no state, restore()
    # rebuilds it from _windows.
    __slots__ = ("_buffer", "_clock", "_closing", "_deadline", "_due", "_due_us", "_hi", "_index",
                 "_late_us", "_lo", "_lock", "_max_time", "_metadata", "_open", "_origin",
                 "_outbox", "_size_us", "_time", "_timer", "_windows", "interval", "lateness",
                 "time")
    _operator = "timed_window"
    _local_only = None
    _params = ("interval", "time", "lateness")
    # _elapsed (a property): how long the open window of the clock has been
    # open, so a restored node closes it as far along as it was.
    _state = ("_buffer", "_windows", "_max_time", "_elapsed")
    _state_added = ("_elapsed",)  # older checkpoints: the open window starts afresh
    _graphviz_shape = "octagon"

    def __new__(cls, upstream: Stream[Any], interval: float | str, time: Any = None,
                lateness: float | str = 0.0, slide: float | str | None = None, key: Any = None,
                bounds: bool = False, **kwargs: Any) -> Any:
        if bounds and time is None:
            raise ValueError(f"{cls._operator}(): bounds=True needs time=: a window's bounds "
                             "are event times (the windows of the clock have none to emit)")
        if cls is TimedWindow and (slide is not None or key is not None or bounds):
            # Sliding or keyed windows are their own classes (a node built here
            # is not a TimedWindow, so its __init__ does not run again).
            if time is None:
                from .clock_windows import ClockSlidingWindow

                return ClockSlidingWindow(upstream, interval, slide=slide, key=key,
                                          lateness=lateness, **kwargs)
            from .event_windows import SlidingTimedWindow

            return SlidingTimedWindow(upstream, interval, time=time, lateness=lateness,
                                      slide=slide, key=key, bounds=bounds, **kwargs)
        return super().__new__(cls)

    def __init__(self, upstream: Stream[Any], interval: float | str, time: Any = None,
                 lateness: float | str = 0.0, slide: float | str | None = None, key: Any = None,
                 bounds: bool = False, **kwargs: Any) -> None:
        # slide=, key= and bounds= are in the signature for readers and tools only:
        # __new__ sends a call that gives them to SlidingTimedWindow.
        self.interval = check_interval(self._operator, interval)
        self.lateness = check_interval(self._operator, lateness, "lateness", zero=True)
        if time is None and self.lateness:  # "0s" is none either
            raise ValueError(f"{self._operator}(): lateness= needs time=, the element's "
                             "event time; without it windows follow the clock")
        self.time = time
        self._time = None if time is None else key_function(time, self._operator, "time")
        if time is not None:
            self._size_us = micros_of(self._operator, "interval", self.interval)
            self._late_us = micros_of(self._operator, "lateness", self.lateness, zero=True)
        self._clock = get_clock()
        # On the clock, its timer may fire on the loop thread while its
        # producer emits (see streams.operators.pacing): one at a time inside.
        self._lock = threading.RLock() if time is None else None
        self._origin = self._clock.now()
        self._index = 0  # the open window is [origin + index*I, origin + (index+1)*I)
        self._deadline = self._origin + self.interval
        self._timer: Handle | None = None
        self._buffer: Any = self._new_buffer()
        self._windows: dict[int, list[Any]] = {}
        self._closing: list[int] = []
        # streamz's metadata of the held elements (refs retained), by window:
        # None for the open window of processing time, k in event time.
        self._metadata: dict[int | None, list[Any]] = {}
        self._max_time = -math.inf
        self._lo: float
        self._hi: float
        self._open: list[Any] | None
        self._due: float
        self._due_us: float
        self._forget_open()
        self._outbox = Outbox(self)
        Stream.__init__(self, upstream, **kwargs)
        if self._time is None:
            self._timer = arm_for(self, self._clock, self._deadline, self._on_timer)

    @property
    def _on_clock(self) -> bool:
        """Whether its windows close on the clock (processing time), not on elements' times."""
        return self._time is None

    def _traits(self) -> Traits:
        traits = super()._traits()
        if self._time is None:
            return replace(traits, ticked=True)
        if self._late_is_sunk():
            return traits  # run as this node, element by element (see _late_is_sunk)
        return replace(traits, event_time=EventTime(self.time, self.interval, self.lateness))

    # -- processing time ---------------------------------------------------

    @locked_method
    def tick(self) -> Any:
        """Close the open window now, as its timer would (processing time).

        An engine running this node far from the local clock calls it when
        the clock here says the window closes (see
        :class:`streams.window_clock.WindowClock`).

        Examples
        --------
        >>> from streams import Stream, VirtualClock, use_clock
        >>> with use_clock(VirtualClock()):
        ...     source = Stream()
        ...     window = source.timed_window(60)
        ...     L = window.sink_to_list()
        >>> source.emit(1)
        >>> window.tick()
        >>> L
        [[1]]
        """
        return self._tick(self._outbox.emit, self._deadline)

    def _new_buffer(self) -> Any:
        return []

    def _add(self, x: Any) -> Any:
        """Put ``x`` in the open window; a returned value goes to the error policy."""
        self._buffer.append(x)

    def _take(self) -> Any:
        window, self._buffer = self._buffer, self._new_buffer()
        return window

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if self._time is not None:
            return self._update_event_time(x, metadata)
        lock = self._lock
        assert lock is not None
        if not lock.acquire(False):
            return call_when_free(lock, self.update, x, who, metadata)
        try:  # the body here, not in a method: a call per element costs 5% (timed_ops.py)
            pending = None
            now = self._clock.now()
            if now >= self._deadline - EPSILON:
                pending = self._tick(self._outbox.emit, now)
            failed = self._add(x)
            if failed is not None:
                return _gather_pending([pending, failed])
            if metadata:
                retain_refs(metadata)
                self._metadata.setdefault(None, []).append(metadata)
            if not self._closed and not armed_here(self._timer):
                # Built with no loop running (or under a loop since closed): start
                # the timer on the loop running now, if one is.
                self._timer = arm(self._clock, self._deadline, self._on_timer)
            if pending is None:
                return self._outbox.wait()
            return pending
        finally:
            lock.release()

    def _tick(self, emit: Callable[[Any], Any], now: float) -> Any:
        """Emit every window whose end has passed (the first holds the buffer)."""
        due = max(1, math.floor((now + EPSILON - self._origin) / self.interval) - self._index)
        pending = []
        for _ in range(due):
            pending.append(self._emit_window(emit, None, self._take()))
            self._index += 1
        self._deadline = self._origin + (self._index + 1) * self.interval
        return _gather_pending(pending)

    def _emit_window(self, emit: Callable[..., Any], k: int | None, window: Any) -> Any:
        """``emit(window)``, with its elements' metadata if any came with some."""
        if not self._metadata:
            return emit(window)
        return emit_held(emit, window, self._metadata.pop(k, None))

    @locked_timer
    def _on_timer(self, due: float) -> None:
        now = max(self._clock.now(), due)
        if now >= self._deadline - EPSILON:
            self._tick(self._outbox.send_window, now)  # empty ones skipped while busy
        self._timer = arm(self._clock, self._deadline, self._on_timer)

    # -- event time --------------------------------------------------------

    def _update_event_time(self, x: Any, metadata: Any) -> Any:
        try:
            t = seconds_of(self._time(x))  # type: ignore[misc]
        except Exception as e:
            return self._fail(x, e)
        return self._place(x, t, metadata)

    def _place(self, x: Any, t: float, metadata: Any = None) -> Any:
        """Put ``x``, of time ``t``, in its window; emit the windows it closes."""
        try:
            k = event_micros(t) // self._size_us
        except Exception as e:
            return self._fail(x, e)
        end = (k + 1) * self._size_us
        if end <= watermark_micros(self._max_time, self._late_us):
            return self._fail(x, late_error(
                t, f"falls in window [{seconds(end - self._size_us)!r}, {seconds(end)!r}), "
                "already closed", self._max_time, self.lateness))
        window = self._windows.get(k)
        if window is None:
            if end + self._late_us > LAST_MICROS:  # before any change: no window half made
                return self._fail(x, past_last_time(f"the window of time {t!r}", end,
                                                    self.lateness))
            window = self._windows[k] = []
            heapq.heappush(self._closing, k)
            if end < self._due_us:
                self._set_due(end)
        window.append(x)
        # The fused step puts the next elements of this window here directly:
        # the times from _lo to _hi are those whose microsecond is in it.
        self._lo, self._hi, self._open = first_time(end - self._size_us), first_time(end), window
        if metadata:
            retain_refs(metadata)
            self._metadata.setdefault(k, []).append(metadata)
        if t <= self._max_time:
            return self._outbox.wait()
        self._max_time = t
        return self._emit_until(t)

    def _forget_open(self) -> None:
        """Drop the fused step's window (it may be emitted), and recompute ``_due``."""
        self._lo = math.inf
        self._hi = -math.inf
        self._open = None
        closing = self._closing
        self._set_due((closing[0] + 1) * self._size_us if closing else math.inf)

    def _set_due(self, end_us: float) -> None:
        self._due_us = end_us
        self._due = closes_at(end_us, self._late_us) if self._time is not None else math.inf

    @property
    def _elapsed(self) -> float:
        """Seconds since the open window of the clock opened (0.0 on event time)."""
        if self._time is not None:
            return 0.0
        return self._clock.now() - (self._deadline - self.interval)

    @_elapsed.setter
    def _elapsed(self, seconds: float) -> None:
        # Time stops while a pipeline is down, as for the sliding windows of the
        # clock (clock_windows): the restored window is as far along as it was.
        if self._time is None:
            self._origin = self._clock.now() - seconds
            self._index = 0
            self._deadline = self._origin + self.interval

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._closing = sorted(self._windows)  # a sorted list is a heap
        self._forget_open()
        if self._time is None and "_elapsed" in state:  # the timer for the window's new end
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None if self._closed else arm(self._clock, self._deadline,
                                                        self._on_timer)

    def _emit_until(self, max_time: float) -> Any:
        """Emit the windows closed once ``max_time`` is the largest time seen."""
        if max_time < self._due:  # the usual case: no window held ends by then
            return self._outbox.wait()
        windows, closing, size = self._windows, self._closing, self._size_us
        watermark = watermark_micros(max_time, self._late_us)
        pending = []
        try:
            # Each window leaves the heap and the dict together, as it is
            # emitted: those after one whose emission raised stay for the next.
            while closing and (closing[0] + 1) * size <= watermark:
                k = heapq.heappop(closing)
                pending.append(self._emit_window(self._outbox.emit, k, windows.pop(k)))
        finally:
            self._forget_open()  # also when an emission raised half-way
        return _gather_pending(pending)

    def _fusable(self) -> bool:
        return self._time is not None  # processing time reads the clock: update() does

    def _fuse(self, f: Fuser, x: str) -> None:
        # The element's time, under the node's policy; then, if it falls in
        # the window the previous element joined, the append and the
        # watermark check inline; anything else through _place.
        t = f.fresh("t")
        node = f.bind(self, "node")
        f.step(self, x, (
            f"{t} = {f.bind(self._time, 'time')}({x})\n{seconds_code(f, t)}"))
        f.line(
            f"if not {node}._lo <= {t} < {node}._hi:\n"
            f"    return {node}._place({x}, {t})\n"
            f"{node}._open.append({x})\n"
            f"if {t} > {node}._max_time:\n"
            f"    {node}._max_time = {t}\n"
            f"    if {t} >= {node}._due:\n"
            f"        return {node}._emit_until({t})")
        return None

    # -- end of stream -----------------------------------------------------

    @locked_method
    def _flush(self) -> Any:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._time is not None:
            windows, emit = self._windows, self._outbox.emit
            try:  # no later closing sends what a failure leaves: every window goes
                sent = emit_each(lambda k: self._emit_window(emit, k, windows.pop(k)),
                                 sorted(windows))
            finally:
                self._closing = sorted(windows)  # what is left, if anything is
                self._forget_open()
            return _gather_pending([sent, self._outbox.wait()])
        pending = self._emit_window(self._outbox.emit, None, self._take()) if self._buffer else None
        return _gather_pending([pending, self._outbox.wait()])
