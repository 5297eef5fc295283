"""A window's elements as Spark aggregates, while its function is traced.

The function of a ``map`` after an event-time window takes the window (a
list of elements, or ``(key, elements)``). :func:`trace_window` runs it
over a :class:`WindowValue` standing for that list, with ``len``, ``min``,
``max`` and ``sum`` replaced by versions that build Spark aggregates:

* ``len(w)`` is ``count(1)``;
* ``min(x.f for x in w)``, ``max(...)`` and ``sum(...)`` aggregate what a
  generator over the window yields for each element;
* ``min(w, key=k)`` and ``max(w, key=k)`` are the element with the least
  (greatest) key: ``min(struct(key, fields))``, its fields read as usual;
* ``collections.Counter(x.f for x in w)`` counts the window's values, in a
  first level of grouping (:mod:`streams_spark.window_counts`).

Everything else a window function may do is what a ``map`` function may
(:mod:`streams_spark.column_values`): arithmetic, comparisons, branches on
group values, tuples and dicts. The function runs in a namespace holding
only those builtins and ``Counter``, its constants, and the functions and
modules it names (each in the same namespace): a call to anything else
fails the trace, and the window runs in Python as before.

The results are Python's: ``len`` and integer or string ``min``/``max``
(Python's ``<`` on them is Spark's order), integer ``sum`` (with ANSI mode,
which fails on an overflow); a ``None`` where Python compares or adds one
fails the query with Python's message. Floats stay in Python (NaN makes
Python's ``min`` depend on the order, which Spark does not keep), and so
does a function using ``is`` (a stand-in is never None, so ``x is None``
would be false on every element). Among
elements of equal key, ``min(w, key=k)`` takes the one with the least
fields; Python takes the first, and a window's elements have no order on
Spark.
"""

from __future__ import annotations

import builtins
import collections
import dis
import types
from collections.abc import Callable
from typing import Any

from .column_values import INT, Untraceable, Value
from .row_values import RowValue
from .sql_text import Sql
from .tracing import trace
from .window_aggregates import (
    Aggregates,
    Counted,
    WindowValue,
    aggregate_count,
    current,
    each,
    extreme_of,
    fails_if,
    none_compared,
    ordered,
    sum_of,
    values_of,
    window_trace,
)
from .window_counts import counter

__all__ = ["Aggregates", "WindowValue", "sandboxed", "trace_window"]

_CONSTANTS = (int, float, str, bool, type(None), bytes)


def _len(x: Any) -> Any:
    if isinstance(x, WindowValue):
        return Value(aggregate_count(), INT, False)
    if isinstance(x, Counted):
        return x.size()
    if isinstance(x, Value | RowValue):
        raise Untraceable("len() of a column value")
    return builtins.len(x)


def _extreme(op: str, args: tuple[Any, ...], key: Any, default: Any) -> Any:
    real = builtins.min if op == "min" else builtins.max
    if len(args) != 1:
        if any(isinstance(a, Value | RowValue | WindowValue | Counted) for a in args):
            raise Untraceable(f"{op}() of several column values")
        return real(*args, key=key)
    (iterable,) = args
    if isinstance(iterable, WindowValue) and key is not None:
        return _ArgMin.of(op, iterable.element, key)
    if isinstance(iterable, Counted):
        if key is not None:
            raise Untraceable(f"{op}() of a Counter with a key")
        return iterable.extreme(op)
    values, read = values_of(iterable)
    if read is None:
        if key is not None:
            return real(values, key=key)
        return real(values) if default is _MISSING else real(values, default=default)
    if key is not None:
        raise Untraceable(f"{op}() of a generator with a key")
    if read == "counts":
        return values[0].extreme(op)
    return extreme_of(op, ordered(values[0], f"{op}()"))


_MISSING = object()


def _min(*args: Any, key: Any = None, default: Any = _MISSING) -> Any:
    return _extreme("min", args, key, default)


def _max(*args: Any, key: Any = None, default: Any = _MISSING) -> Any:
    return _extreme("max", args, key, default)


