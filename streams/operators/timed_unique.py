"""Processing-time windows of unique elements: timed_window_unique (streamz's).

Its windows follow the clock as :class:`~streams.operators.timed.TimedWindow`'s
do; each keeps the first (or last) element of every key.
"""

from __future__ import annotations

from typing import Any

from toolz import identity

from ..core import Stream
from ._checks import key_function
from .timed import TimedWindow

__all__ = ["TimedWindowUnique"]


@Stream.register_api()
class TimedWindowUnique(TimedWindow):
    """Emit, every ``interval`` seconds, a tuple of the elements with distinct keys.

    Like :meth:`timed_window` (empty windows included, checked on arrival,
    flushed at close), but a key seen twice in a window is kept once.

    Parameters
    ----------
    interval : float or str
    key : callable or hashable
        ``key(x)`` or ``x[key]``; the element itself by default.
    keep : {"first", "last"}
        Which occurrence to keep; the tuple follows the kept elements' order.

    Examples
    --------
    >>> from streams import Stream, VirtualClock, use_clock
    >>> with use_clock(VirtualClock()) as clock:
    ...     source = Stream()
    ...     L = source.timed_window_unique(1.0, key=len, keep="last").sink_to_list()
    >>> for s in ["f", "b", "fo", "ba", "foo"]:
    ...     source.emit(s)
    >>> clock.advance(1.0)
    >>> L
    [('b', 'ba', 'foo')]
    """

    __slots__ = ("_key", "keep", "key")
    _operator = "timed_window_unique"
    _params = ("interval", "key", "keep")

    def __new__(cls, upstream: Stream[Any], interval: float | str, key: Any = identity,
                keep: str = "first", **kwargs: Any) -> Any:
        # Its windows follow the clock, as streamz's: TimedWindow's event-time
        # and sliding arguments would be taken and ignored (keys not unique).
        given = [f"{n}=" for n in ("time", "lateness", "slide", "bounds") if n in kwargs]
        if given:
            raise TypeError(
                f"timed_window_unique(): {', '.join(given)} not supported: its windows "
                "follow the clock, as streamz's; on event time, or sliding, use "
                "timed_window(..., time=, slide=) and keep each window's unique elements "
                "in a map()")
        return super(TimedWindow, cls).__new__(cls)

    def __init__(self, upstream: Stream[Any], interval: float | str, key: Any = identity,
                 keep: str = "first", **kwargs: Any) -> None:
        if keep not in ("first", "last"):
            raise ValueError(f"timed_window_unique(): keep must be 'first' or 'last', "
                             f"got {keep!r}")
        self.key = key
        self._key = key_function(key, self._operator)
        self.keep = keep
        super().__init__(upstream, interval, **kwargs)

    def _new_buffer(self) -> Any:
        return {}

    def _add(self, x: Any) -> Any:
        try:
            k = self._key(x)
            if self.keep == "last":
                self._buffer.pop(k, None)  # re-insert: order follows the kept element
                self._buffer[k] = x
            elif k not in self._buffer:
                self._buffer[k] = x
        except Exception as e:
            return self._fail(x, e)
        return None

    def _take(self) -> Any:
        window, self._buffer = tuple(self._buffer.values()), {}
        return window
