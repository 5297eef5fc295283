"""Session windows on event time: ``session_window(gap, time=, lateness=, key=, bounds=)``.

A session is a run of elements whose timestamps are at most ``gap`` apart;
it closes on the watermark, as the other event-time windows do (see
:mod:`streams.operators.event_windows`, whose base class it shares: the
watermark, keys, ``late``, and the methods an engine needs to run it by key
group).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from ..core import Stream
from ..spec import EventTime
from .durations import check_interval
from .event_windows import Closed, _EventWindows
from .window_bounds import least_float, not_finite, session_bounds

__all__ = ["SessionWindow"]


@Stream.register_api()
class SessionWindow(_EventWindows):
    """Group elements into sessions separated by ``gap`` seconds of event time.

    Two elements are in one session when their timestamps are at most
    ``gap`` apart, directly or through other elements of the session (an
    element bridging two sessions merges them); elements exactly ``gap``
    apart are in one session, as in Spark's ``session_window()``, Flink and
    bytewax. A session is emitted when
    the watermark (largest timestamp seen minus ``lateness``) passes its
    last timestamp plus ``gap``, and at ``close()``: an element at exactly
    that time, on time, still joins it, whichever keys' elements moved the
    watermark there. An element that joins no open session and whose own
    session would already be closed is late (see :attr:`late`).

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

    __slots__ = ("_closing", "_seq", "_sessions", "gap")
    _operator = "session_window"
    _params = ("gap", "time", "lateness", "key", "bounds")
    _state = ("_sessions", "_max_time", "_seq", "_unsent")

    def __init__(self, upstream: Stream[Any], gap: float | str, time: Any = None,
                 lateness: float | str = 0.0, key: Any = None, bounds: bool = False,
                 **kwargs: Any) -> None:
        self.gap = check_interval("session_window", gap, "gap")
        self._setup("session_window", time, lateness, key, bounds)
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
        return EventTime(self.time, self.gap, self.lateness, session=True, key=self.key,
                         bounds=self.bounds)

    def restore(self, state: dict[str, Any]) -> None:
        super().restore({"_unsent": [], **state})  # checkpoints from before _unsent lack it
        self._closing = [(s[1] + self.gap, s[3], k)
                         for k, sessions in self._sessions.items() for s in sessions]
        heapq.heapify(self._closing)

    def _arrive_as(self, seq: int, max_time: float) -> None:
        super()._arrive_as(seq, max_time)
        self._seq = seq  # sessions are ordered by their elements' numbers: any rising ones do

    def _next_close(self) -> float:
        if not self._closing:
            return math.inf
        # The least largest time m whose watermark, m - lateness, passes the end.
        end, lateness = self._closing[0][0], self.lateness
        return least_float(lambda m: m - lateness > end, end + lateness)

    def _place(self, x: Any, t: float, k: Any) -> str | None:
        if not math.isfinite(t):  # sessions compare floats: sliding ones refuse it in event_micros
            raise not_finite(t)
        gap = self.gap
        sessions = self._sessions.get(k, [])
        touching = [s for s in sessions if s[0] - gap <= t <= s[1] + gap]
        if not touching and t + gap < self._max_time - self.lateness:
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

    def _take_closed(self, max_time: float) -> list[Closed]:
        ready: list[Closed] = []
        closing, gap = self._closing, self.gap
        watermark = max_time - self.lateness
        while closing and closing[0][0] < watermark:
            k = heapq.heappop(closing)[2]
            sessions = self._sessions.get(k)
            if not sessions:
                continue  # an entry of sessions already emitted
            keep = []
            for s in sessions:
                if s[1] + gap < watermark:
                    ready.append((s[1] + gap, s[3], k, [x for _, x in s[2]],
                                  session_bounds(s[0], s[1], gap) if self.bounds else None))
                else:
                    keep.append(s)
            if keep:
                self._sessions[k] = keep
            else:
                del self._sessions[k]
        ready.sort(key=lambda r: (r[0], r[1]))
        return ready
