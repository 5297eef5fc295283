"""The bounds of an event-time window, emitted with it: ``bounds=True``.

``timed_window(..., time=, bounds=True)`` and ``session_window(...,
bounds=True)`` emit each window as a :class:`Window`, ``(start, end,
elements)``, instead of the list of its elements (keyed: ``(key,
Window)``), as Flink's window functions read their window and Spark's
``window()`` is a column. A function of the window can then label its
result with the window's time, as Nexmark's q11 labels a session by its
start.

The bounds are in seconds (POSIX seconds when the times are datetimes), to
the microsecond, as Spark keeps timestamps, so that every engine gives the
same bounds:

* a tumbling or sliding window ``i`` is ``[i * slide, i * slide + size)``,
  each in whole microseconds (a ``slide`` of 0.1 s gives 0.3, not
  0.30000000000000004);
* a session starts at its first element's time and ends one gap after its
  last element's, as Spark's ``session_window()`` ends it.

An event time is taken to its nearest microsecond (:func:`event_micros`),
on Spark too, where it is not ``timestamp_seconds()``, which truncates: a
time of ``1_000_001 / 1e6`` seconds is 1,000,000.9999999999 microseconds as
floats, and its microsecond is 1,000,001, not 1,000,000. The microseconds end
at :data:`LAST_MICROS` (about 1.8e302 seconds): a window whose end plus
lateness is past it has no largest time seen that closes it, and the element
that would open it is the node's error (:func:`past_last_time`), in none of
its windows.
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

from ..errors import short_repr

__all__ = ["LAST_MICROS", "MICROS", "TIME_MICROS", "Window", "bad_time", "check_bounds",
           "closes_at", "event_micros", "first_time", "least_float", "micros", "micros_of",
           "past_last_time", "seconds", "sliding_bounds", "watermark_micros"]

T = TypeVar("T")

#: Microseconds in a second.
MICROS = 1_000_000
#: The same, to take an event time's microsecond in floating point, an int's too:
#: exact below 5.7e11 seconds, and one beyond a float's microseconds overflows.
TIME_MICROS = 1e6
_INF = math.inf
_FLOAT, _BITS, _SIGN = struct.Struct("<d"), struct.Struct("<Q"), 1 << 63


def _last_micros() -> int:
    """The microsecond of the largest float time whose microseconds a float holds."""
    t = sys.float_info.max / TIME_MICROS
    while not math.isinf(math.nextafter(t, _INF) * TIME_MICROS):
        t = math.nextafter(t, _INF)
    while math.isinf(t * TIME_MICROS):
        t = math.nextafter(t, 0.0)
    return round(t * TIME_MICROS)


#: The last microsecond an event time has (about 1.8e302 seconds after 1970): a
#: window whose end plus lateness is beyond it has no largest time seen that closes
#: it (:func:`closes_at` has no answer), and is refused (:func:`past_last_time`).
LAST_MICROS = _last_micros()


class Window(NamedTuple, Generic[T]):
    """An event-time window and its bounds, in seconds: ``[start, end)``.

    What ``timed_window(..., time=, bounds=True)`` and
    ``session_window(..., bounds=True)`` emit in place of a list of
    elements (keyed, as ``(key, Window)``).

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.timed_window(10, time=lambda x: x, bounds=True).sink_to_list()
    >>> for t in [1, 4, 12]:
    ...     source.emit(t)
    >>> L
    [Window(start=0.0, end=10.0, elements=[1, 4])]
    >>> window = L[0]
    >>> window.start, len(window.elements)
    (0.0, 2)
    """

    start: float
    end: float
    elements: list[T]


def micros(seconds: float) -> int:
    """``seconds`` in whole microseconds, as Spark takes a duration.

    >>> micros(0.1), micros(10.0005)
    (100000, 10000500)
    """
    return round(seconds * MICROS)


def event_micros(t: float) -> int:
    """The microsecond of the event time ``t`` (seconds): the nearest one.

    Python's ``round`` and Spark's ``rint`` both round half to even, so
    Spark cuts windows on the same microsecond (see
    :func:`streams_spark.stream.timestamp_of`). A time that is not finite
    has none: it fails, saying so.

    >>> event_micros(1_000_001 / 1e6), int(1_000_001 / 1e6 * 1e6)
    (1000001, 1000000)
    >>> event_micros(float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: an event time must be a finite number of seconds, got nan
    """
    try:
        return round(t * TIME_MICROS)  # a time's microsecond is taken as a duration's (micros)
    except (ValueError, OverflowError):
        raise bad_time(t) from None


def bad_time(t: float) -> ValueError:
    """The error for an event time ``t`` that has no microsecond, one message everywhere.

    NaN would stop a watermark, an infinity close every window at once; a
    finite time beyond about 1.8e302 seconds has no microseconds that a
    float holds.

    >>> bad_time(float("inf"))
    ValueError('an event time must be a finite number of seconds, got inf')
    >>> print(bad_time(1e303))
    an event time must be within 1.7e302 seconds of 1970 (it is counted in microseconds), ...
    """
    if isinstance(t, int) or math.isfinite(t):  # an int may be past a float's range
        return ValueError(f"an event time must be within 1.7e302 seconds of 1970 (it is counted "
                          f"in microseconds), got {short_repr(t)}")
    return ValueError(f"an event time must be a finite number of seconds, got {t!r}")


def first_time(us: int) -> float:
    """The least time, in seconds, whose microsecond (:func:`event_micros`) is ``us`` or later.

    ``event_micros`` never decreases as the time grows, so a time ``t`` is
    in the microseconds ``[a, b)`` exactly when ``first_time(a) <= t <
    first_time(b)``: a window's elements are found by comparing floats, and
    land where the integer arithmetic of its bounds (and Spark's) puts them.

    >>> first_time(600_000)
    0.5999995
    >>> event_micros(first_time(600_000)), event_micros(math.nextafter(first_time(600_000), 0))
    (600000, 599999)
    """
    return least_float(lambda t: micros(t) >= us, (us - 0.5) / MICROS)


def least_float(holds: Callable[[float], bool], guess: float) -> float:
    """The least finite float for which ``holds``, a test that once true stays true as floats grow.

    Found from ``guess`` by steps that double, then halve, through the
    floats in order: a few dozen tests, however far the answer is in units
    in the last place (near zero there are very many floats between two
    that differ by a second).

    >>> least_float(lambda m: m - 10 > -10, 0.0)  # the least m whose m - 10 is above -10
    8.881784197001254e-16
    """
    def at(k: int) -> float:
        t: float = _FLOAT.unpack(_BITS.pack(k if k >= 0 else -k | _SIGN))[0]
        return t

    bits = _BITS.unpack(_FLOAT.pack(guess))[0]
    k = -(bits & ~_SIGN) if bits & _SIGN else bits  # the floats in order, as integers
    up = not holds(guess)
    # Gallop to a pair (no, yes) of keys, then bisect between them.
    step = 1
    while bool(holds(at(k + step if up else k - step))) is not up:
        if step > _SIGN:
            raise ValueError("least_float(): no float holds")
        step *= 2
    no, yes = (k + step // 2, k + step) if up else (k - step, k - step // 2)
    while yes - no > 1:
        mid = (no + yes) // 2
        no, yes = (no, mid) if holds(at(mid)) else (mid, yes)
    return at(yes)


def watermark_micros(max_time: float, lateness_us: int) -> float:
    """The watermark in microseconds: the largest time seen, to its microsecond, less lateness.

    Infinite before any element (``-inf``) and at the end of the stream (``inf``).

    >>> watermark_micros(12.0000004, 2_000_000), watermark_micros(-math.inf, 0)
    (10000000, -inf)
    """
    if -_INF < max_time < _INF:  # never NaN (a time placed): event_micros' check not needed
        # The time's microsecond as event_micros takes it (a float product):
        # an int time's exact one differs beyond 9e9 s, and the element at the
        # largest time seen would fall behind its own watermark.
        return round(max_time * TIME_MICROS) - lateness_us
    return max_time


def closes_at(end_us: float, lateness_us: int) -> float:
    """The least largest time seen whose watermark reaches ``end_us`` (microseconds).

    A window that ends at ``end_us`` is closed once the largest time seen is
    this or later (:func:`watermark_micros`); ``inf`` for no window.

    >>> closes_at(10_000_000, 2_000_000), closes_at(math.inf, 0)
    (11.9999995, inf)
    """
    if math.isinf(end_us):
        return end_us
    return first_time(int(end_us) + lateness_us)


def past_last_time(what: str, end_us: int, lateness: float) -> ValueError:
    """The error for ``what``, a window ending at ``end_us``, that no watermark reaches.

    A window closes once the largest time seen is ``lateness`` past its
    end: when that is beyond :data:`LAST_MICROS`, no time closes it. The
    element that would open it is refused whole, before it joins any
    window, rather than held in windows that only ``close()`` would emit.

    >>> closes_at(LAST_MICROS, 0)  # the last window that a time still closes
    1.7976931348623154e+302
    >>> past_last_time("the window [0.0, 10.0)", 10_000_000, 1.7e302)  # doctest: +ELLIPSIS
    ValueError('the window [0.0, 10.0) ends at 10.0 s and would close lateness=1.7e+302 s ...')
    """
    return ValueError(f"{what} ends at {seconds(end_us)!r} s and would close lateness="
                      f"{lateness!r} s after it, past the last event time (1.7e302 seconds "
                      "of 1970, counted in microseconds): give a smaller lateness= (or window "
                      "size, or gap), or earlier times")


def micros_of(op: str, name: str, seconds: float, zero: bool = False) -> int:
    """An event-time duration's ``seconds`` (size, slide, gap, lateness) in microseconds, checked.

    Event time is compared to the microsecond, as Spark keeps timestamps: a
    size or slide under half a microsecond would be none (``zero``: a
    duration that may be none, as a lateness). One too long for a float's
    microseconds fails saying so.

    >>> micros_of("timed_window", "interval", 0.25), micros_of("join", "within", 0, zero=True)
    (250000, 0)
    >>> micros_of("timed_window", "slide", 1e-7)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: timed_window(): slide must be at least a microsecond on event time ...
    >>> micros_of("scan", "ttl", 1e303)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: scan(): ttl must be at most 1.7e302 seconds (event time is counted in ...
    """
    try:
        us = micros(seconds)
    except OverflowError:
        raise ValueError(f"{op}(): {name} must be at most 1.7e302 seconds (event time is "
                         f"counted in microseconds), got {seconds!r}") from None
    if us < 1 and not zero:
        raise ValueError(f"{op}(): {name} must be at least a microsecond on event time (it "
                         f"is compared to the microsecond, as Spark keeps timestamps), "
                         f"got {seconds!r}")
    return us


def seconds(us: Any) -> Any:
    """Whole microseconds as the seconds a bound is: one division, as Spark's ``us / 1E6``.

    ``us`` may be an int or an array of them (numpy's int64, below 2**53,
    as timestamps are): each division rounds the exact quotient once, so
    both give the same floats.

    >>> seconds(300_000)
    0.3
    """
    return us / MICROS


def check_bounds(op: str, bounds: Any) -> bool:
    """``bounds=`` of ``op``, checked: a bool."""
    if not isinstance(bounds, bool):
        raise TypeError(f"{op}(): bounds= must be True or False (emit each window as "
                        f"Window(start, end, elements), or as its list), got {bounds!r}")
    return bounds


def sliding_bounds(i: int, slide: float, size: float) -> tuple[float, float]:
    """The bounds of window ``i`` of windows every ``slide`` seconds, ``size`` long.

    >>> sliding_bounds(3, 0.1, 0.2)
    (0.3, 0.5)
    """
    start = i * micros(slide)
    return seconds(start), seconds(start + micros(size))
