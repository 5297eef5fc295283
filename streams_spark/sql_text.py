"""Spark SQL expressions built as text, with the part of PySpark's ``Column`` API they need.

A traced function (:mod:`streams_spark.column_values`) builds expressions of
dozens of nodes; as ``pyspark.sql.Column`` objects each node costs a call
to the JVM (about 1 ms), so a query's plan took a noticeable part of a
second to build. As text, it costs one ``F.expr()`` per output column.

Examples
--------
>>> x = col("`n`")
>>> str(when(x.isNull(), lit(0)).otherwise(x * lit(2.5)))
'CASE WHEN (`n` IS NULL) THEN 0L ELSE (`n` * 2.5D) END'
>>> str(lit("it's")), str(lit("its")), str(lit(-1)), str(lit(-0.0))
("CAST(X'69742773' AS STRING)", "'its'", "CAST('-1' AS BIGINT)", '(-0.0D)')
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["Sql", "coalesce", "col", "concat", "create_map", "exact", "format_string", "isnan",
           "length",
           "lit", "named", "pmod", "raise_error", "struct", "to_json", "type_name", "when"]

_LONG = (-(2 ** 63), 2 ** 63 - 1)


class Sql:
    """A Spark SQL expression, as text."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Sql({self.text!r})"

    def __bool__(self) -> bool:
        raise TypeError("an SQL expression has no truth value in Python")

    def _op(self, op: str, other: Any) -> Sql:
        return Sql(f"({self.text} {op} {_sql(other)})")

    def __ne__(self, other: Any) -> Sql:  # type: ignore[override]
        return Sql(f"(NOT {self._op('=', other).text})")

    def __invert__(self) -> Sql:
        return Sql(f"(NOT {self.text})")

    __hash__ = None  # type: ignore[assignment]

    def isNull(self) -> Sql:  # as Column's
        return Sql(f"({self.text} IS NULL)")

    def cast(self, to: Any) -> Sql:
        return Sql(f"CAST({self.text} AS {type_name(to)})")


#: The binary operators, as ``Column``'s (``eqNullSafe`` is ``<=>``); set below.
_BINARY = {"__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/", "__eq__": "=",
           "__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">=", "__or__": "OR",
           "__and__": "AND", "eqNullSafe": "<=>"}


def _binary(op: str) -> Any:
    def apply(self: Sql, other: Any) -> Sql:
        return self._op(op, other)
    return apply


for _name, _op in _BINARY.items():
    setattr(Sql, _name, _binary(_op))


def type_name(to: Any) -> str:
    """A type's SQL name: a ``DataType``, or ``"long"``/``"double"``."""
    if isinstance(to, str):
        return {"long": "BIGINT", "double": "DOUBLE", "string": "STRING"}.get(to, to)
    return str(to.simpleString())


def _sql(x: Any) -> str:
    return x.text if isinstance(x, Sql) else lit(x).text


def lit(x: Any) -> Sql:
    """A constant, exactly (a string of any characters, a float's every digit).

    As a plain literal where its text means the same whatever the parser's
    settings (``2L``, ``0.5D``, ``'text'`` without quote or backslash), else
    as a cast: Spark parses, analyses, optimises and prints every node of a
    filter on each query, and a check's message holds several constants.

    >>> print(lit("a b"), lit(2), lit(-0.5), lit("${x}"))
    'a b' 2L (-0.5D) CAST(X'247B787D' AS STRING)
    """
    if isinstance(x, Sql):
        return x
    if x is None:
        return Sql("NULL")
    if type(x) is bool:
        return Sql("TRUE" if x else "FALSE")
    if type(x) is int:
        if not _LONG[0] <= x <= _LONG[1]:
            raise ValueError(f"{x} does not fit in 64 bits")
        # A negative number would be a negation, which -2 ** 63 overflows.
        return Sql(f"{x}L" if x >= 0 else f"CAST('{x}' AS BIGINT)")
    if type(x) is float:
        if math.isfinite(x):
            # repr() is the shortest text that reads back as the same double,
            # in Python and in Java alike (both round correctly).
            return Sql(f"{x!r}D" if math.copysign(1.0, x) > 0 else f"(-{-x!r}D)")
        text = "NaN" if math.isnan(x) else "Infinity" if x > 0 else "-Infinity"
        return Sql(f"CAST('{text}' AS DOUBLE)")
    if type(x) is str:
        # Spark substitutes ``${name}`` in SQL text (spark.sql.variable.substitute),
        # inside quotes too: a ``$`` goes as bytes, as a quote or a backslash does.
        if "'" not in x and "\\" not in x and "$" not in x:
            return Sql(f"'{x}'")  # nothing to escape, in either escaping mode
        return Sql(f"CAST(X'{x.encode().hex().upper()}' AS STRING)")
    raise TypeError(f"no SQL literal for a {type(x).__name__}")


def col(quoted_name: str) -> Sql:
    """A column, by its backquoted name."""
    return Sql(quoted_name)


class _When:
    def __init__(self, cases: list[tuple[str, str]]) -> None:
        self.cases = cases

    def when(self, condition: Any, value: Any) -> _When:
        return _When([*self.cases, (_sql(condition), _sql(value))])

    def otherwise(self, value: Any) -> Sql:
        cases = " ".join(f"WHEN {c} THEN {v}" for c, v in self.cases)
        return Sql(f"CASE {cases} ELSE {_sql(value)} END")


def when(condition: Any, value: Any) -> _When:
    """``CASE WHEN``: chain ``.when()``, end with ``.otherwise()``."""
    return _When([(_sql(condition), _sql(value))])


def _call(name: str, *args: Any) -> Sql:
    return Sql(f"{name}({', '.join(_sql(a) for a in args)})")


#: The integer operators, as functions that give NULL where the result is beyond 64 bits.
_EXACT = {"+": "try_add", "-": "try_subtract", "*": "try_multiply"}


def exact(op: str, a: Any, b: Any) -> Sql:
    """``a op b`` for ``+ - *`` of integers, or NULL beyond 64 bits (ANSI mode or not).

    >>> print(exact("*", col("`x`"), 4))
    try_multiply(`x`, 4L)
    """
    return _call(_EXACT[op], a, b)


def pmod(a: Any, b: Any) -> Sql:
    return _call("pmod", a, b)


def isnan(a: Any) -> Sql:
    return _call("isnan", a)


def coalesce(*args: Any) -> Sql:
    return _call("coalesce", *args)


def length(a: Any) -> Sql:
    return _call("length", a)


def concat(*args: Any) -> Sql:
    return _call("concat", *args)


def struct(*args: Any) -> Sql:
    return _call("struct", *args)


def create_map(*args: Any) -> Sql:
    return _call("map", *args)


def to_json(*args: Any) -> Sql:
    return _call("to_json", *args)


def format_string(pattern: str, *args: Any) -> Sql:
    return _call("format_string", lit(pattern), *args)


def raise_error(message: Any) -> Sql:
    return _call("raise_error", message)


def named(sql: str, name: str) -> Any:
    """The PySpark ``Column`` of ``sql`` under ``name``: one ``expr()``, its alias in the text.

    ``Column.alias()`` costs about ten calls to the JVM (PySpark records
    where in Python the alias was made); an ``AS`` in the text costs none.
    """
    from pyspark.sql import functions as F

    return F.expr(f"{sql} AS `{name.replace('`', '``')}`")
