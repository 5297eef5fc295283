"""Where a step lowered to Spark columns fails: one ``raise_error`` naming the element.

A traced function (:mod:`streams_spark.column_values`) records ``(condition,
error)`` guards where Python would raise. :func:`checked` turns a step's
guards into one expression that fails the query with Python's message,
naming the step and the element (:func:`element_repr`), as in-process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .column_values import functions, quoted

__all__ = ["checked", "element_repr"]


def checked(guards: list[tuple[Any, Any]], label: str, row: Callable[[], Any], then: Any
            ) -> Any:
    """``then``, or the query fails with the first of ``guards`` that holds.

    ``row()`` gives the failing element's text for the message. One
    ``raise_error`` names the element for all the guards (the first that
    holds picks the error): each copy of the element's text adds code to
    every row's loop that Spark generates, though it runs only on a failure,
    and a long loop runs slower (the JVM compiles large methods less well).

    Examples
    --------
    >>> from streams_spark.sql_text import Sql
    >>> print(checked([(Sql("a"), "E1"), (Sql("b"), "E2")], "map", lambda: Sql("r"),
    ...               Sql("x")))  # doctest: +NORMALIZE_WHITESPACE
    CASE WHEN (a OR b) THEN raise_error(concat('map failed on element ', r,
    CASE WHEN a THEN ': E1' ELSE ': E2' END)) ELSE x END
    """
    F = functions()
    unique: dict[tuple[str, str], tuple[Any, Any]] = {}
    for condition, error in guards:  # every path meets the failures before its first branch
        unique.setdefault((str(condition), str(error)), (condition, error))
    if not unique:
        return then
    cases = list(unique.values())
    # A constant error is one literal with its separator: Spark parses,
    # analyses, optimises and prints each node of the filter on every query.
    errors = [F.lit(": " + e) if isinstance(e, str) else F.concat(F.lit(": "), e)
              for _, e in cases]
    error = errors[0]
    if len(cases) > 1:
        # The first guard that holds picks the error (a CASE is false on NULL, as OR is).
        chosen = F.when(cases[0][0], errors[0])
        for (condition, _), e in zip(cases[1:-1], errors[1:-1], strict=True):
            chosen = chosen.when(condition, e)
        error = chosen.otherwise(errors[-1])
    failing = cases[0][0]
    for condition, _ in cases[1:]:
        failing = failing | condition
    message = F.concat(F.lit(f"{label} failed on element "), row(), error)
    return F.when(failing, F.raise_error(message)).otherwise(then)


def element_repr(fields: list[Any]) -> Any:
    """The element a row stands for, as JSON (nulls included), for an error message.

    One ``to_json``: a repr built of an expression per field (quotes, ``None``,
    ``True``) made the code Spark generates for the whole filter about 20%
    slower, though it runs only when the query fails.
    """
    F = functions()
    row = F.struct(*[F.col(quoted(f.name)) for f in fields])
    return F.to_json(row, F.create_map(F.lit("ignoreNullFields"), F.lit("false")))
