"""Event time in Spark SQL: timestamps of seconds, durations, watermark delays, windows.

Shared by the windows (:mod:`streams_spark.stream`,
:mod:`streams_spark.window_native`, :mod:`streams_spark.window_pairs`) and
the interval join (:mod:`streams_spark.join`), so that each reads a time
as the core does (:mod:`streams.operators.window_bounds`).
"""

from __future__ import annotations

import math
from typing import Any

from streams.operators.window_bounds import micros
from streams.spec import EventTime

__all__ = ["interval", "micros_of", "spark_delay", "spark_window", "timestamp_of",
           "watermark_delay"]


def timestamp_of(seconds: Any) -> str:
    """SQL of the timestamp of ``seconds`` (a double): its nearest microsecond.

    As :func:`streams.operators.window_bounds.event_micros` takes it in
    Python, so windows and their bounds are the same on both sides. Spark's
    own ``timestamp_seconds()`` truncates, which puts a time written as
    ``micros / 1e6`` a microsecond early one time in fifty.

    >>> timestamp_of("`t`")
    'timestamp_micros(CAST(rint(`t` * 1E6) AS BIGINT))'
    """
    return f"timestamp_micros({micros_of(seconds)})"


def micros_of(seconds: Any) -> str:
    """SQL of the nearest microsecond of ``seconds`` (a double), a long: :func:`timestamp_of`'s.

    >>> micros_of("`t`")
    'CAST(rint(`t` * 1E6) AS BIGINT)'
    """
    return f"CAST(rint({seconds} * 1E6) AS BIGINT)"


def interval(x: float) -> str:
    """``x`` seconds as Spark reads a duration (whole microseconds)."""
    return f"{micros(x)} microseconds"


def spark_delay(lateness: float) -> str:
    """The watermark delay under which Spark forgets only what in-process forgets.

    Spark's watermark is whole milliseconds behind its largest time seen,
    and after each micro-batch it forgets held rows at its bound, not only
    below it; in-process, an element at the watermark is still on time. One
    millisecond more than ``lateness`` (rounded up) keeps Spark's watermark
    strictly below the in-process one.

    Examples
    --------
    >>> spark_delay(0), spark_delay(2.5), spark_delay(0.0001)
    ('1 milliseconds', '2501 milliseconds', '2 milliseconds')
    """
    return f"{math.ceil(round(lateness * 1000, 6)) + 1} milliseconds"


def watermark_delay(event_time: EventTime) -> str:
    """The watermark delay of a window's query: its lateness, and one millisecond more
    for sessions (:func:`spark_delay`: Spark closes a session at the watermark,
    in-process a session stays open until the watermark is past its end).

    >>> from streams import Stream
    >>> def of(node): return watermark_delay(node.describe().traits.event_time)
    >>> of(Stream().timed_window(10, time=0)), of(Stream().session_window(2, time=0))
    ('0 microseconds', '1 milliseconds')
    """
    if event_time.session:
        return spark_delay(event_time.lateness)
    return interval(event_time.lateness)


def spark_window(event_time: EventTime, column: str) -> Any:
    """Spark's ``window()`` (tumbling or sliding) or ``session_window()`` of ``column``."""
    from pyspark.sql import functions as F

    size = interval(event_time.size)
    if event_time.session:
        return F.session_window(column, size)
    if event_time.slide is not None:
        return F.window(column, size, interval(event_time.slide))
    return F.window(column, size)