def _sum(iterable: Any, start: Any = 0) -> Any:
    if isinstance(iterable, Counted):
        return iterable.total(start)
    values, read = values_of(iterable)
    if read is None:
        return builtins.sum(values, start)
    if read == "counts":
        return values[0].total(start)
    return sum_of(ordered(values[0], "sum()"), start)


class _ArgMin:
    """``min(w, key=k)``: the element of least key, a struct of the fields read of it."""

    def __init__(self, op: str, keys: list[Value], element: RowValue, name: str) -> None:
        self.op = op
        self.keys = keys
        self.element = element
        self.name = name  # its aggregate column
        self.fields: dict[str, Value] = {}

    @staticmethod
    def of(op: str, element: Any, key: Any) -> _Chosen:
        if not isinstance(element, RowValue):
            raise Untraceable(f"{op}(window, key=...) of elements other than input rows")
        k = each(lambda: key(element))
        keys = list(k) if isinstance(k, tuple) else [k]
        for i, part in enumerate(keys):
            ordered(part, f"a {op}() key")
            if part.nullable and (i > 0 or len(keys) == 1):
                # A lone key compares with < (None fails); a later item of a
                # tuple only on ties, which depend on the order Spark lacks.
                raise Untraceable(f"a {op}() key that may be None")
        aggregates = current().aggregates
        ident = f"{op}:{','.join(str(p.col) for p in keys)}"
        argmin = aggregates.argmins.get(ident)
        if argmin is None:
            argmin = aggregates.argmins[ident] = _ArgMin(op, keys, element,
                                                         aggregates.reserve())
        first = keys[0]
        if first.nullable:
            # Tuples compare their first items with ==, then the first unequal
            # pair with <: a None among other first items always meets <.
            count = aggregate_count()
            nonnull = aggregates.add(f"count({first.col})")
            fails_if(f"({count} > 1 AND {nonnull} > 0 AND {nonnull} < {count})",
                     none_compared(op, first.kind))
        return _Chosen(argmin)

    def _in_keys(self, v: Value) -> str | None:
        """``v`` read from the struct's key items, where one holds it (None: none does).

        A key item is not stored twice, nor the value a key item negates
        (``min(rows, key=lambda r: (-r.price, r.dt)).price``): a unary minus
        undoes itself exactly, for integers and doubles alike.
        """
        for i, p in enumerate(self.keys):
            if str(p.col) == str(v.col):
                return f"`{self.name}`.`k{i}`"
            if p.negates is not None and str(p.negates.col) == str(v.col):
                return f"(- `{self.name}`.`k{i}`)"
        return None

    def field(self, name: str, v: Value) -> Value:
        self.fields.setdefault(name, v)
        read = self._in_keys(v) or f"`{self.name}`.`f_{name}`"
        return Value(Sql(read), v.kind, v.nullable, dtype=v.dtype)

    def sql(self) -> str:
        """``min(named_struct(key items, fields))``: Spark orders structs item by item."""
        parts = [f"'k{i}', {p.col}" for i, p in enumerate(self.keys)]
        parts += [f"'f_{n}', {v.col}" for n, v in self.fields.items()
                  if self._in_keys(v) is None]
        return f"{self.op}(named_struct({', '.join(parts)}))"


class _Chosen:
    """The element ``min(w, key=k)`` chose: its fields are the struct's."""

    def __init__(self, argmin: _ArgMin) -> None:
        self.__argmin = argmin

    def __getattr__(self, name: str) -> Value:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.__argmin.field(name, getattr(self.__argmin.element, name))

    def __getitem__(self, key: Any) -> Value:
        v = self.__argmin.element[key]
        name = key if type(key) is str else f"_{key}"
        return self.__argmin.field(name, v)

    __hash__ = None  # type: ignore[assignment]


# -- the namespace ------------------------------------------------------------------

