"""Event-time windows beyond the tumbling one: sliding, keyed, and session windows.

``timed_window(size, slide=, time=, lateness=, key=)`` and
``session_window(gap, time=, lateness=, key=)`` cut the stream by the
elements' own timestamps. As for the tumbling ``timed_window(..., time=)``:

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
from ..pending import gather_pending
from ..spec import EventTime, Traits
from ._checks import key_function
from ._late import LateElementError, LateSide, event_seconds
from .timed import _window_index, check_interval

__all__ = ["SessionWindow", "SlidingTimedWindow"]


class _EventWindows(LateSide):
    """What sliding and session windows share: event time, keys, watermark, emission."""

    __slots__ = ("_key", "_max_time", "_time", "key", "lateness", "time")
    _local_only = None
    _graphviz_shape = "octagon"

    def _setup(self, op: str, time: Any, lateness: Any, key: Any) -> None:
        if time is None:
            raise ValueError(f"{op}(): time= is required: these windows follow the elements' "
                             "event time; give time=lambda x: ... (seconds or a datetime)")
        self.time = time
        self._time = key_function(time)
        self.lateness = check_interval(op, lateness, "lateness", zero=True)
        self.key = key
        self._key = None if key is None else key_function(key)
        self._max_time = -math.inf

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
        return self._arrive(x, t, k)

    def _stamp(self, x: Any) -> tuple[float, Any]:
        """``x``'s event time and key (raising what the user's functions raise)."""
        t = event_seconds(self._time, x)
        k = None if self._key is None else self._key(x)
        hash(k)
        return t, k

    def _fusable(self) -> bool:
        return True

    def _fuse(self, f: Fuser, x: str) -> None:
        # update()'s calls of the user's functions, under the node's policy,
        # then _arrive (or a subclass's faster step, _fuse_arrive).
        t, k = f.fresh("t"), f.fresh("k")
        number = f.bind((int, float), "number")
        # f.apply: a simple time or key function is written in, not called.
        code = (f"{f.apply(t, self._time, x, hint='time')}\n"
                f"if {t}.__class__ is not float and not isinstance({t}, {number}):\n"
                f"    {t} = float({t}.timestamp())")
        if self._key is not None:
            code += f"\n{f.apply(k, self._key, x, hint='key')}\nhash({k})"
        f.step(self, x, code)
        self._fuse_arrive(f, x, t, k if self._key is not None else "None")
        return None

    def _fuse_arrive(self, f: Fuser, x: str, t: str, k: str) -> None:
        f.line(f"return {f.bind(self, 'node')}._arrive({x}, {t}, {k})")

    def _arrive(self, x: Any, t: float, k: Any) -> Any:
        """Place ``x``, of time ``t`` and key ``k``; emit the windows it closes."""
        watermark = self._max_time - self.lateness
        late = self._place(x, t, k, watermark)
        if late is not None:
            return self._fail(x, LateElementError(
                f"event time {t!r} {late}: the watermark is {watermark!r} (largest time "
                f"seen {self._max_time!r} - lateness {self.lateness!r}); raise lateness= "
                "to accept it, or sink node.late"))
        if t <= self._max_time:
            return None
        self._max_time = t
        return self._emit_closed(t - self.lateness)

    def _place(self, x: Any, t: float, k: Any, watermark: float) -> str | None:
        """Put ``x`` in its windows, or say why it is late."""
        raise NotImplementedError

    def _take_closed(self, watermark: float) -> list[tuple[float, int, Any, list[Any]]]:
        """Take the windows the watermark closed, by end then opening.

        Each as ``(end, opened, key, elements)``; ``opened`` orders windows of
        one end as they were opened, across keys, once :meth:`_arrive_as`
        numbers the elements (else it may be 0).
        """
        raise NotImplementedError

    def _emit_closed(self, watermark: float) -> Any:
        closed = self._take_closed(watermark)
        if not closed:
            return None
        keyed = self._key is not None
        return gather_pending([self._emit((k, w) if keyed else w) for _, _, k, w in closed])

    def _flush(self) -> Any:
        return self._emit_closed(math.inf)

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
        """The watermark at which a window may close next (inf: none is open)."""
        raise NotImplementedError

    def _close_to(self, max_time: float) -> list[tuple[tuple[float, int], Any]]:
        """Take what the largest time ``max_time`` closes, as ``((end, opened), output)``.

        The outputs are what :meth:`_emit_closed` emits, in its order; sorting
        by ``(end, opened)`` the outputs of every key group closed at one
        element orders them as one node closing all keys would.
        """
        self._max_time = max_time
        closed = self._take_closed(max_time - self.lateness)
        keyed = self._key is not None
        return [((end, opened), (k, w) if keyed else w) for end, opened, k, w in closed]


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
    """

    # _lo, _hi, _appends: the times whose windows are those the previous
    # element joined (without key=), and those windows' appends, which the
    # fused step uses first.
    # _opened: (window index, key) -> the number (see _arrive_as) of the
    # element that opened it; None unless an engine numbers the elements.
    __slots__ = ("_appends", "_arrival", "_due", "_hi", "_lo", "_opened", "_windows",
                 "interval", "slide")
    _operator = "timed_window"
    _params = ("interval", "time", "lateness", "slide", "key")
    _state = ("_windows", "_max_time", "_opened")

    def __init__(self, upstream: Stream[Any], interval: float | str, time: Any = None,
                 lateness: float | str = 0.0, slide: float | str | None = None, key: Any = None,
                 **kwargs: Any) -> None:
        op = "timed_window"
        self.interval = check_interval(op, interval)
        self.slide = self.interval if slide is None else check_interval(op, slide, "slide")
        if self.slide > self.interval:
            raise ValueError(f"{op}(): slide={slide!r} is longer than the window "
                             f"({interval!r}): elements between windows would be in none; "
                             "give slide <= interval")
        self._setup(op, time, lateness, key)
        # window index -> key -> elements; insertion order breaks ties in time.
        # By index first: the indices open at once are few ((size + lateness)
        # / slide), whatever the number of keys, so closing scans only them.
        self._windows: dict[int, dict[Any, list[Any]]] = {}
        self._due = math.inf  # when the earliest open window ends
        self._opened: dict[tuple[int, Any], int] | None = None
        self._arrival = 0
        self._forget_slice()
        Stream.__init__(self, upstream, **kwargs)

    def _event_time(self) -> EventTime:
        return EventTime(self.time, self.interval, self.lateness, slide=self.slide,
                         key=self.key)

    def restore(self, state: dict[str, Any]) -> None:
        super().restore({"_opened": None, **state})  # checkpoints before _opened
        self._due = min(self._windows, default=math.inf) * self.slide + self.interval
        self._forget_slice()

    def _arrive_as(self, seq: int, max_time: float) -> None:
        super()._arrive_as(seq, max_time)
        self._arrival = seq
        if self._opened is None:
            self._opened = {}

    def _next_close(self) -> float:
        return self._due

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
            f"    if {t} - {node}.lateness >= {node}._due:\n"
            f"        return {node}._emit_closed({t} - {node}.lateness)")

    def _first(self, t: float) -> int:
        """The smallest ``i`` whose window ``[i*slide, i*slide + size)`` ends after ``t``."""
        size, slide = self.interval, self.slide
        i = math.floor((t - size) / slide) + 1
        while i * slide + size <= t:  # floats: check against the bounds themselves
            i += 1
        while (i - 1) * slide + size > t:
            i -= 1
        return i

    def _place(self, x: Any, t: float, k: Any, watermark: float) -> str | None:
        first = self._first(t)
        if first * self.slide + self.interval <= watermark:
            return (f"falls in window [{first * self.slide!r}, "
                    f"{first * self.slide + self.interval!r}), already emitted")
        windows, opened = self._windows, self._opened
        last = _window_index(t, self.slide)
        for i in range(first, last + 1):
            by_key = windows.get(i)
            if by_key is None:
                windows[i] = {k: [x]}
                self._due = min(self._due, i * self.slide + self.interval)
            else:
                elements = by_key.get(k)
                if elements is not None:
                    elements.append(x)
                    continue
                by_key[k] = [x]
            if opened is not None:
                opened[i, k] = self._arrival
        if k is None and self._key is None:
            # Times in [lo, hi) have the same first and last windows (the
            # bounds are the products _first and _window_index compare): the
            # fused step appends their elements here directly.
            size, slide = self.interval, self.slide
            self._lo = max(last * slide, (first - 1) * slide + size)
            self._hi = min((last + 1) * slide, first * slide + size)
            self._appends = tuple(windows[i][None].append for i in range(first, last + 1))
        return None

    def _take_closed(self, watermark: float) -> list[tuple[float, int, Any, list[Any]]]:
        if watermark < self._due:
            return []
        self._forget_slice()  # its windows may close now
        size, slide, opened = self.interval, self.slide, self._opened
        ready = sorted(i for i in self._windows if i * slide + size <= watermark)
        # Keys of one window in the order their windows opened.
        closed = [(i * slide + size, 0 if opened is None else opened.pop((i, k), 0), k, w)
                  for i in ready for k, w in self._windows.pop(i).items()]
        self._due = min(self._windows, default=math.inf) * slide + size
        return closed


