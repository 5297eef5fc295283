"""An event-time window and the function of its windows, run as Spark aggregates.

``from_spark(df)[.filter(...)].timed_window(size, slide=, time=, key=)``
(or ``session_window(gap, ...)``) ``.map(f).to_dataframe(schema)``: when the
time and key functions trace to columns (:mod:`streams_spark.column_values`)
and ``f`` to aggregates (:mod:`streams_spark.window_values`), the segment is
the query one would write by hand::

    df.where(filters)
      .select("*", timestamp_of(checked(time)).alias("__et"))
      .withWatermark("__et", lateness)                 # a stream's
      .groupBy(window("__et", size, slide), key).agg(aggregates)   # key: a keyed one's
      .select(f's result)

With a ``collections.Counter`` of the window's values
(:mod:`streams_spark.window_counts`), the rows are grouped by window, key
and value first, then by window and key (a static DataFrame's; a stream's
window runs in Python). A static DataFrame's windows are grouped by their
start, sliding ones by pane first (:mod:`streams_spark.window_starts`), its
keyed sessions by a running count over each key's rows in time order
(:mod:`streams_spark.window_sessions`).

No row crosses to Python. Each element's checks (a ``None`` where Python
would raise) run on the rows, before they are grouped; each window's (a
``min`` meeting a ``None``) on the groups. Windows are cut from the event
time exactly as the Python routing cuts them (the nearest microsecond of the
time as a double, :func:`~streams_spark.time_sql.timestamp_of`), so the results
are those of the windows Spark forms from Python's routing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from streams.operators._checks import key_function
from streams.operators._late import seconds_of
from streams.operators.window_bounds import Window, micros
from streams.spec import EventTime, NodeSpec
from streams_spark.round_trips import select_expr

from .checks import ElementText, checked, checked_in_order, checking, kept_rows
from .column_values import BOOL, FLOAT, INT, NONE, STR, Untraceable, Value, lift
from .event_seconds import BEYOND, FIRST_SECOND, LAST_SECOND
from .row_values import RowValue, fields_of, reads_of
from .sql_text import Sql, named
from .stream import window_groups
from .time_sql import timestamp_of, watermark_delay
from .tracing import trace
from .window_aggregates import Aggregates, WindowValue
from .window_starts import bounds_of, by_start, grouped
from .window_values import trace_window

__all__ = ["Routing", "lower_window", "route", "stamped", "window_text"]

_BEYOND = f"ValueError: {BEYOND}"

#: Key kinds grouped by Spark as a dict groups them in Python (no NaN, no -0.0).
_KEYS = (INT, STR, BOOL, NONE)


def windowed(spec: NodeSpec) -> bool:
    """Whether ``spec`` is an event-time window this module may lower."""
    event_time = spec.traits.event_time
    return (event_time is not None and spec.policy == "raise" and spec.traits.join is None
            and len(spec.upstream_ids) == 1
            and (event_time.slide is None or event_time.slide <= event_time.size))


class Routing(NamedTuple):
    """How a window routes each row: its time and key, and their checks."""

    #: ``(condition, error)`` where Python fails to route a row (a time or key it cannot take).
    guards: list[tuple[Any, Any]]
    #: Where a time is beyond Spark's timestamps (Python takes it; Spark cannot); none
    #: where the time is known within them.
    beyond: list[tuple[Any, Any]]
    #: The time, in seconds, as a double (SQL text).
    seconds: Any
    #: The key, or None for an unkeyed window.
    key: Value | None
    #: The element the window's function sees: the columns the checks prove non-null marked so.
    element: Any
    non_null: set[str]


def _refusal(t: Any) -> str:
    """The error, as ``Type: message``, with which the node refuses the event time ``t``."""
    try:
        seconds_of(t)
    except (TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    raise AssertionError(f"{t!r} is an event time")


def _plain(given: Any, what: str) -> Callable[[Any], Any]:
    """The window's ``time=`` or ``key=`` as a function to trace, or :class:`Untraceable`.

    A function must pass :func:`~streams_spark.native.pure`, as a map's does:
    one that calls (``str(r.n)``, ``isinstance``) or tests identity (``is
    None``) would be traced to other values than Python computes.
    """
    from .native import pure  # native lowers windows through this module

    if callable(given) and not pure(given):
        raise Untraceable(f"a {what} function that does more than arithmetic on fields")
    return key_function(given)


def route(window: NodeSpec, element: Any, ansi: bool) -> Routing:
    """How ``window`` routes ``element`` (a row's stand-in), or :class:`Untraceable`."""
    event_time = window.traits.event_time
    assert event_time is not None
    row_guards: list[tuple[Any, Any]] = []
    non_null: set[str] = set()
    t = lift(trace(_plain(event_time.time, "time"), element, row_guards, ansi=ansi,
                   non_null=non_null))
    if t.kind not in (INT, FLOAT):
        raise Untraceable("an event time other than a number")
    seconds = t.col if t.kind == FLOAT else t.col.cast("double")  # a float is a double
    if t.nullable:  # a None time fails in-process with this error
        row_guards.append((t.col.isNull(), _refusal(None)))
    if not t.finite:  # as a NaN or an infinite time does
        row_guards.append((Sql(f"isnan({seconds})"), _refusal(math.nan)))
        row_guards.append((Sql(f"({seconds} = double('inf'))"), _refusal(math.inf)))
        row_guards.append((Sql(f"({seconds} = double('-inf'))"), _refusal(-math.inf)))
    key: Value | None = None
    if event_time.key is not None:
        key = lift(trace(_plain(event_time.key, "key"), element, row_guards, ansi=ansi,
                         non_null=non_null))
        if key.kind not in _KEYS:
            raise Untraceable(f"a {key.kind} key (Spark groups it other than a dict does)")
    if isinstance(element, RowValue):
        # The rows that reach the window passed the checks of its time and key.
        element = RowValue(fields_of(element), non_null, read=reads_of(element))
    beyond: list[tuple[Any, Any]] = []
    if t.bound is None or not FIRST_SECOND <= -t.bound <= t.bound <= LAST_SECOND:
        # Not where the time is known within them (a long by a large constant).
        beyond.append((Sql(f"NOT coalesce({seconds} BETWEEN {FIRST_SECOND} AND {LAST_SECOND}, "
                           "false)"), _BEYOND))
    return Routing(row_guards, beyond, seconds, key, element, non_null)


def stamped(seconds: Any) -> str:
    """The timestamp of ``seconds`` (checked: never NULL, nor beyond), non-nullable for Spark.

    A NULL time is failed by the checks in ``seconds``: so coalesce()'s 1970
    is never taken, and makes the column non-nullable, for which window()
    adds no not-null filter. Such a filter would compute the time a second
    time, and Spark would put its test before the checks, dropping a row
    with no time unchecked.
    """
    return f"coalesce({timestamp_of(seconds)}, TIMESTAMP '1970-01-01')"


def lower_window(df: Any, keep: Any, element: Any, window: NodeSpec, func: NodeSpec,
                 schema: Any, row: ElementText, ansi: bool,
                 outputs: Callable[[Any, Any, bool], list[str]], *,
                 narrowing: Sequence[str] = ()) -> Any:
    """The output frame of ``window`` then ``func`` over ``df``'s rows where ``keep`` holds.

    ``element`` stands for a row; ``row()`` is its text for messages (put in
    place by ``row.resolve()`` once every function is traced);
    ``outputs(result, schema, ansi)`` makes the output columns. Raises
    :class:`Untraceable` when a part has no column form.
    """
    event_time = window.traits.event_time
    assert event_time is not None
    if (func.operator != "map" or func.policy != "raise" or func.func is None
            or func.params.get("args") or func.params.get("kwargs")):
        raise Untraceable("the window's function is not a plain map")
    routing = route(window, element, ansi)
    key = routing.key
    aggregates = Aggregates()
    group_guards: list[tuple[Any, Any]] = []
    starts = by_start(event_time, df.isStreaming)
    group: Any = WindowValue(routing.element)
    if event_time.bounds:
        group = _bounded(group, event_time, starts)
    key_value = Value(Sql("`__k`"), key.kind, key.nullable) if key is not None else None
    result = trace_window(func.func, (key_value, group) if key_value is not None else group,
                          group_guards, aggregates, ansi=ansi)
    columns = outputs(result, schema, ansi)
    # Each row's time, checked (the window's checks first: Python routes an
    # element before its window closes), computed in a projection over the
    # rows the filters keep, so the checks run on exactly the rows Python
    # routes. A time beyond Spark's timestamps fails too (Python's floats go
    # further; Spark would overflow; see stamped()).
    time = checked_in_order([(window.name, routing.guards),
                             (func.name, aggregates.element_guards),
                             (window.name, routing.beyond)], row, routing.seconds)
    # An unkeyed window groups by its window alone, as one would write it;
    # Spark refuses a session window without a key: NULL is that key.
    keyed = key is not None or event_time.session
    columns_in = ["*", f"{stamped(time)} AS `__et`"]
    if keyed:
        columns_in.append(f"{key.col if key is not None else 'NULL'} AS `__k`")
    if aggregates.counter is not None:  # over the rows the filters kept only
        columns_in.append(f"{aggregates.counter.value.col} AS `__c`")
    kept = kept_rows(df, keep, narrowing, row)
    rows = select_expr(kept, list(map(row.resolve, columns_in)))
    if kept.isStreaming:  # a static DataFrame's watermark is dropped by Spark's analyser
        rows = rows.withWatermark("__et", watermark_delay(event_time))
    keys = ["__k"] if keyed else []
    parts = aggregates.columns() or [("count(1)", "__n")]
    if aggregates.counter is not None:
        groups = _by_entries(rows, keys, aggregates, event_time)
    elif starts:
        groups = grouped(rows, event_time, keys, parts)
    else:  # sessions, or a stream's windows
        groups = window_groups(rows, event_time, keys, parts, key is not None)
    if group_guards:
        # A window's failure names the window: its bounds and key.
        text = window_text(event_time, starts, keyed)
        groups = checking(groups, checked(group_guards, func.name, lambda: text, Sql("true")))
    return select_expr(groups, columns)


def _bounded(group: WindowValue, event_time: EventTime, starts: bool) -> Window[Any]:
    """The :class:`~streams.Window` a function of windows with their bounds is traced on.

    Its bounds are the group's own columns, in seconds: the start Spark
    grouped the window by (``starts``: ``__s``, in microseconds), or
    ``window()``'s and ``session_window()``'s struct, whose microseconds
    are the bounds in-process windows emit (see
    :mod:`streams.operators.window_bounds`). A long divided by a double is
    Python's ``int / float``, one rounding.
    """
    if starts:
        start, end = "`__s`", f"(`__s` + {micros(event_time.size)})"
    else:
        start, end = "unix_micros(`__w`.`start`)", "unix_micros(`__w`.`end`)"
    # A Window of stand-ins (columns, the elements), as the function reads one.
    return Window._make([Value(Sql(f"({start} / 1E6)"), FLOAT, False),
                         Value(Sql(f"({end} / 1E6)"), FLOAT, False), group])


def _by_entries(rows: Any, keys: list[str], aggregates: Aggregates, event_time: EventTime
                ) -> Any:
    """The groups of ``rows`` by window and ``keys``, through the entries of their Counter."""
    if event_time.session:
        raise Untraceable("a Counter over session windows (Spark would form them per value)")
    if rows.isStreaming:
        raise Untraceable("a Counter over a stream's windows (two aggregations under a "
                          "watermark)")
    first, second = aggregates.levels()
    entries = grouped(rows, event_time, [*keys, "__c"], first)  # rows count __c
    return entries.groupBy("__s", *keys).agg(*[named(s, n) for s, n in second])


def window_text(event_time: Any, starts: bool, keyed: bool) -> Sql:
    """A window's text in the failures its checks raise: its bounds and key, as JSON.

    ``starts``: the rows are grouped by their windows' starts (``__s``), else
    by Spark's window column (``__w``); ``keyed``: grouped by a key (``__k``).
    """
    bounds = (bounds_of("`__s`", event_time.size) if starts
              else "'start', `__w`.`start`, 'end', `__w`.`end`")
    return Sql(f"to_json(named_struct({bounds}, 'key', {'`__k`' if keyed else 'NULL'}))")
