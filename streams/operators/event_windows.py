"""Event-time windows beyond the tumbling one: sliding and keyed, and what sessions share.

``timed_window(size, slide=, time=, lateness=, key=, bounds=)`` here and
``session_window(gap, time=, lateness=, key=, bounds=)`` (in
:mod:`streams.operators.session_windows`) cut the stream by the elements'
own timestamps. As for the tumbling ``timed_window(..., time=)``:

* the **watermark** is the largest timestamp seen so far minus ``lateness``,
  one for the whole node (all keys);
* a window is emitted, once, when the watermark passes its end, and every
  window still open is emitted at ``close()``; windows closing together are
  emitted in the order of their ends, then in the order they were opened
  (their first element's arrival), so the output is in order of window ends
  whichever elements move the watermark;
* a window holds its elements in arrival order; only windows that received
  elements are emitted; without ``key`` a window is emitted as a list, with
  ``key`` as ``(key, list)`` (as a keyed ``scan`` emits ``(key, state)``);
  with ``bounds=True`` a :class:`~streams.Window` ``(start, end, elements)``
  takes the list's place (see :mod:`streams.operators.window_bounds`);
* an element is **late** when the window it would join was already emitted:
  it goes to :attr:`~streams.operators._late.LateSide.late` if something is
  connected there, else to the error policy as a ``LateElementError``.

Engines: the nodes declare an ``event_time`` trait (with the slide, the
session gap and the key), which Spark lowers to its own ``window(t, size,
slide)`` or ``session_window(t, gap)`` under a watermark, grouped by key
(see :mod:`streams_spark.stream`). Spark's watermark moves between
micro-batches, not with each element, and it drops a late row from each
window that already closed, counting it; so with ``late`` connected the
nodes declare no ``event_time`` and an engine runs them as they are, in
element order (as Dask does). The watermark is shared by every key, so the
nodes declare no ``key`` trait: keys are not independent. They declare
``watermark_key`` instead: an engine may run the keys apart if it gives each
part the stream's watermark, element by element, as Dask does by key group;
the methods under "run by key group" below are what it needs (see
:mod:`streams_dask.window_groups`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..core import Stream
from ..fusion import Fuser
from ..metadata import emit_held, release_refs, retain_refs
from ..pending import emit_each, gather_pending
from ..spec import EventTime, Traits
from ._checks import key_function, one_key
from ._late import LateSide, event_seconds, late_error, seconds_code
from .durations import check_interval, check_slide
from .window_bounds import (
    LAST_MICROS,
    Window,
    check_bounds,
    closes_at,
    event_micros,
    first_time,
    micros_of,
    past_last_time,
    sliding_bounds,
    watermark_micros,
)

__all__ = ["Closed", "SlidingTimedWindow"]

#: A closed window: ``(end, opened, key, elements, bounds)`` (see ``_take_closed``); ``end``
#: in whole microseconds, as the windows are cut.
Closed = tuple[float, int, Any, list[Any], "tuple[float, float] | None"]


class _EventWindows(LateSide):
    """What sliding and session windows share: event time, keys, watermark, emission."""

    # _held: streamz's metadata of the elements a window holds (their refs
    # retained), by the id of the window's list as emitted; None until an
    # element comes with metadata (it is no state: the refs live in this process).
    __slots__ = ("_held", "_key", "_late_us", "_max_time", "_time", "_unsent", "bounds", "key",
                 "lateness", "time")
    _local_only = None
    _graphviz_shape = "octagon"

    def _setup(self, op: str, time: Any, lateness: Any, key: Any, bounds: Any) -> None:
        if time is None:
            raise ValueError(f"{op}(): time= is required: these windows follow the elements' "
                             "event time; give time=lambda x: ... (seconds or a datetime)")
        self.time = time
        self._time = key_function(time, op, "time")
        self.lateness = check_interval(op, lateness, "lateness", zero=True)
        self._late_us = micros_of(op, "lateness", self.lateness, zero=True)
        self.key = key
        self._key = None if key is None else key_function(key, op)
        self.bounds = check_bounds(op, bounds)
        self._max_time = -math.inf
        self._held: dict[int, list[Any]] | None = None
        # Windows taken as closed but not emitted yet: those after one whose
        # emission raised (a downstream failure), sent at the next closing.
        self._unsent: list[Closed] = []

    def _event_time(self) -> EventTime:
        raise NotImplementedError

    def _traits(self) -> Traits:
        traits = replace(super()._traits(), watermark_key=self.key)
        if self._late_is_sunk():
            return traits  # run as this node, element by element (see _late_is_sunk)
        return replace(traits, event_time=self._event_time())

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            t, k = self._stamp(x)
        except Exception as e:
            return self._fail(x, e)
        return self._arrive(x, t, k, metadata)

    def _stamp(self, x: Any) -> tuple[float, Any]:
        """``x``'s event time and key (raising what the user's functions raise)."""
        t = event_seconds(self._time, x)
        k = None if self._key is None else one_key(self._key(x))
        hash(k)
        return t, k

    def _fusable(self) -> bool:
        return True

    def _fuse(self, f: Fuser, x: str) -> None:
        # update()'s calls of the user's functions, under the node's policy,
        # then _arrive (or a subclass's faster step, _fuse_arrive).
        t, k = f.fresh("t"), f.fresh("k")
        # f.apply: a simple time or key function is written in, not called.
        code = (f"{f.apply(t, self._time, x, hint='time')}\n"
                f"{seconds_code(f, t)}")
        if self._key is not None:
            code += (f"\n{f.apply(k, self._key, x, hint='key')}\n"
                     f"if {k} != {k}:\n    {k} = {f.bind(one_key, 'one_key')}({k})\n"
                     f"hash({k})")
        f.step(self, x, code)
        self._fuse_arrive(f, x, t, k if self._key is not None else "None")
        return None

    def _fuse_arrive(self, f: Fuser, x: str, t: str, k: str) -> None:
        f.line(f"return {f.bind(self, 'node')}._arrive({x}, {t}, {k})")

    def _arrive(self, x: Any, t: float, k: Any, metadata: Any = None) -> Any:
        """Place ``x``, of time ``t`` and key ``k``; emit the windows it closes.

        ``metadata`` (streamz's): held with ``x`` in each window it joins,
        its refs retained until that window is emitted, with it.
        """
        try:
            late = self._place(x, t, k)  # refuses NaN and infinities (bad_time)
        except Exception as e:
            return self._fail(x, e)
        if late is not None:
            return self._fail(x, late_error(t, late, self._max_time, self.lateness))
        if metadata:
            if self._held is None:
                self._held = {}
            self._hold(t, k, metadata)
        if t <= self._max_time:
            return None
        self._max_time = t
        return self._emit_closed(t)

    def _place(self, x: Any, t: float, k: Any) -> str | None:
        """Put ``x`` in its windows, or say why it is late."""
        raise NotImplementedError

    def _hold(self, t: float, k: Any, metadata: list[Any]) -> None:
        """Hold the metadata of the element just placed (time ``t``, key ``k``) with it."""
        raise NotImplementedError

    def restore(self, state: dict[str, Any]) -> None:
        self._let_go()  # the windows held go: their elements' refs with them
        super().restore(state)

    def _let_go(self) -> None:
        """Release the refs held for the windows as they stand (replaced by a restore)."""
        for held in (self._held or {}).values():
            for metadata in held:
                release_refs(metadata)
        self._held = None

    def _held_for(self, window: list[Any], metadata: list[Any]) -> None:
        """Hold ``metadata`` (refs retained) until the list ``window`` is emitted."""
        assert self._held is not None
        retain_refs(metadata)
        self._held.setdefault(id(window), []).append(metadata)

    def _held_by(self, window: list[Any], metadata: list[list[Any] | None]) -> None:
        """Metadata held already (refs retained), until the list ``window`` is emitted."""
        assert self._held is not None
        held = [m for m in metadata if m]
        if held:
            self._held[id(window)] = held

    def _send(self, closed: Closed) -> Any:
        """Emit a closed window, with its elements' metadata if they came with some."""
        if not self._held:
            return self._emit(self._output(closed))
        return emit_held(self._emit, self._output(closed), self._held.pop(id(closed[3]), None))

    def _take_closed(self, max_time: float) -> list[Closed]:
        """Take the windows closed once ``max_time`` is the largest time seen, by end then opening.

        Each as ``(end, opened, key, elements, bounds)``; ``opened`` orders
        windows of one end as they were opened, across keys, once
        :meth:`_arrive_as` numbers the elements (else it may be 0);
        ``bounds`` is the window's ``(start, end)`` as emitted, or None
        without ``bounds=True``.
        """
        raise NotImplementedError

    def _output(self, closed: Closed) -> Any:
        """What a closed window is emitted as: its list or Window, keyed or not."""
        _, _, k, w, bounds = closed
        window = w if bounds is None else Window(bounds[0], bounds[1], w)
        return window if self._key is None else (k, window)

    def _emit_closed(self, max_time: float) -> Any:
        closed = self._take_closed(max_time)
        if self._unsent:  # they end before any window closed since
            closed, self._unsent = self._unsent + closed, []
        if not closed:  # most elements close nothing
            return None
        pending = []
        for i, c in enumerate(closed):
            try:
                pending.append(self._send(c))
            except BaseException:
                # A downstream node failed on this window (its error names it):
                # the others closed with it are not lost, but sent next time.
                self._unsent = closed[i + 1:]
                raise
        return gather_pending(pending) if pending else None

    def _flush(self) -> Any:
        closed = self._unsent + self._take_closed(math.inf)
        self._unsent = []
        # No later closing sends what a failure leaves: every window goes.
        return emit_each(self._send, closed) if closed else None

    # -- run by key group: an engine runs each key group's elements on a node
    # of its own, in element order, and tells each node the stream's watermark.

    def _arrive_as(self, seq: int, max_time: float) -> None:
        """The next element is the stream's ``seq``-th, and ``max_time`` the largest
        time seen by then, itself included (by all keys).

        Pushed then, the element is placed (or found late) and closes nothing:
        :meth:`_close_to` closes windows where the stream's watermark moves.
        """
        self._max_time = max_time

    def _next_close(self) -> float:
        """The largest time seen at which a window may close next (inf: none is open)."""
        raise NotImplementedError

    def _close_to(self, max_time: float) -> list[tuple[tuple[float, int], Any]]:
        """Take what the largest time ``max_time`` closes, as ``((end, opened), output)``.

        The outputs are what :meth:`_emit_closed` emits, in its order; sorting
        by ``(end, opened)`` the outputs of every key group closed at one
        element orders them as one node closing all keys would.
        """
        self._max_time = max_time
        return [(c[:2], self._output(c)) for c in self._take_closed(max_time)]


class SlidingTimedWindow(_EventWindows):
    """Sliding (or keyed tumbling) windows on event time: ``timed_window(size, slide=...)``.

    Windows are ``[i * slide, i * slide + size)`` for every integer ``i``;
    an element belongs to every window containing its timestamp
    (``size / slide`` of them when ``slide`` divides ``size``). An element
    is late when the first of its windows was already emitted: it then joins
    none of them, so it is always in all of its windows or in ``late``.
    ``slide`` defaults to ``size`` (tumbling windows, one set per key).

    Parameters
    ----------
    interval : float or str
        The window size, in seconds (or ``"500ms"``, ``"2s"``...).
    time : callable or key
        ``time(x)`` (or ``x[time]``) is ``x``'s timestamp in seconds, or a
        ``datetime``.
    lateness : float or str
        How far behind the largest timestamp seen an element may be and
        still be counted.
    slide : float or str, optional
        The distance between window starts; at most ``interval`` (a longer
        slide would leave elements in no window).
    key : callable or hashable, optional
        One set of windows per ``key(x)`` (or ``x[key]``); windows are
        emitted as ``(key, elements)``.
    bounds : bool
        Emit each window as a :class:`~streams.Window` ``(start, end,
        elements)``, its bounds in seconds to the microsecond (see
        :mod:`streams.operators.window_bounds`).

    Examples
    --------
    Windows of 10 seconds, one every 5 seconds:

    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.timed_window(10, slide=5, time=lambda x: x).sink_to_list()
    >>> for t in [1, 6, 12]:
    ...     source.emit(t)
    >>> L                       # [-5, 5) and [0, 10) are closed
    [[1], [1, 6]]
    >>> source.close()
    >>> L                       # then [5, 15) and [10, 20)
    [[1], [1, 6], [6, 12], [12]]

    Per key (tumbling when ``slide`` is not given), late elements on a side:

    >>> source = Stream()
    >>> window = source.timed_window(10, time=1, key=0)
    >>> L, late = window.sink_to_list(), window.late.sink_to_list()
    >>> for x in [("a", 1), ("b", 2), ("a", 11), ("b", 3)]:
    ...     source.emit(x)
    >>> source.close()
    >>> L
    [('a', [('a', 1)]), ('b', [('b', 2)]), ('a', [('a', 11)])]
    >>> late
    [('b', 3)]

    With their bounds, each window labelled by its start:

    >>> source = Stream()
    >>> counts = source.timed_window(10, slide=5, time=lambda x: x, bounds=True).map(
    ...     lambda w: (w.start, len(w.elements))).sink_to_list()
    >>> for t in [1, 6, 12]:
    ...     source.emit(t)
    >>> source.close()
    >>> counts
    [(-5.0, 1), (0.0, 2), (5.0, 2), (10.0, 1)]
    """

    # The windows are cut in whole microseconds, as Spark cuts them (see
    # window_bounds): window i holds the times whose microsecond is in
    # [i * _slide_us, i * _slide_us + _size_us). Float seconds would put 0.6
    # in [0.5, 0.6) (6 * 0.1 > 0.6) where Spark and the bounds say [0.6, 0.7).
    # _lo, _hi, _appends: the times whose windows are those the previous
    # element joined (without key=), and those windows' appends, which the
    # fused step uses first.
    # _due_us: when the earliest open window ends; _due: the largest time
    # seen from which it is closed (window_bounds.closes_at).
    # _opened: (window index, key) -> the number (see _arrive_as) of the
    # element that opened it; None unless an engine numbers the elements.
    # _closing: the indexes of _windows as a heap (ends grow with the index):
    # a closing takes the windows it closes and looks at no other; no state,
    # restore() rebuilds it.
    __slots__ = ("_appends", "_arrival", "_closing", "_due", "_due_us", "_hi", "_lo", "_opened",
                 "_size_us", "_slide_us", "_windows", "interval", "slide")
    _operator = "timed_window"
    _params = ("interval", "time", "lateness", "slide", "key", "bounds")
    _state = ("_windows", "_max_time", "_opened", "_unsent")
    _state_added = ("_opened", "_unsent")  # older checkpoints lack them: see restore()

    def __init__(self, upstream: Stream[Any], interval: float | str, time: Any = None,
                 lateness: float | str = 0.0, slide: float | str | None = None, key: Any = None,
                 bounds: bool = False, **kwargs: Any) -> None:
        op = "timed_window"
        self.interval = check_interval(op, interval)
        self.slide = check_slide(op, self.interval, slide, event_time=True)
        self._setup(op, time, lateness, key, bounds)
        self._size_us = micros_of(op, "interval", self.interval)
        self._slide_us = micros_of(op, "slide", self.slide)
        # window index -> key -> elements; insertion order breaks ties in time.
        # By index first: the indices open at once are few ((size + lateness)
        # / slide), whatever the number of keys.
        self._windows: dict[int, dict[Any, list[Any]]] = {}
        self._closing: list[int] = []
        self._set_due(math.inf)
        self._opened: dict[tuple[int, Any], int] | None = None
        self._arrival = 0
        self._forget_slice()
        Stream.__init__(self, upstream, **kwargs)

    def _event_time(self) -> EventTime:
        return EventTime(self.time, self.interval, self.lateness, slide=self.slide,
                         key=self.key, bounds=self.bounds)

    def restore(self, state: dict[str, Any]) -> None:
        # Checkpoints from before _opened and _unsent lack them.
        super().restore({"_opened": None, "_unsent": [], **state})
        self._closing = sorted(self._windows)  # a sorted list is a heap
        self._set_due(self._end(self._closing[0] if self._closing else math.inf))
        self._forget_slice()

    def _arrive_as(self, seq: int, max_time: float) -> None:
        super()._arrive_as(seq, max_time)
        self._arrival = seq
        if self._opened is None:
            self._opened = {}

    def _next_close(self) -> float:
        return self._due

    def _end(self, i: float) -> float:
        """The end of window ``i``, in microseconds (inf for no window)."""
        return i * self._slide_us + self._size_us

    def _set_due(self, end_us: float) -> None:
        self._due_us = end_us
        self._due = closes_at(end_us, self._late_us)

    def _forget_slice(self) -> None:
        self._lo: float = math.inf
        self._hi: float = -math.inf
        self._appends: tuple[Callable[[Any], Any], ...] = ()

    def _fuse_arrive(self, f: Fuser, x: str, t: str, k: str) -> None:
        if self._key is not None:
            super()._fuse_arrive(f, x, t, k)
            return
        node, a = f.bind(self, "node"), f.fresh("a")
        f.line(
            f"if not {node}._lo <= {t} < {node}._hi:\n"
            f"    return {node}._arrive({x}, {t}, None)\n"
            f"for {a} in {node}._appends:\n"
            f"    {a}({x})\n"
            f"if {t} > {node}._max_time:\n"
            f"    {node}._max_time = {t}\n"
            f"    if {t} >= {node}._due:\n"
            f"        return {node}._emit_closed({t})")

    def _place(self, x: Any, t: float, k: Any) -> str | None:
        us = event_micros(t)
        slide, size = self._slide_us, self._size_us
        first, last = (us - size) // slide + 1, us // slide
        if self._end(first) <= watermark_micros(self._max_time, self._late_us):
            start, end = sliding_bounds(first, self.slide, self.interval)
            return f"falls in window [{start!r}, {end!r}), already closed"
        if self._end(last) + self._late_us > LAST_MICROS:  # before any window holds it
            raise past_last_time(f"the last window of time {t!r}", int(self._end(last)),
                                 self.lateness)
        windows, opened = self._windows, self._opened
        for i in range(first, last + 1):
            by_key = windows.get(i)
            if by_key is None:
                windows[i] = {k: [x]}
                heapq.heappush(self._closing, i)
                if self._end(i) < self._due_us:
                    self._set_due(self._end(i))
            else:
                elements = by_key.get(k)
                if elements is not None:
                    elements.append(x)
                    continue
                by_key[k] = [x]
            if opened is not None:
                opened[i, k] = self._arrival
        if k is None and self._key is None:
            # Times whose microsecond is in [lo, hi) have the same first and
            # last windows: the fused step appends their elements here directly.
            self._lo = first_time(max(last * slide, int(self._end(first - 1))))
            self._hi = first_time(min((last + 1) * slide, int(self._end(first))))
            self._appends = tuple(windows[i][None].append for i in range(first, last + 1))
        return None

    def _hold(self, t: float, k: Any, metadata: list[Any]) -> None:
        us = event_micros(t)
        for i in range((us - self._size_us) // self._slide_us + 1, us // self._slide_us + 1):
            self._held_for(self._windows[i][k], metadata)

    def _take_closed(self, max_time: float) -> list[Closed]:
        if max_time < self._due:
            return []
        self._forget_slice()  # its windows may close now
        watermark, opened = watermark_micros(max_time, self._late_us), self._opened
        closing, ready = self._closing, []
        while closing and self._end(closing[0]) <= watermark:
            ready.append(heapq.heappop(closing))
        # Keys of one window in the order their windows opened.
        closed = [(self._end(i), 0 if opened is None else opened.pop((i, k), 0), k, w,
                   sliding_bounds(i, self.slide, self.interval) if self.bounds else None)
                  for i in ready for k, w in self._windows.pop(i).items()]
        self._set_due(self._end(closing[0] if closing else math.inf))
        return closed
