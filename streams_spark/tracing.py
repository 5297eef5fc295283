"""Running a function over column values, following each branch on a column both ways.

See :mod:`streams_spark.column_values` for the values, and
:mod:`streams_spark.native` for what is traced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .column_values import (
    MAX_PATHS,
    NONE,
    OTHER,
    TRACE,
    Branch,
    Trace,
    Untraceable,
    Value,
    functions,
    lift,
)
from .pushdown import Leaf
from .row_values import RowValue

__all__ = ["trace"]


def trace(func: Callable[[Any], Any], element: Any, guards: list[tuple[Any, Any]], *,
          ansi: bool = True, non_null: set[str] | None = None,
          leaves: list[Leaf] | None = None, known: dict[str, bool] | None = None) -> Any:
    """What ``func(element)`` gives, as values and constants, following every branch.

    ``guards`` receives ``(condition, error)`` where Python would raise;
    ``non_null`` the input columns those guards prove are never None;
    ``leaves`` each path followed to its end (:class:`~streams_spark.pushdown.Leaf`);
    ``known`` the tests (the text of their truth) every row has passed (True)
    or failed (False), whose branches are taken that way only.
    Raises :class:`Untraceable` when some operation has no exact column form,
    when ``func`` raises, or past :data:`MAX_PATHS` paths.
    """
    paths = 0

    def run(decisions: list[bool]) -> Any:
        nonlocal paths
        first_guard = len(guards)
        run_trace = Trace(decisions, ansi, guards)
        run_trace.non_null = non_null
        if known:
            run_trace.known = known
        token = TRACE.set(run_trace)
        try:
            result = func(element)
        except Branch as branch:
            if len(decisions) >= MAX_PATHS:
                raise Untraceable("too many branches") from None
            yes = run([*decisions, True])
            no = run([*decisions, False])
            return _choose(branch.condition, yes, no)
        except Untraceable:
            raise
        except Exception as e:  # what Python does here is not a column's to say
            raise Untraceable(f"raised {type(e).__name__}: {e}") from None
        finally:
            TRACE.reset(token)
        paths += 1
        if paths > MAX_PATHS:
            raise Untraceable("too many branches")
        if leaves is not None:
            leaves.append(Leaf(run_trace.branches, result, first_guard, len(guards)))
        return result

    return run([])


def _choose(condition: Any, yes: Any, no: Any) -> Any:
    """``yes`` where ``condition`` holds, else ``no``, as one value of the same shape."""
    if isinstance(yes, tuple | list | dict) or isinstance(no, tuple | list | dict):
        if type(yes) is not type(no) or len(yes) != len(no):
            raise Untraceable("branches give results of different shapes")
        if isinstance(yes, dict):
            if yes.keys() != no.keys():
                raise Untraceable("branches give dicts of different keys")
            return {k: _choose(condition, yes[k], no[k]) for k in yes}
        return type(yes)(_choose(condition, a, b) for a, b in zip(yes, no, strict=True))
    if isinstance(yes, RowValue) or isinstance(no, RowValue):
        if yes is not no:
            raise Untraceable("one branch gives the row, the other something else")
        return yes
    a, b = lift(yes), lift(no)
    if a.kind == b.kind or NONE in (a.kind, b.kind):
        kind = b.kind if a.kind == NONE else a.kind
    else:
        raise Untraceable(f"branches give a {a.kind} and a {b.kind}")
    if kind == OTHER and not (a.dtype is not None and a.dtype == b.dtype):
        raise Untraceable("branches give columns of other types")
    F = functions()
    out = Value(F.when(condition, a.col).otherwise(b.col), kind, a.nullable or b.nullable,
                dtype=a.dtype if a.dtype == b.dtype else None)
    out.total = a.total and b.total
    return out