@Stream.register_api()
class SessionWindow(_EventWindows):
    """Group elements into sessions separated by ``gap`` seconds of event time.

    Two elements are in one session when their timestamps are at most
    ``gap`` apart, directly or through other elements of the session (an
    element bridging two sessions merges them); elements exactly ``gap``
    apart are in one session, as in Spark's ``session_window()``, Flink and
    bytewax. A session is emitted when
    the watermark (largest timestamp seen minus ``lateness``) reaches its
    last timestamp plus ``gap``, and at ``close()``. An element that joins
    no open session and whose own session would already be closed is late
    (see :attr:`late`).

    Parameters
    ----------
    gap : float or str
        The inactivity, in seconds, that ends a session.
    time : callable or key
        ``time(x)`` (or ``x[time]``) is ``x``'s timestamp in seconds, or a
        ``datetime``.
    lateness : float or str
        How far behind the largest timestamp seen an element may be and
        still be counted.
    key : callable or hashable, optional
        Sessions per ``key(x)`` (or ``x[key]``), emitted as ``(key, elements)``.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.session_window(5, time=lambda x: x).sink_to_list()
    >>> for t in [1, 3, 7, 20, 30]:
    ...     source.emit(t)
    >>> L
    [[1, 3, 7], [20]]
    >>> source.close()
    >>> L
    [[1, 3, 7], [20], [30]]

    Per user, accepting elements up to 10 seconds late (``("a", 8)`` joins
    the session of ``("a", 12)``):

    >>> source = Stream()
    >>> L = source.session_window(5, time=1, lateness=10, key=0).sink_to_list()
    >>> for x in [("a", 0), ("b", 1), ("a", 12), ("a", 8), ("b", 30)]:
    ...     source.emit(x)
    >>> L
    [('a', [('a', 0)]), ('b', [('b', 1)]), ('a', [('a', 12), ('a', 8)])]
    >>> source.close()
    >>> L[-1]
    ('b', [('b', 30)])
    """

    __slots__ = ("_closing", "_seq", "_sessions", "gap")
    _operator = "session_window"
    _params = ("gap", "time", "lateness", "key")
    _state = ("_sessions", "_max_time", "_seq")

    def __init__(self, upstream: Stream[Any], gap: float | str, time: Any = None,
                 lateness: float | str = 0.0, key: Any = None, **kwargs: Any) -> None:
        self.gap = check_interval("session_window", gap, "gap")
        self._setup("session_window", time, lateness, key)
        # key -> open sessions, each [start, end, [(arrival, element)...], created].
        self._sessions: dict[Any, list[list[Any]]] = {}
        self._seq = 0  # arrivals, to keep a merged session in arrival order
        # (time a session of the key may close, arrival, key): when the
        # watermark passes it, the key's sessions are looked at, and only
        # then, so closing costs nothing per key that stays open. Entries of
        # sessions extended since are stale; they are skipped when popped.
        self._closing: list[tuple[float, int, Any]] = []
        Stream.__init__(self, upstream, **kwargs)

    def _event_time(self) -> EventTime:
        return EventTime(self.time, self.gap, self.lateness, session=True, key=self.key)

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._closing = [(s[1] + self.gap, s[3], k)
                         for k, sessions in self._sessions.items() for s in sessions]
        heapq.heapify(self._closing)

    def _arrive_as(self, seq: int, max_time: float) -> None:
        super()._arrive_as(seq, max_time)
        self._seq = seq  # sessions are ordered by their elements' numbers: any rising ones do

    def _next_close(self) -> float:
        return self._closing[0][0] if self._closing else math.inf

    def _place(self, x: Any, t: float, k: Any, watermark: float) -> str | None:
        gap = self.gap
        sessions = self._sessions.get(k, [])
        touching = [s for s in sessions if s[0] - gap <= t <= s[1] + gap]
        if not touching and t + gap <= watermark:
            return f"starts a session that ends at {t + gap!r}, already closed"
        seq = self._seq
        self._seq += 1
        if not touching:
            self._sessions.setdefault(k, []).append([t, t, [(seq, x)], seq])
            heapq.heappush(self._closing, (t + gap, seq, k))
            return None
        if len(touching) == 1:  # the usual case: the element extends one session
            session = touching[0]
            session[2].append((seq, x))  # the latest arrival: order is kept
            if t < session[0]:
                session[0] = t
            elif t > session[1]:
                session[1] = t
                heapq.heappush(self._closing, (t + gap, seq, k))
            return None
        merged = [min(t, *(s[0] for s in touching)), max(t, *(s[1] for s in touching)),
                  [*heapq.merge(*(s[2] for s in touching)), (seq, x)],
                  min(s[3] for s in touching)]
        self._sessions[k] = [s for s in sessions if all(s is not u for u in touching)] + [merged]
        heapq.heappush(self._closing, (merged[1] + gap, seq, k))
        return None

    def _take_closed(self, watermark: float) -> list[tuple[float, int, Any, list[Any]]]:
        ready: list[tuple[float, int, Any, list[Any]]] = []
        closing, gap = self._closing, self.gap
        while closing and closing[0][0] <= watermark:
            k = heapq.heappop(closing)[2]
            sessions = self._sessions.get(k)
            if not sessions:
                continue  # an entry of sessions already emitted
            keep = []
            for s in sessions:
                if s[1] + gap <= watermark:
                    ready.append((s[1] + gap, s[3], k, [x for _, x in s[2]]))
                else:
                    keep.append(s)
            if keep:
                self._sessions[k] = keep
            else:
                del self._sessions[k]
        ready.sort(key=lambda r: (r[0], r[1]))
        return ready
