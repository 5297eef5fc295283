"""Durations an operator takes, read and checked when the graph is built.

A duration is a number of seconds (any real number but a bool: NumPy's
included) or a string such as ``"500ms"``, ``"2s"`` or ``"1min"``; with
pandas installed, any string ``pandas.Timedelta`` reads too (``"10
seconds"``, ``"1d"``, ``"1000ns"``), as streamz reads them all. Either way
it is checked as a number (finite, positive or, where allowed, zero), so a
bad one fails naming the operator and the argument before any element flows.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

from ..errors import short_repr
from .window_bounds import micros_of

__all__ = ["MAX_WINDOWS", "SAME_RATIO", "check_interval", "check_slide"]

#: On the clock, two durations (float seconds) that differ by no more than this
#: part of one are taken as one: ``0.1 * 3`` is ``0.3``'s, not a longer one.
SAME_RATIO = 1e-9

#: The most windows a sliding window's element may be in (``interval / slide``).
#: Each holds the element: ``timed_window(3600, slide=1e-6)`` would put every
#: element in 3.6e9 windows and never return from the first.
MAX_WINDOWS = 100_000

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def check_interval(op: str, interval: Any, name: str = "interval", zero: bool = False) -> float:
    """Seconds from a number or a string such as ``"500ms"``, checked at build time.

    Examples
    --------
    >>> check_interval("delay", "250ms"), check_interval("delay", 2)
    (0.25, 2.0)
    >>> check_interval("timed_window", -1)
    Traceback (most recent call last):
    ...
    ValueError: timed_window(): interval must be > 0 seconds, got -1
    >>> check_interval("timed_window", "0ms")
    Traceback (most recent call last):
    ...
    ValueError: timed_window(): interval must be > 0 seconds, got '0ms'
    """
    if isinstance(interval, str):
        # Checked as a number is: "0s" would divide by zero, "1e999" is infinite.
        seconds = _read(op, name, interval)
    elif isinstance(interval, bool) or not isinstance(interval, numbers.Real):
        raise TypeError(f"{op}(): {name} must be a number of seconds, got {short_repr(interval)}")
    else:
        seconds = float(interval)  # NumPy's numbers too, as streamz takes them
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise ValueError(f"{op}(): {name} must be {'>=' if zero else '>'} 0 seconds, "
                         f"got {interval!r}")
    return seconds


def _read(op: str, name: str, text: str) -> float:
    """Seconds from ``text``: the short forms here, else as ``pandas.Timedelta`` reads it.

    >>> _read("delay", "interval", "1.5min"), _read("delay", "interval", "10 seconds")
    (90.0, 10.0)
    """
    m = _DURATION.match(text)
    unit = m.group(2).lower() if m else ""
    if m is not None and unit in {"", *_UNITS}:
        return float(m.group(1)) * _UNITS.get(unit, 1.0)
    try:
        import pandas
    except ImportError:
        raise ValueError(f"{op}(): cannot read {name} {text!r}; give seconds or a string "
                         "like '500ms', '2s', '1min' (install pandas for the strings "
                         "pandas.Timedelta reads, as streamz does)") from None
    try:
        return float(pandas.Timedelta(text).total_seconds())
    except (ValueError, TypeError) as e:
        raise ValueError(f"{op}(): cannot read {name} {text!r}; give seconds or a string "
                         f"like '500ms', '2s', '1min', '10 seconds' ({e})") from None


def check_slide(op: str, interval: float, slide: Any, event_time: bool = False) -> float:
    """``slide=`` of a window ``interval`` long (None: tumbling), checked at build time.

    On ``event_time`` windows are cut in whole microseconds (see
    :mod:`~streams.operators.window_bounds`), so the two are compared so;
    on the clock, a slide longer than the window by no more than
    :data:`SAME_RATIO` of it is the window's own length in float seconds
    (``0.1 * 3`` for ``0.3``), as the clock windows take it.

    >>> check_slide("timed_window", 10.0, None), check_slide("timed_window", 10.0, "2s")
    (10.0, 2.0)
    >>> check_slide("timed_window", 0.3, 0.1 * 3, event_time=True)  # both 300000 us
    0.30000000000000004
    >>> check_slide("timed_window", 0.3, 0.1 * 3)
    0.30000000000000004
    >>> check_slide("timed_window", 0.3, 0.301)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: timed_window(): slide=0.301 is longer than the window (0.3 s): ...
    >>> check_slide("timed_window", 3600, 1e-6, event_time=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: timed_window(): slide=1e-06 puts each element in 3,600,000,000 windows ...
    """
    if slide is None:
        return interval
    seconds = check_interval(op, slide, "slide")
    if event_time:
        longer = micros_of(op, "slide", seconds) > micros_of(op, "interval", interval)
    else:
        longer = seconds - interval > SAME_RATIO * interval
    if longer:
        raise ValueError(f"{op}(): slide={slide!r} is longer than the window "
                         f"({interval:g} s): elements between windows would be in none; "
                         "give slide <= interval")
    if event_time:
        per = -(-micros_of(op, "interval", interval) // micros_of(op, "slide", seconds))
    else:
        ratio = interval / seconds  # a ratio a rounding from whole is whole
        per = round(ratio) if abs(ratio - round(ratio)) <= SAME_RATIO * ratio else math.ceil(ratio)
    if per > MAX_WINDOWS:
        raise ValueError(
            f"{op}(): slide={slide!r} puts each element in {per:,} windows of {interval:g} s; "
            f"at most {MAX_WINDOWS:,} are taken: give a longer slide, or aggregate in "
            "tumbling windows of the slide and combine the last interval / slide of them "
            "(timed_window(slide).map(agg).sliding_window(n).map(combine))")
    return seconds
