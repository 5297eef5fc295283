"""Durations an operator takes, read and checked when the graph is built.

A duration is a number of seconds or a string such as ``"500ms"``, ``"2s"``
or ``"1min"``; either way it is checked as a number (finite, positive or,
where allowed, zero), so a bad one fails naming the operator and the
argument before any element flows.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import short_repr

__all__ = ["check_interval", "check_slide"]

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
    seconds = interval
    if isinstance(interval, str):
        m = _DURATION.match(interval)
        unit = m.group(2).lower() if m else ""
        if m is None or unit not in {"", *_UNITS}:
            raise ValueError(f"{op}(): cannot read {name} {interval!r}; "
                             "give seconds or a string like '500ms', '2s', '1min'")
        # Checked as a number is: "0s" would divide by zero, "1e999" is infinite.
        seconds = float(m.group(1)) * _UNITS.get(unit, 1.0)
    elif isinstance(interval, bool) or not isinstance(interval, int | float):
        raise TypeError(f"{op}(): {name} must be a number of seconds, got {short_repr(interval)}")
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise ValueError(f"{op}(): {name} must be {'>=' if zero else '>'} 0 seconds, "
                         f"got {interval!r}")
    return float(seconds)


def check_slide(op: str, interval: float, slide: Any) -> float:
    """``slide=`` of a window ``interval`` long (None: tumbling), checked at build time.

    >>> check_slide("timed_window", 10.0, None), check_slide("timed_window", 10.0, "2s")
    (10.0, 2.0)
    """
    if slide is None:
        return interval
    seconds = check_interval(op, slide, "slide")
    if seconds > interval:
        raise ValueError(f"{op}(): slide={slide!r} is longer than the window "
                         f"({interval:g} s): elements between windows would be in none; "
                         "give slide <= interval")
    return seconds
