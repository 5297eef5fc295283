"""Late elements of event-time operators: the ``late`` side stream, and event time itself.

An event-time operator (``timed_window(..., time=)``, ``session_window``,
and any later one, a join say) decides when an element is late; this module
decides where it goes, in one place:

* if something is connected to ``node.late``, the element itself goes
  there (a side stream, sinkable like ``node.errors``);
* otherwise it goes to the node's error policy as a :class:`LateElementError`
  (raise by default), so that nothing is lost without saying so.

Engines need nothing of their own: a node rebuilt in a Dask or Spark stage has
no ``late`` downstream, so a late element comes back as a failure, and the
engine hands it to the original node's ``_fail``, which routes it here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from math import isfinite
from numbers import Real
from typing import TYPE_CHECKING, Any

from ..core import Stream
from ..errors import short_repr
from ..graph import hang
from ..pending import emit_each
from .window_bounds import bad_time, micros, seconds, watermark_micros

if TYPE_CHECKING:
    from ..fusion import Fuser

__all__ = ["LateElementError", "LateSide", "event_seconds", "late_error", "seconds_code",
           "seconds_of"]


class LateElementError(ValueError):
    """An element arrived after its event-time window was emitted."""


def late_error(t: Any, why: str, max_time: float, lateness: float) -> LateElementError:
    """The error for an element of time ``t`` found late (``why``), naming the watermark.

    The watermark is shown as the windows compare it, to the microsecond.

    >>> print(late_error(0.1, "is late", 0.9, 0.3))
    event time 0.1 is late: the watermark is 0.6 (largest time seen 0.9 - lateness 0.3); ...
    """
    watermark = seconds(watermark_micros(max_time, micros(lateness)))
    return LateElementError(
        f"event time {t!r} {why}: the watermark is {watermark!r} (largest time seen "
        f"{max_time!r} - lateness {lateness!r}); raise lateness= to accept it, or sink "
        "node.late")


def seconds_of(t: Any) -> float:
    """An event time in seconds, from a number or a ``datetime`` (its POSIX ``timestamp()``).

    Anything else fails saying what an event time is: a time that is not a
    finite number (None, a string, NaN) would otherwise stop a watermark or
    put an element in no window.

    >>> from datetime import datetime, timezone
    >>> seconds_of(2.5), seconds_of(datetime(1970, 1, 1, 0, 1, tzinfo=timezone.utc))
    (2.5, 60.0)
    >>> seconds_of(None)
    Traceback (most recent call last):
    ...
    TypeError: an event time must be a number of seconds or a datetime, got None (NoneType)
    >>> seconds_of(float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: an event time must be a finite number of seconds, got nan
    """
    cls = t.__class__
    if cls is float or cls is int:
        if cls is float and not isfinite(t):  # an int is finite (isfinite(10**400) raises)
            raise bad_time(t)
        number: float = t
        return number
    if cls is datetime:  # aware, or naive as local time
        stamp: float = t.timestamp()
        return stamp
    if isinstance(t, bool):
        raise TypeError(f"an event time must be a number of seconds or a datetime, got {t!r}")
    if isinstance(t, Real):  # numpy's numbers, fractions...
        return seconds_of(float(t))
    if isinstance(t, datetime):  # pandas' Timestamp: naive as local time too, as a datetime
        try:  # (its own timestamp() reads naive as UTC)
            return seconds_of(datetime.timestamp(t))
        except (TypeError, ValueError, OverflowError):  # pandas' NaT, a time out of range
            raise ValueError(f"an event time must be a number of seconds or a datetime, got "
                             f"{short_repr(t)} ({type(t).__name__}), which has no time in "
                             "seconds (NaT, or out of range)") from None
    timestamp = getattr(t, "timestamp", None)
    if timestamp is None:
        raise TypeError(f"an event time must be a number of seconds or a datetime, "
                        f"got {short_repr(t)} ({type(t).__name__})")
    stamp = float(timestamp())
    if not isfinite(stamp):  # checked here: engines read the watermark from these seconds
        raise bad_time(stamp)
    return stamp


def seconds_code(f: Fuser, t: str) -> str:
    """Fused code that makes the time in the variable ``t`` seconds, as :func:`seconds_of`.

    Ints and floats stay as they are (a NaN or an infinity fails where the
    time is placed), a ``datetime``'s ``timestamp()`` is called inline: the
    usual times cost no call of ``seconds_of``.
    """
    return (f"if {t}.__class__ is not float and {t}.__class__ is not int:\n"
            f"    {t} = ({t}.timestamp() if {t}.__class__ is {f.bind(datetime, 'datetime')} "
            f"else {f.bind(seconds_of, 'seconds_of')}({t}))")


def event_seconds(time: Callable[[Any], Any], x: Any) -> float:
    """``x``'s event time in seconds: ``time(x)``, checked by :func:`seconds_of`.

    >>> event_seconds(lambda x: x, 2.5)
    2.5
    """
    return seconds_of(time(x))


class LateSide(Stream[Any]):
    """A node with a ``late`` side stream for the elements it finds late.

    Operators call ``self._fail(x, LateElementError(...))`` for a late
    element; this class sends ``x`` to :attr:`late` when something is
    connected to it, and to the error policy otherwise.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> window = source.timed_window(10, time=lambda x: x)
    >>> on_time, late = window.sink_to_list(), window.late.sink_to_list()
    >>> for t in [1, 12, 3, 25]:
    ...     source.emit(t)
    >>> on_time, late
    ([[1], [12]], [3])
    """

    __slots__ = ("_late",)

    @property
    def late(self) -> Stream[Any]:
        """The stream of elements this node found late (see the module's docstring)."""
        late: Stream[Any] | None = getattr(self, "_late", None)
        if late is None:
            late = Stream(stream_name=f"late of {self._label()}")
            late.asynchronous = self.asynchronous
            hang(late, self)
            self._late = late
        return late

    def _late_is_sunk(self) -> bool:
        """Whether something is connected to :attr:`late`.

        Then an engine must run the node itself, element by element: an
        engine's own ``window()`` drops late rows under a watermark that
        moves between micro-batches, and cannot hand them to ``late``.
        """
        late: Stream[Any] | None = getattr(self, "_late", None)
        return late is not None and bool(late.downstreams)

    def _fail(self, x: Any, exc: BaseException) -> Any:
        __tracebackhide__ = True  # pytest, IPython: show the user's frames
        late: Stream[Any] | None = getattr(self, "_late", None)
        if isinstance(exc, LateElementError) and late is not None and late.downstreams:
            return late._emit(x)
        return super()._fail(x, exc)

    def _close_downstreams(self) -> Any:
        # The late stream ends with the node, as its error stream does.
        late: Stream[Any] | None = getattr(self, "_late", None)
        if late is None:
            return super()._close_downstreams()
        # Both end even if one fails; the first failure is raised after.
        ends = [super()._close_downstreams, lambda: late._on_close(self)]
        return emit_each(lambda end: end(), ends)
