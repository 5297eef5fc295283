"""Keyed state that expires: which keys went ``ttl`` seconds of event time without an element.

``scan(..., key=, ttl=, time=)`` and ``stateful_map(..., key=, ttl=, time=)``
keep an :class:`Expiry` next to their per-key states. Event time is the
largest timestamp seen by the node (all keys together); a key whose last
element is more than ``ttl`` behind it is expired, checked at every element
before that element is taken in (so a key idle too long starts again from
``start``). A key seen within ``ttl`` is never expired. Times are compared
to the microsecond, as windows cut them: a key last seen at 0.8 is not
expired at 1.1 with ``ttl=0.3``, though ``1.1 - 0.8`` is
0.30000000000000004 as floats.

Because the event time is shared by all keys, such a node does not declare
its keys independent (no ``key`` trait): engines run it in element order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ..core import Stream
from ..spec import Traits
from ._checks import key_function
from ._late import event_seconds
from .durations import check_interval
from .window_bounds import event_micros, micros, micros_of, watermark_micros

__all__ = ["ExpiringKeys", "Expiry", "check_ttl"]


def check_ttl(op: str, ttl: Any, time: Any, key: Any) -> Expiry | None:
    """The :class:`Expiry` for ``ttl=`` (None without it), its arguments checked now."""
    if ttl is None:
        if time is not None:
            raise ValueError(f"{op}(): time= only serves ttl= (how long a key's state lives "
                             "in event time); give ttl= too, or drop time=")
        return None
    seconds = check_interval(op, ttl, "ttl")
    if time is None:
        raise ValueError(f"{op}(): ttl= needs time=, the element's event time (ttl counts "
                         "event time, not the clock); give time=lambda x: ... (seconds or "
                         "a datetime)")
    if key is None:
        raise ValueError(f"{op}(): ttl= needs key=: it expires one key's state")
    micros_of(op, "ttl", seconds)  # fails now on a ttl that has no microseconds
    return Expiry(seconds, time)


class Expiry:
    """The last event time of each key, and the keys that expire as time moves.

    Examples
    --------
    >>> e = Expiry(10, time=lambda x: x)
    >>> list(e.advance("a", 0)), list(e.advance("b", 5)), list(e.advance("b", 10))
    ([], [], [])
    >>> list(e.advance("b", 11))   # "a" last seen at 0, now 11 > 0 + 10
    ['a']
    >>> list(e.close())
    ['b']
    """

    __slots__ = ("_count", "_heap", "_live", "_max_us", "_ttl_us", "last", "max_time", "time",
                 "ttl")

    def __init__(self, ttl: float, time: Any) -> None:
        self.ttl = ttl
        self._ttl_us = micros(ttl)
        self.time = key_function(time)
        self.last: dict[Any, float] = {}  # in the order their times were last raised
        self.max_time = -math.inf
        self._max_us = -math.inf  # max_time's microsecond
        # (last time's microsecond, rank, key): rank follows ``last``'s order, so
        # ties expire in the same order after a restore; entries that are no
        # longer live are skipped.
        self._heap: list[tuple[int, int, Any]] = []
        self._live: dict[Any, int] = {}  # key -> the rank of its current entry
        self._count = 0

    def seconds(self, x: Any) -> float:
        """``x``'s event time."""
        return event_seconds(self.time, x)

    def advance(self, k: Any, t: float) -> Iterator[Any]:
        """Move event time to ``t`` (if later), yield the keys that expire, then record ``k``.

        ``k`` itself may expire (idle for longer than ``ttl``) before it is
        recorded at ``t``. Consume the iterator fully.
        """
        hash(k)  # first: a key that cannot be one, or a time without a
        us = event_micros(t)  # microsecond, fails the element before it moves anything
        if t > self.max_time:
            self.max_time, self._max_us = t, us
        yield from self._expire(final=False)
        if t <= self.last.get(k, -math.inf):
            return  # its entry stands as it is
        # A later time: a new entry; the old one is stale (an earlier time),
        # and the key moves to the end of ``last``, as its entry's rank does.
        self.last.pop(k, None)
        self.last[k] = t
        heapq.heappush(self._heap, (us, self._count, k))
        self._live[k] = self._count
        self._count += 1

    def forget(self, k: Any) -> None:
        """Stop tracking ``k`` (its state was discarded)."""
        self.last.pop(k, None)
        self._live.pop(k, None)

    def close(self) -> Iterator[Any]:
        """End of stream: every key still tracked expires, oldest first."""
        return self._expire(final=True)

    def _expire(self, final: bool) -> Iterator[Any]:
        heap = self._heap
        # The definition itself, in whole microseconds (exact, as floats'
        # differences are not): a key seen within ttl is never expired.
        while heap and (final or self._max_us - heap[0][0] > self._ttl_us):
            _, rank, k = heapq.heappop(heap)
            if self._live.get(k) == rank:
                del self.last[k], self._live[k]
                yield k
        if len(heap) > 2 * len(self.last) + 16:  # many stale entries: rebuild
            self._rebuild()

    def _rebuild(self) -> None:
        self._heap = [(event_micros(t), i, k) for i, (k, t) in enumerate(self.last.items())]
        heapq.heapify(self._heap)
        self._live = {k: i for i, k in enumerate(self.last)}
        self._count = len(self._heap)

    def snapshot(self) -> dict[str, Any]:
        """The tracked keys and event time (the heap is rebuilt from them)."""
        return {"last": dict(self.last), "max_time": self.max_time}

    def restore(self, state: dict[str, Any]) -> None:
        """Set the state from a :meth:`snapshot`."""
        self.last = dict(state["last"])
        self.max_time = state["max_time"]
        self._max_us = watermark_micros(self.max_time, 0)
        self._rebuild()


class ExpiringKeys(Stream[Any]):
    """The base of a keyed node whose keys may expire (``key=``, ``ttl=``).

    It gives the node's traits (routable by key unless keys expire, since
    expiry follows the event time of all keys together) and carries the
    :class:`Expiry` in snapshots. A subclass sets ``key``, ``ttl`` and
    ``_expiry`` (from :func:`check_ttl`).
    """

    __slots__ = ()
    key: Any
    ttl: Any
    _expiry: Expiry | None

    def _traits(self) -> Traits:
        # Keyed, each key's state is independent: an engine may route by key.
        # Not with ttl: expiry follows the event time of all keys together.
        return replace(super()._traits(), key=self.key if self.ttl is None else None)

    def snapshot(self) -> dict[str, Any]:
        state = super().snapshot()
        if self._expiry is not None:
            state["expiry"] = self._expiry.snapshot()
        return state

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if self._expiry is not None:
            self._expiry.restore(state["expiry"])
