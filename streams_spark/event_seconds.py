"""Event times as Spark takes them: seconds within its timestamps, checked.

Spark's timestamps hold years 1 to 9999; a time beyond them would fail the
query with an overflow that names neither the node nor the element, so the
library checks each time first (:func:`on_spark`), or a batch of times at
once (:func:`event_seconds`, as :class:`~streams_spark.routing.Router`
does for the elements bound for a window).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streams.operators._late import seconds_of
from streams.operators.window_bounds import bad_time

__all__ = ["BEYOND", "FIRST_SECOND", "LAST_SECOND", "event_seconds", "on_spark"]

#: Spark's timestamps: years 1 to 9999, in seconds (Python's floats go further).
FIRST_SECOND, LAST_SECOND = -62135596800, 253402300799
BEYOND = ("the event time is beyond Spark's timestamps (years 1 to 9999); "
          "run this window in Python (gather() before it)")
_INF = float("inf")


def on_spark(seconds: float) -> float:
    """``seconds``, an event time, if Spark's timestamps hold it; else ValueError.

    Spark would fail on such a time with an overflow that names neither the
    node nor the element. NaN and infinities pass: :func:`seconds_of`
    refuses them first.

    Examples
    --------
    >>> on_spark(1.5)
    1.5
    >>> on_spark(1e15)
    Traceback (most recent call last):
    ...
    ValueError: the event time is beyond Spark's timestamps (years 1 to 9999); ...
    """
    if -_INF < seconds < FIRST_SECOND or LAST_SECOND < seconds < _INF:
        raise ValueError(BEYOND)
    return seconds


def event_seconds(times: list[Any]) -> tuple[np.ndarray, int, Exception | None]:
    """Event times as seconds, and the position and error of the first that fails.

    A time is a finite number or a datetime (its POSIX timestamp), checked
    as in-process (:func:`~streams.operators._late.seconds_of`, the same
    error); it also fails when it lies beyond Spark's timestamps
    (:func:`on_spark`). The seconds before the first failure are valid.

    Examples
    --------
    >>> event_seconds([1, 2.5])
    (array([1. , 2.5]), 2, None)
    >>> seconds, bad, error = event_seconds([1.0, "noon", 1e15])
    >>> seconds[:bad], bad, error  # doctest: +ELLIPSIS
    (array([1.]), 1, TypeError("an event time must be a number of seconds or a datetime, ..."))
    >>> event_seconds([1.0, float("nan")])[1:]
    (1, ValueError('an event time must be a finite number of seconds, got nan'))
    """
    n = len(times)
    out: np.ndarray | None = None
    # Exactly ints and floats at once; anything else (bools, datetimes) one by one.
    if set(map(type, times)) <= {float, int}:
        try:
            out = np.array(times, dtype=np.float64)
        except OverflowError:  # an int beyond floats: found below
            out = None
    failed: tuple[int, Exception] | None = None
    if out is None:
        out = np.empty(n, dtype=np.float64)
        for i, t in enumerate(times):
            try:
                out[i] = seconds_of(t)
            except Exception as e:
                failed = (i, e)
                break
    valid = n if failed is None else failed[0]
    head = out[:valid]
    non_finite = np.flatnonzero(~np.isfinite(head))
    if non_finite.size:  # NaN or an infinity: refused as seconds_of refuses it
        i = int(non_finite[0])
        failed, head = (i, bad_time(float(head[i]))), head[:i]
    beyond = np.flatnonzero(((head > -_INF) & (head < FIRST_SECOND))
                            | ((head > LAST_SECOND) & (head < _INF)))
    if beyond.size:
        return out, int(beyond[0]), ValueError(BEYOND)
    if failed is not None:
        return out, failed[0], failed[1]
    return out, n, None
