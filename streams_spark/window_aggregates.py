"""The aggregates a traced window function needs, and where they are computed.

:mod:`streams_spark.window_values` traces a window function into aggregates
of its elements; :mod:`streams_spark.window_counts` adds aggregates of a
``collections.Counter`` of them. This module holds what both build on: the
:class:`Aggregates` of one window function, the trace's context, and the
aggregates of a value with Python's failures on ``None``.

Without a Counter, every aggregate runs over a window's elements, in one
``groupBy(window, key)``. With one, the window is grouped twice (see
:meth:`Aggregates.levels`): by window, key and counted value (each group is
one of the Counter's entries, its ``count(1)`` the entry's count), then by
window and key. An aggregate of the elements is then computed in parts, per
entry, and combined (a count by summing, ``min``, ``max`` and ``sum`` by
themselves); an aggregate of the Counter runs on the entries.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from .column_values import BOOL, INT, STR, TRACE, Untraceable, Value, functions
from .row_values import RowValue
from .sql_text import Sql

__all__ = ["Aggregates", "Counted", "WindowContext", "OnePass", "WindowValue", "aggregate_count",
           "combined", "current", "each", "extreme_of", "fails_if", "none_compared", "ordered",
           "sum_of", "values_of", "window_trace"]

#: The kinds whose order is the same in Python and in Spark.
_ORDERED = (INT, STR, BOOL)
#: How an aggregate's column starts (in backquotes), as :meth:`Aggregates.reserve` names it.
_AGGREGATED = "`__a"


class Counted:
    """A ``Counter`` of a window's elements, a view of it, or an entry's key or count.

    :mod:`streams_spark.window_counts` defines them; ``len``, ``min``,
    ``max`` and ``sum`` hand them these methods.
    """

    def size(self) -> Value:
        raise Untraceable(f"len() of {self}")

    def extreme(self, op: str) -> Value:
        raise Untraceable(f"{op}() of {self}")

    def total(self, start: Any) -> Value:
        raise Untraceable(f"sum() of {self}")


class Aggregates:
    """The aggregates a window function needs, each once, named ``__a1``, ``__a2``..."""

    def __init__(self) -> None:
        self.exprs: dict[str, str] = {}  # SQL over the elements -> its column's name
        self.of_counts: dict[str, str] = {}  # SQL over a Counter's entries -> name
        self.named = 0
        self.argmins: dict[str, Any] = {}  # window_values._ArgMin, by key
        #: Guards on each element (``(condition, error)``), checked before the window.
        self.element_guards: list[tuple[Any, Any]] = []
        #: The Counter of the window's elements (window_counts.Counts), if one is taken.
        self.counter: Any = None

    def reserve(self) -> str:
        self.named += 1
        return f"__a{self.named}"

    def add(self, sql: str, of_counts: bool = False) -> Sql:
        """The column of the aggregate ``sql`` (one per distinct text).

        ``of_counts``: ``sql`` reads a Counter's entries (``__c``, the value,
        and ``__n``, its count), not the elements.
        """
        exprs = self.of_counts if of_counts else self.exprs
        name = exprs.get(sql)
        if name is None:
            name = exprs[sql] = self.reserve()
        return Sql(f"`{name}`")

    def columns(self) -> list[tuple[str, str]]:
        """``(SQL, name)`` of every aggregate of the elements the function's result reads."""
        out = [(sql, name) for sql, name in self.exprs.items()]
        return out + [(a.sql(), a.name) for a in self.argmins.values() if a.fields]

    def levels(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """With a Counter: ``(SQL, name)`` by entry, then by window and key.

        The first level counts each entry (``__n``) and computes each
        aggregate of the elements in parts; the second combines the parts
        and computes the aggregates of the Counter.
        """
        first = [("count(1)", "__n")]
        second = []
        for sql, name in self.columns():
            if sql == "count(1)":  # the elements: the sum of the entries' counts
                second.append(("sum(`__n`)", name))
                continue
            first.append((sql, name))
            second.append((combined(sql, name), name))
        return first, second + list(self.of_counts.items())


def combined(sql: str, name: str) -> str:
    """How the parts (named ``name``) of the aggregate ``sql`` combine: a count's by ``sum``.

    Examples
    --------
    >>> combined("count(`x`)", "__a1"), combined("min(named_struct('k0', `x`))", "__a2")
    ('sum(`__a1`)', 'min(`__a2`)')
    """
    function = sql[:sql.index("(")]  # count, min, max or sum, as the aggregates write it
    if function not in ("count", "min", "max", "sum"):
        raise ValueError(f"an aggregate without parts: {sql}")
    return f"{'sum' if function == 'count' else function}(`{name}`)"


class WindowContext:
    """One window function's trace: its aggregates and what it read of the window."""

    def __init__(self, aggregates: Aggregates) -> None:
        self.aggregates = aggregates
        self.yielded = 0  # elements the window gave while an aggregate read it
        self.counted = 0  # entries a Counter gave while an aggregate read it


_WINDOW: contextvars.ContextVar[WindowContext] = contextvars.ContextVar("streams_spark_window")


def current() -> WindowContext:
    return _WINDOW.get()


def each(make: Callable[[], Any]) -> Any:
    """``make()`` run for one stand-in element: its guards are the element's."""
    ctx = _WINDOW.get()
    trace = TRACE.get()
    if trace.path:
        raise Untraceable("an aggregate under a branch on the window")
    if trace.element_guards_to is not None:
        raise Untraceable("an aggregate inside an aggregate")
    trace.element_guards_to = ctx.aggregates.element_guards
    try:
        return make()
    finally:
        trace.element_guards_to = None


class WindowValue:
    """Stands for a window's elements; only ``len`` and the aggregates read it."""

    def __init__(self, element: Any) -> None:
        self.element = element

    def __iter__(self) -> _Elements:
        return _Elements(self)

    def __bool__(self) -> bool:
        return True  # a window has an element

    def __len__(self) -> int:
        raise Untraceable("len() of a window outside its namespace")

    def __getitem__(self, key: Any) -> Any:
        raise Untraceable("an element of a window by position (a window has no order on Spark)")

    __hash__ = None  # type: ignore[assignment]


class OnePass:
    """Iterating a stand-in inside an aggregate: one value, once."""

    #: Why a loop elsewhere cannot be traced.
    outside = "a loop over a window outside len(), min(), max() or sum()"

    def __init__(self) -> None:
        self.done = False

    def __iter__(self) -> OnePass:
        return self

    def __next__(self) -> Any:
        if TRACE.get().element_guards_to is None:
            raise Untraceable(self.outside)
        self.check(sys._getframe(1).f_code)
        if self.done:
            raise StopIteration
        self.done = True
        return self.one()

    def check(self, code: types.CodeType) -> None:
        """Raise :class:`Untraceable` unless ``code``, iterating, may."""

    def one(self) -> Any:
        raise NotImplementedError


class _Elements(OnePass):
    """Iterating a window: inside an aggregate, its one stand-in element."""

    def __init__(self, window: WindowValue) -> None:
        super().__init__()
        self.window = window

    def one(self) -> Any:
        _WINDOW.get().yielded += 1
        return self.window.element


def values_of(iterable: Any) -> tuple[list[Any], str | None]:
    """What ``iterable`` yields, and what it read: ``"window"``, ``"counts"`` or None.

    Reading the window or a Counter, it yields one value (for one stand-in
    element or entry).
    """
    ctx = _WINDOW.get(None)
    if ctx is None:  # no window function traced: a plain call
        return list(iterable), None
    yielded, counted = ctx.yielded, ctx.counted
    if isinstance(iterable, WindowValue):
        iterable = iter(iterable)
    values = each(lambda: list(iterable)) if isinstance(
        iterable, _Elements | types.GeneratorType) else list(iterable)
    read, entries = ctx.yielded - yielded, ctx.counted - counted
    if read == 0 and entries == 0:
        if any(isinstance(v, Value | RowValue | WindowValue | Counted) for v in values):
            raise Untraceable("an aggregate of column values that are not a window's")
        return values, None
    if read + entries != 1 or len(values) != 1:
        raise Untraceable("an aggregate over more than one pass of a window or Counter")
    return values, "window" if read else "counts"


def ordered(v: Any, what: str) -> Value:
    """``v``, a value of each element that Python and Spark order alike."""
    if not isinstance(v, Value) or v.kind not in _ORDERED:
        raise Untraceable(f"{what} of {getattr(v, 'kind', type(v).__name__)} values")
    if _AGGREGATED in str(v.col):
        # A value of the window (len(w) + x.n) inside an aggregate of its elements.
        raise Untraceable(f"{what} of a value that is not each element's")
    return v


def aggregate_count(of_counts: bool = False) -> Sql:
    """How many elements (or a Counter's entries) a window has."""
    return _WINDOW.get().aggregates.add("count(1)", of_counts)


def fails_if(condition: str, error: Any) -> None:
    """A group guard: the window fails where ``condition`` (on aggregates) holds.

    ``error``: its text, or an expression of the aggregates that makes it.
    """
    from .column_values import _fail

    _fail(Sql(condition), error, None)


def none_compared(op: str, kind: str) -> str:
    """Python's message when ``min`` (``max``) meets a None among values of ``kind``."""
    return (f"TypeError: '{'<' if op == 'min' else '>'}' not supported between instances "
            f"of 'NoneType' and '{kind}'")


def extreme_of(op: str, v: Value, of_counts: bool = False) -> Value:
    """``min`` (``max``) of ``v`` over the elements (or a Counter's entries)."""
    aggregates = _WINDOW.get().aggregates
    if v.nullable:
        count, nonnull = aggregate_count(of_counts), aggregates.add(f"count({v.col})", of_counts)
        fails_if(f"({count} > 1 AND {nonnull} < {count})", none_compared(op, v.kind))
    return Value(aggregates.add(f"{op}({v.col})", of_counts), v.kind, v.nullable)


#: The integers a traced value holds (Spark's ``long``), as ``decimal`` literals.
_LONG = (f"{-(2 ** 63)}BD", f"{2 ** 63 - 1}BD")


def sum_of(v: Value, start: Any, of_counts: bool = False) -> Value:
    """``sum`` of ``v`` over the elements (or a Counter's entries), from ``start``.

    Python's total, exactly: Spark's ``sum`` of longs fails under ANSI mode
    where a partial sum overflows, which depends on the order Spark adds in
    (its partitions), though the total fits. Each long is summed as its high
    and low 32 bits, two sums of longs that cannot overflow below 2 ** 31
    elements a window, and the window's total made of them as a decimal.
    A total beyond 64 bits fails its window, naming it (Python's integers
    grow; here the result is a long). Summing each element as a
    ``decimal(38, 0)`` took 2.6 times as long as a ``sum`` of longs in a
    ``groupBy`` of 4,000,000 rows, the two sums 1.1 times; a query of 200
    windows over 2,000,000 rows, 1.15 times (best of 5, 2026-12-05).
    """
    if v.kind != INT or type(start) is not int:
        raise Untraceable("sum() other than of integers")
    if not TRACE.get().ansi:
        raise Untraceable("integer sum() with spark.sql.ansi.enabled off (it would wrap)")
    aggregates = _WINDOW.get().aggregates
    if v.nullable:
        count, nonnull = aggregate_count(of_counts), aggregates.add(f"count({v.col})", of_counts)
        fails_if(f"({nonnull} < {count})",
                 "TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'")
    high = aggregates.add(f"sum(shiftright({v.col}, 32))", of_counts)
    low = aggregates.add(f"sum(({v.col} & 4294967295L))", of_counts)
    exact = Sql(f"((CAST({high} AS DECIMAL(38, 0)) * 4294967296BD) + {low})")
    F = functions()
    fails_if(f"({exact} NOT BETWEEN {_LONG[0]} AND {_LONG[1]})", F.concat(
        F.lit("OverflowError: sum() is "), exact.cast("string"),
        F.lit(", beyond Spark's 64-bit integers (Python's grow): run this step in Python "
              "(a function that calls anything runs there)")))
    # try_cast: NULL only where the check above fails the window, whatever
    # order Spark evaluates the checks in.
    total = Value(Sql(f"try_cast({exact} AS BIGINT)"), INT, False)
    return total + start if start else total


@contextlib.contextmanager
def window_trace(aggregates: Aggregates) -> Iterator[WindowContext]:
    """The context of one window function's trace, gathering into ``aggregates``."""
    token = _WINDOW.set(WindowContext(aggregates))
    try:
        yield _WINDOW.get()
    finally:
        _WINDOW.reset(token)
