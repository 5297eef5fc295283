"""A ``collections.Counter`` of a window's elements, as Spark aggregates.

In a window function traced by :mod:`streams_spark.window_values`,
``Counter(x.f for x in w)`` (a generator over the window yielding an
integer, string or boolean value of each element) is :class:`Counts`:
the window is grouped by window, key and that value, so that each group is
one of the Counter's entries, then by window and key
(:meth:`~streams_spark.window_aggregates.Aggregates.levels`). Of the
Counter, these are aggregates of its entries (``__c``, the value; ``__n``,
its count):

* ``len(c)`` (or of its ``keys()``, ``values()``, ``items()``): ``count(1)``;
* ``min(c.values())``, ``max(...)``, ``sum(...)``: of the counts;
* ``min(c.keys())``, ``max(...)``, ``sum(...)``: of the values;
* ``min(k for k, n in c.items() if n == top)`` (or ``max``), where ``top``
  is ``max(c.values())`` or ``min(c.values())``: the least (greatest) value
  among the most (least) counted, ``min(struct(-n, k)).k`` and the like;
* the same generators without the condition, and ``(k for k in c.keys())``.

The rest of the function is traced as before, and its aggregates of the
elements are computed in parts, per entry, then combined. A generator over
a Counter must be one of these forms exactly: its code is compared with
theirs (an ``is`` test or a conditional expression cannot be seen
otherwise).

The results are Python's: a ``None`` among the values is a key as any
other (Spark groups NULLs together, as a dict does), and where ``min`` or
``max`` compares it with another candidate, the query fails with Python's
message. Anything else on a Counter raises :class:`Untraceable` and the
window runs in Python: ``most_common`` (its ties follow the order of
insertion, which Spark lacks), iterating it or its views outside these
forms, a count by key, a Counter of the rows themselves or of floats, two
Counters of different values, a Counter over session windows (they form
per key and value) or over a stream.
"""

from __future__ import annotations

import collections
import dis
import functools
import types
from typing import Any

from .column_values import INT, Untraceable, Value
from .sql_text import Sql
from .window_aggregates import (
    Counted,
    OnePass,
    current,
    extreme_of,
    fails_if,
    none_compared,
    ordered,
    sum_of,
    values_of,
)

__all__ = ["Counts", "counter"]


def counter(iterable: Any = None, /, **counts: Any) -> Any:
    """``collections.Counter`` in a window function: of the window's values, :class:`Counts`.

    Examples
    --------
    >>> counter("abca") == collections.Counter("abca")
    True
    """
    if counts or iterable is None:
        return collections.Counter(**counts) if iterable is None else collections.Counter(
            iterable, **counts)
    values, read = values_of(iterable)
    if read is None:
        return collections.Counter(values)
    if read == "counts":
        raise Untraceable("a Counter of a Counter's entries")
    value = ordered(values[0], "Counter()")
    aggregates = current().aggregates
    if aggregates.counter is None:
        aggregates.counter = Counts(value)
    elif str(aggregates.counter.value.col) != str(value.col):
        raise Untraceable("Counters of two values of a window")
    return aggregates.counter