_BUILTINS = {"len": _len, "min": _min, "max": _max, "sum": _sum}
_REPLACED: dict[Any, Callable[..., Any]] = {
    builtins.len: _len, builtins.min: _min, builtins.max: _max, builtins.sum: _sum,
    collections.Counter: counter}
_DEPTH = 4


def _constant(value: Any) -> bool:
    if type(value) in (tuple, frozenset):
        return all(_constant(v) for v in value)
    return type(value) in _CONSTANTS


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c)
    return names


class _ModuleView:
    """A module as a traced function sees it: its functions sandboxed, its constants."""

    def __init__(self, module: types.ModuleType, depth: int) -> None:
        self.__module = module
        self.__depth = depth

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_ModuleView__"):
            raise AttributeError(name)
        resolved = _resolve(getattr(self.__module, name), self.__depth)
        if resolved is _HIDDEN:
            raise Untraceable(f"{self.__module.__name__}.{name} in a window function")
        return resolved


_HIDDEN = object()


def _resolve(value: Any, depth: int) -> Any:
    try:
        replaced = _REPLACED.get(value)
    except TypeError:  # unhashable
        replaced = None
    if replaced is not None:
        return replaced
    if _constant(value):
        return value
    if depth < _DEPTH and isinstance(value, types.FunctionType):
        try:
            return sandboxed(value, depth + 1)
        except Untraceable:
            return _HIDDEN
    if depth < _DEPTH and isinstance(value, types.ModuleType):
        return _ModuleView(value, depth + 1)
    return _HIDDEN


def _tests_identity(code: types.CodeType) -> bool:
    """Whether ``code`` or a function or generator in it uses ``is`` or ``is not``."""
    # In a condition, `x is None` compiles to a jump on None (POP_JUMP_IF_NONE...).
    return any(i.opname == "IS_OP" or i.opname.endswith("_NONE")
               for i in dis.get_instructions(code)) or any(
        _tests_identity(c) for c in code.co_consts if isinstance(c, types.CodeType))


def sandboxed(func: Any, depth: int = 0) -> Callable[..., Any]:
    """``func`` in a namespace of its constants, functions, modules and the aggregates.

    Examples
    --------
    >>> sandboxed(lambda w: len(w))([1, 2]) == 2
    True
    >>> sandboxed(lambda w: print(w))([1])
    Traceback (most recent call last):
    ...
    NameError: name 'print' is not defined
    """
    replaced = _REPLACED.get(func) if callable(func) else None
    if replaced is not None:
        return replaced
    if not isinstance(func, types.FunctionType):
        raise Untraceable(f"{func!r:.60} is not a Python function")
    code = func.__code__
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):  # generator, coroutine...
        raise Untraceable("a generator or coroutine function")
    if _tests_identity(code):
        # A stand-in is never None: `x is None` would be false for every element.
        raise Untraceable("`is` (a column value's identity is not its value's)")
    for cell in func.__closure__ or ():
        try:
            if not _constant(cell.cell_contents):
                raise Untraceable("a closure over a value other than a constant")
        except ValueError:  # an empty cell
            raise Untraceable("a closure over an unset variable") from None
    if not all(_constant(d) for d in func.__defaults__ or ()) or func.__kwdefaults__:
        raise Untraceable("defaults other than constants")
    namespace: dict[str, Any] = {"__builtins__": _BUILTINS}
    for name in _names(code):
        if name in func.__globals__:
            value = _resolve(func.__globals__[name], depth)
            if value is not _HIDDEN:
                namespace[name] = value
    return types.FunctionType(code, namespace, func.__name__, func.__defaults__,
                              func.__closure__)


def trace_window(func: Callable[[Any], Any], window: Any, guards: list[tuple[Any, Any]],
                 aggregates: Aggregates, *, ansi: bool) -> Any:
    """What ``func(window)`` gives, as aggregates of ``aggregates`` and constants.

    ``guards`` receives the group guards (conditions on aggregates);
    ``aggregates.element_guards`` the guards on each element.
    """
    with window_trace(aggregates):
        return trace(sandboxed(func), window, guards, ansi=ansi)

