"""Session windows on event time: ``session_window(gap, time=, lateness=, key=, bounds=)``.

A session is a run of elements whose timestamps are at most ``gap`` apart;
it closes on the watermark, as the other event-time windows do (see
:mod:`streams.operators.event_windows`, whose base class it shares: the
watermark, keys, ``late``, and the methods an engine needs to run it by key
group).
"""

from __future__ import annotations

import bisect
import heapq
import math
from operator import itemgetter
from typing import Any

from ..core import Stream
from ..metadata import release_refs, retain_refs
from ..spec import EventTime
from ._checks import one_key
from .durations import check_interval
from .event_windows import Closed, _EventWindows
from .window_bounds import (
    LAST_MICROS,
    TIME_MICROS,
    bad_time,
    closes_at,
    event_micros,
    micros_of,
    past_last_time,
    seconds,
    watermark_micros,
)

__all__ = ["SessionWindow"]

_start = itemgetter(0)  # a session's first microsecond
_created = itemgetter(3)  # the arrival number of a session's first element


@Stream.register_api()
class SessionWindow(_EventWindows):
    """Group elements into sessions separated by ``gap`` seconds of event time.

    Two elements are in one session when their timestamps are at most
    ``gap`` apart, directly or through other elements of the session (an
    element bridging two sessions merges them); elements exactly ``gap``
    apart are in one session, as in Spark's ``session_window()``, Flink and
    bytewax. Times are compared to the microsecond, as Spark compares them
    (0.9 is a gap of 0.6 after 0.3, though ``0.3 + 0.6 < 0.9`` in floats;
    see :mod:`streams.operators.window_bounds`). A session is emitted when
    the watermark (largest timestamp seen minus ``lateness``) passes its
    last timestamp plus ``gap``, and at ``close()``: an element at exactly
    that time, on time, still joins it, whichever keys' elements moved the
    watermark there. An element that joins no open session and whose own
    session would already be closed is late (see :attr:`late`). Any other
    is on time, also one within ``gap`` of a session already emitted,
    which it would have joined had it come before: it joins the open
    session it reaches, or starts one (``[0, 6, 1]`` with a gap of 5:
    ``[0]``, then ``[6, 1]``), as in Flink. Emitted sessions are not kept
    to be compared with: the state stays bounded by the watermark.

    Parameters
    ----------
    gap : float or str
        The inactivity, in seconds, that ends a session: to the nearest
        microsecond, at least one.
    time : callable or key
        ``time(x)`` (or ``x[time]``) is ``x``'s timestamp in seconds, or a
        ``datetime``.
    lateness : float or str
        How far behind the largest timestamp seen an element may be and
        still be counted.
    key : callable or hashable, optional
        Sessions per ``key(x)`` (or ``x[key]``), emitted as ``(key, elements)``.
    bounds : bool
        Emit each session as a :class:`~streams.Window` ``(start, end,
        elements)``: from its first element's time to one gap after its
        last one's, to the nearest microsecond (see
        :mod:`streams.operators.window_bounds`).

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

    With its bounds, to label each session by its time:

    >>> source = Stream()
    >>> L = source.session_window(5, time=1, key=0, bounds=True).sink_to_list()
    >>> for x in [("a", 0), ("a", 3), ("b", 20)]:
    ...     source.emit(x)
    >>> source.close()
    >>> [(user, w.start, w.end, len(w.elements)) for user, w in L]
    [('a', 0.0, 8.0, 2), ('b', 20.0, 25.0, 1)]
    """

    # Times are compared in whole microseconds (window_bounds.event_micros),
    # as Spark's session_window() compares them: in float seconds 0.3 + 0.6
    # is 0.8999999999999999, which put 0.9 a gap after 0.3 outside the
    # session Spark gives both.
    # _by_seq: streamz's metadata of held elements, by arrival number (see
    # _EventWindows._held), until their session closes.
    __slots__ = ("_by_seq", "_closing", "_gap_us", "_seq", "_sessions", "_units", "gap")
    _operator = "session_window"
    _params = ("gap", "time", "lateness", "key", "bounds")
    _state = ("_sessions", "_max_time", "_seq", "_unsent", "_units")
    _state_added = ("_unsent", "_units")  # older checkpoints: see restore()

    def __init__(self, upstream: Stream[Any], gap: float | str, time: Any = None,
                 lateness: float | str = 0.0, key: Any = None, bounds: bool = False,
                 **kwargs: Any) -> None:
        op = "session_window"
        self.gap = check_interval(op, gap, "gap")
        self._setup(op, time, lateness, key, bounds)
        self._gap_us = micros_of(op, "gap", self.gap)
        # key -> open sessions, each [first, last (microseconds), [(arrival,
        # element)...], created, the key of its first element], by first. A
        # key's sessions never overlap (an element within a gap of two joins
        # both), so they are in order of their last too: the sessions an
        # element touches are next to each other, found by bisection, and
        # those the watermark closes come first.
        self._sessions: dict[Any, list[list[Any]]] = {}
        self._seq = 0  # arrivals, to keep a merged session in arrival order
        # (microsecond after which a session of the key may close, arrival,
        # key): when the watermark passes it, the key's sessions are looked
        # at, and only then, so closing costs nothing per key that stays
        # open. Entries of sessions extended since are stale; they are
        # skipped when popped.
        self._closing: list[tuple[int, int, Any]] = []
        self._units = "micros"  # in checkpoints: older ones held the sessions' times in seconds
        self._by_seq: dict[int, list[Any]] = {}
        Stream.__init__(self, upstream, **kwargs)

    def _event_time(self) -> EventTime:
        return EventTime(self.time, self.gap, self.lateness, session=True, key=self.key,
                         bounds=self.bounds)

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("_units") != "micros":  # a checkpoint from before: times in seconds
            # (Two sessions that their microseconds put within a gap stay two
            # until an element joins them, as two sessions do at any time.)
            state = {**state, "_units": "micros", "_sessions": {
                k: [[event_micros(s[0]), event_micros(s[1]), *s[2:]] for s in sessions]
                for k, sessions in state["_sessions"].items()}}
        super().restore({"_unsent": [], **state})  # checkpoints from before _unsent lack it
        # Checkpoints written before kept a key's sessions in the order made,
        # and not the key of each session's first element: asked of it here.
        self._sessions = {k: sorted((s if len(s) > 4 else [*s, self._first_key(k, s)]
                                     for s in sessions), key=_start)
                          for k, sessions in self._sessions.items()}
        self._closing = [(s[1] + self._gap_us, s[3], k)
                         for k, sessions in self._sessions.items() for s in sessions]
        heapq.heapify(self._closing)

    def _first_key(self, k: Any, session: list[Any]) -> Any:
        """The key of ``session``'s first element, for a session restored without it."""
        return k if self._key is None else one_key(self._key(session[2][0][1]))

    def _arrive_as(self, seq: int, max_time: float) -> None:
        super()._arrive_as(seq, max_time)
        self._seq = seq  # sessions are ordered by their elements' numbers: any rising ones do

    def _next_close(self) -> float:
        if not self._closing:
            return math.inf
        # A session closes once the watermark is past its end: at its end + 1.
        return closes_at(self._closing[0][0] + 1, self._late_us)

    def _place(self, x: Any, t: float, k: Any) -> str | None:
        try:  # event_micros(t), written in: once per element
            us = round(t * TIME_MICROS)
        except (ValueError, OverflowError):  # NaN, infinities
            raise bad_time(t) from None
        gap = self._gap_us
        sessions = self._sessions.get(k)
        if sessions is None:
            sessions, hi, lo = [], 0, 0
        else:
            # The sessions touching us: those that start at us + gap at the
            # latest (before hi) and end at us - gap at the earliest (from lo).
            hi = len(sessions)
            if sessions[-1][0] > us + gap:  # not the usual in-order case
                hi = bisect.bisect_right(sessions, us + gap, key=_start)
            lo = hi
            while lo and sessions[lo - 1][1] + gap >= us:
                lo -= 1
        if lo == hi and us + gap < watermark_micros(self._max_time, self._late_us):
            return f"starts a session that ends at {seconds(us + gap)!r}, already closed"
        if us + gap + self._late_us >= LAST_MICROS:  # before any change: _next_close() could
            # not say when its session closes (one microsecond after its end plus lateness)
            raise past_last_time(f"the session of time {t!r}", us + gap, self.lateness)
        seq = self._seq
        self._seq += 1
        if lo == hi:
            sessions.insert(hi, [us, us, [(seq, x)], seq, k])
            self._sessions[k] = sessions
            heapq.heappush(self._closing, (us + gap, seq, k))
            return None
        if hi - lo == 1:  # the usual case: the element extends one session
            session = sessions[lo]
            session[2].append((seq, x))  # the latest arrival: order is kept
            if us < session[0]:
                session[0] = us
            elif us > session[1]:
                session[1] = us
                heapq.heappush(self._closing, (us + gap, seq, k))
            return None
        touching = sessions[lo:hi]
        first = min(touching, key=_created)  # its first element is the merged one's
        merged = [min(us, touching[0][0]), max(us, touching[-1][1]),
                  [*heapq.merge(*(s[2] for s in touching)), (seq, x)], first[3], first[4]]
        sessions[lo:hi] = [merged]
        heapq.heappush(self._closing, (merged[1] + gap, seq, k))
        return None

    def _let_go(self) -> None:
        super()._let_go()
        for metadata in self._by_seq.values():  # restored arrival numbers start again
            release_refs(metadata)
        self._by_seq = {}

    def _hold(self, t: float, k: Any, metadata: list[Any]) -> None:
        retain_refs(metadata)
        self._by_seq[self._seq - 1] = metadata  # the element just placed

    def _take_closed(self, max_time: float) -> list[Closed]:
        ready: list[Closed] = []
        closing, gap = self._closing, self._gap_us
        # watermark_micros(max_time, lateness), written in: once per element
        # that moves the largest time.
        watermark = (round(max_time * TIME_MICROS) - self._late_us
                     if -math.inf < max_time < math.inf else max_time)
        while closing and closing[0][0] < watermark:
            k = heapq.heappop(closing)[2]
            sessions = self._sessions.get(k)
            if not sessions:
                continue  # an entry of sessions already emitted
            n = 0  # the sessions closed: the first ones, that end first
            for s in sessions:
                end = s[1] + gap
                if end >= watermark:
                    break
                elements = [x for _, x in s[2]]
                if self._by_seq:  # their metadata goes with the list emitted
                    self._held_by(elements, [self._by_seq.pop(seq, None) for seq, _ in s[2]])
                # Its first element's own key, as a window's (and Spark's):
                # not the one of the element whose entry closed it (2.0, 2).
                ready.append((end, s[3], s[4], elements,
                              (seconds(s[0]), seconds(end)) if self.bounds else None))
                n += 1
            if n == len(sessions):
                del self._sessions[k]
            else:
                del sessions[:n]
        ready.sort(key=lambda r: (r[0], r[1]))
        return ready