class Counts(Counted):
    """Stands for ``Counter(value of each element)``, one entry per group of the first level."""

    def __init__(self, value: Value) -> None:
        self.value = value
        self.key = Value(Sql("`__c`"), value.kind, value.nullable)  # an entry's value
        self.count = Value(Sql("`__n`"), INT, False)  # an entry's count
        self.tops: dict[str, str] = {}  # max(counts.values()) (its text) -> "max"

    def keys(self) -> _Keys:
        return _Keys(self)

    def values(self) -> _Values:
        return _Values(self)

    def items(self) -> _Items:
        return _Items(self)

    def size(self) -> Value:
        return Value(current().aggregates.add("count(1)", of_counts=True), INT, False)

    def most_common(self, n: Any = None) -> Any:
        raise Untraceable("Counter.most_common() (its ties follow the order of insertion, "
                          "which Spark lacks)")

    def chosen(self, op: str, top: str) -> Value:
        """``op(k for k, n in c.items() if n == top(c.values()))``."""
        aggregates = current().aggregates
        # Least (greatest) value among the most (least) counted: the ``op`` of
        # (count, value), the count negated where op and top differ.
        count = "`__n`" if op == top else "(- `__n`)"
        pick = aggregates.add(f"{op}(named_struct('n', {count}, 'k', `__c`))", of_counts=True)
        if self.key.nullable:
            # Python compares the candidates: a None among two or more fails.
            # Spark orders a null before any value, so among tied counts
            # min() picks the None and max() a value: one more aggregate, of
            # the other kind of key, tells whether the two tie.
            best = f"{pick}.`n`" if op == top else f"(- {pick}.`n`)"
            if op == "min":
                others = aggregates.add(
                    f"{top}(CASE WHEN `__c` IS NOT NULL THEN `__n` END)", of_counts=True)
                tie = f"({pick}.`k` IS NULL AND {others} <=> {best})"
            else:  # the None is one entry: its count
                of_none = aggregates.add("max(CASE WHEN `__c` IS NULL THEN `__n` END)",
                                         of_counts=True)
                tie = f"({pick}.`k` IS NOT NULL AND {of_none} <=> {best})"
            fails_if(tie, none_compared(op, self.key.kind))
        return Value(Sql(f"{pick}.`k`"), self.key.kind, self.key.nullable)

    def __iter__(self) -> Any:
        raise Untraceable("iterating a Counter (it follows the order of insertion, which "
                          "Spark lacks)")

    def __getitem__(self, key: Any) -> Any:
        raise Untraceable("a Counter's count of a key")

    def __contains__(self, key: Any) -> bool:
        raise Untraceable("a key in a Counter")

    def __len__(self) -> int:
        raise Untraceable("len() of a Counter outside its namespace")

    def __bool__(self) -> bool:
        return True  # a window has an element

    def __eq__(self, other: Any) -> Any:
        raise Untraceable("comparing a Counter")

    __hash__ = None  # type: ignore[assignment]


class _View(Counted):
    """``keys()``, ``values()`` or ``items()`` of a Counter."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts

    def size(self) -> Value:
        return self.counts.size()

    def __iter__(self) -> _Entries:
        return _Entries(self)

    def __len__(self) -> int:
        raise Untraceable("len() of a Counter outside its namespace")

    def entry(self, iteration: _Iteration) -> Any:
        raise NotImplementedError


class _Keys(_View):
    def extreme(self, op: str) -> Value:
        return extreme_of(op, self.counts.key, of_counts=True)

    def total(self, start: Any) -> Value:
        return sum_of(self.counts.key, start, of_counts=True)

    def entry(self, iteration: _Iteration) -> Any:
        return _Key(self.counts, iteration)


class _Values(_View):
    def extreme(self, op: str) -> Value:
        top = extreme_of(op, self.counts.count, of_counts=True)
        self.counts.tops[str(top.col)] = op
        return top

    def total(self, start: Any) -> Value:
        return sum_of(self.counts.count, start, of_counts=True)

    def entry(self, iteration: _Iteration) -> Any:
        return _Count(self.counts, iteration)


class _Items(_View):
    def entry(self, iteration: _Iteration) -> Any:
        return (_Key(self.counts, iteration), _Count(self.counts, iteration))


class _Iteration:
    """One pass of a generator over a Counter's entries: the ``n == top`` it keeps to."""

    def __init__(self) -> None:
        self.top: tuple[str, Value] | None = None  # ("max", max(c.values()))


class _Entries(OnePass):
    """Iterating a Counter's view: in a generator of the forms above, one stand-in entry."""

    outside = "a loop over a Counter outside len(), min(), max() or sum()"

    def __init__(self, view: _View) -> None:
        super().__init__()
        self.view = view

    def check(self, code: types.CodeType) -> None:
        if _shape(code) not in _forms():
            raise Untraceable("a generator over a Counter other than (k for k, n in "
                              "c.items() if n == top) and its like")

    def one(self) -> Any:
        current().counted += 1
        return self.view.entry(_Iteration())


class _Entry(Counted):
    """An entry's value or count, as a generator over a Counter yields it."""

    def __init__(self, counts: Counts, iteration: _Iteration) -> None:
        self.counts = counts
        self.iteration = iteration

    def __bool__(self) -> bool:
        raise Untraceable("the truth of a Counter's entry")

    def __eq__(self, other: Any) -> Any:
        raise Untraceable("comparing a Counter's value")

    def __ne__(self, other: Any) -> Any:
        raise Untraceable("comparing a Counter's entry")

    __hash__ = None  # type: ignore[assignment]


class _Key(_Entry):
    def extreme(self, op: str) -> Value:
        if self.iteration.top is None:
            return _Keys(self.counts).extreme(op)
        return self.counts.chosen(op, self.iteration.top[0])

    def total(self, start: Any) -> Value:
        if self.iteration.top is not None:
            raise Untraceable("sum() of a Counter's most counted values")
        return _Keys(self.counts).total(start)


class _Count(_Entry):
    def extreme(self, op: str) -> Value:
        if self.iteration.top is None:
            return _Values(self.counts).extreme(op)
        return self.iteration.top[1]  # every count kept is the top

    def total(self, start: Any) -> Value:
        if self.iteration.top is not None:
            raise Untraceable("sum() of a Counter's most counted counts")
        return _Values(self.counts).total(start)

    def __eq__(self, other: Any) -> Any:
        top = self.counts.tops.get(str(other.col)) if isinstance(other, Value) else None
        if top is None:
            raise Untraceable("a Counter's count compared with other than max() or min() "
                              "of its counts")
        return _Filter(self.iteration, (top, other))


class _Filter:
    """``n == top`` in ``(k for k, n in c.items() if n == top)``: the entries it keeps."""

    def __init__(self, iteration: _Iteration, top: tuple[str, Value]) -> None:
        self.iteration = iteration
        self.top = top

    def __bool__(self) -> bool:
        if self.iteration.top is not None:
            raise Untraceable("two conditions on a Counter's entries")
        self.iteration.top = self.top
        return True  # the entry stands for those kept: the generator's form says so


# -- the generators' forms -----------------------------------------------------------

#: A name outside the generator: a global, a builtin or a closure variable.
_OUTER = frozenset({"LOAD_DEREF", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_CLASSDEREF"})
_SKIPPED = frozenset({"COPY_FREE_VARS", "CACHE", "EXTENDED_ARG", "NOP"})


@functools.lru_cache(maxsize=256)
def _shape(code: types.CodeType) -> tuple[tuple[str, Any], ...]:
    """``code``'s instructions, up to the names it gives its locals and outer values."""
    instructions = [i for i in dis.get_instructions(code) if i.opname not in _SKIPPED]
    at = {i.offset: n for n, i in enumerate(instructions)}
    jumps = set(dis.hasjrel) | set(dis.hasjabs)
    return tuple(
        ("LOAD_OUTER", None) if i.opname in _OUTER
        else (i.opname, at.get(i.argval)) if i.opcode in jumps
        else (i.opname, i.arg) for i in instructions)


@functools.cache
def _forms() -> frozenset[tuple[tuple[str, Any], ...]]:
    """The shapes of the generators over a Counter that are traced."""
    def forms(entries: Any, top: Any) -> Any:
        return ((k for k, n in entries), (n for k, n in entries),
                (k for k, n in entries if n == top), (n for k, n in entries if n == top),
                (k for k in entries))

    return frozenset(_shape(c) for c in forms.__code__.co_consts
                     if isinstance(c, types.CodeType))
