"""A window function pairing two selections of a window's elements, run as a Spark join.

``timed_window(size, slide=, time=, key=).map(f).flatten().to_dataframe(schema)``
where ``f`` has the shape of Nexmark's q8 (new users: the persons who opened
an auction in the window they joined)::

    def new_users(key_rows):
        _, rows = key_rows                                  # a keyed window
        persons = [r for r in rows if r.kind == PERSON]     # selections
        auctions = [r for r in rows if r.kind == AUCTION]
        return [(p.id, p.name, a.id) for p in persons for a in auctions]

is the join one would write by hand: each selection is the rows where its
condition holds, with their window (``window()``) and key; a pair is a row
of each with the same window and key (``<=>``: a None key is one key, as a
dict groups it). The result's values become columns of the pair. A
selection may be the window itself (``for a in rows``), both loops may read
the same selection, and the result may read the key; an unkeyed window's
function loops over its argument.

No row crosses to Python, and the results are Python's, as a bag (a
DataFrame has no order): the same pairs, as often. The function is read
from its source (:func:`inspect.getsource`), which must compile to exactly
the function's code; its conditions and result are traced as a ``map``'s
function is (:mod:`streams_spark.column_values`), in the namespace a
window's function has (:func:`streams_spark.window_values.sandboxed`).
Every row the window receives has its time and key checked, and the
conditions of both selections evaluated, as Python routes and selects it:
the checks are one filter below both selections' filters, so no row
escapes them by being in neither selection, and each side of the join
holds them whole (Spark may skip one side of a join whose other side is
empty).

Anything else raises :class:`Untraceable`, and the window runs in Python:
another shape, a closure, a session window (Spark forms sessions per
selection), a stream (a stream-stream join needs watermarks on both
sides), or a condition reading the key. Where the result fails on a pair
(a None in arithmetic), the query fails naming the pair's window and key,
as Python's function fails on its window.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streams.inline_source import tree_copy
from streams.operators.window_bounds import micros
from streams.spec import NodeSpec
from streams_spark.round_trips import select_expr

from .checks import ElementText, after, checked, checked_in_order, checking, kept_rows
from .column_values import Untraceable, Value, truth
from .row_values import RowValue, fields_of
from .sql_text import Sql
from .time_sql import interval, micros_of
from .tracing import trace
from .window_native import route, stamped, windowed
from .window_starts import bounds_of, start_of
from .window_values import sandboxed

__all__ = ["Pairing", "flattened", "lower_pairs", "pairing"]

#: The pair's element names in the traced result (a name no user writes).
_PAIR = "__streams_pair"


@dataclass(frozen=True)
class Pairing:
    """The parts of a pairing window function, as its source writes them."""

    #: The key's name (a keyed window's function unpacks ``key, rows``), or None.
    key: str | None
    #: Each selection's list name: ``(its element's name, its condition or None)``;
    #: the window's own list is a selection without condition.
    selections: dict[str, tuple[str, ast.expr | None]]
    #: The result's two loops: ``(element name, list name)`` each.
    loops: tuple[tuple[str, str], tuple[str, str]]
    #: The result's element, over the loops' names and the key.
    result: ast.expr
    filename: str


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _same_code(a: types.CodeType, b: types.CodeType) -> bool:
    """Whether two code objects run the same instructions on the same names and constants."""
    if (a.co_code != b.co_code or a.co_names != b.co_names or a.co_varnames != b.co_varnames
            or a.co_freevars != b.co_freevars or len(a.co_consts) != len(b.co_consts)):
        return False
    for x, y in zip(a.co_consts, b.co_consts, strict=True):
        if isinstance(x, types.CodeType) and isinstance(y, types.CodeType):
            if not _same_code(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _selection(stmt: ast.stmt, over: str) -> tuple[str, str, ast.expr | None] | None:
    """``name = [x for x in over if cond]``: ``(name, x, cond)``."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.ListComp)):
        return None
    comp = stmt.value
    if len(comp.generators) != 1:
        return None
    (loop,) = comp.generators
    if (loop.is_async or not isinstance(loop.target, ast.Name)
            or not isinstance(loop.iter, ast.Name) or loop.iter.id != over
            or not isinstance(comp.elt, ast.Name) or comp.elt.id != loop.target.id):
        return None
    ifs = loop.ifs
    cond = ifs[0] if len(ifs) == 1 else ast.BoolOp(ast.And(), ifs) if ifs else None
    return stmt.targets[0].id, loop.target.id, cond


@functools.lru_cache(maxsize=64)
def _parsed(code: types.CodeType) -> Pairing:
    """The pairing ``code``'s source writes (cached: reading the source costs)."""
    try:
        source = textwrap.dedent(inspect.getsource(code))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        raise Untraceable("a window function without its source") from None
    defn = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(defn, ast.FunctionDef) or defn.name != code.co_name:
        raise Untraceable("a window function that is not one def")
    compiled = compile(tree, code.co_filename, "exec")
    made = next((c for c in compiled.co_consts if isinstance(c, types.CodeType)), None)
    if made is None or not _same_code(made, code):
        raise Untraceable("a window function whose source is not its code")
    args = defn.args
    if (len(args.args) != 1 or args.posonlyargs or args.vararg or args.kwonlyargs
            or args.kwarg or args.defaults):
        raise Untraceable("a window function of other than one argument")
    body = list(defn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body.pop(0)  # the docstring
    rows, key = args.args[0].arg, None
    first = body[0] if body else None
    if (isinstance(first, ast.Assign) and len(first.targets) == 1
            and isinstance(first.targets[0], ast.Tuple) and len(first.targets[0].elts) == 2
            and all(isinstance(e, ast.Name) for e in first.targets[0].elts)
            and isinstance(first.value, ast.Name) and first.value.id == rows):
        key, rows = (e.id for e in first.targets[0].elts)  # type: ignore[attr-defined]
        body.pop(0)
    selections: dict[str, tuple[str, ast.expr | None]] = {rows: ("", None)}
    for stmt in body[:-1]:
        selected = _selection(stmt, rows)
        if selected is None or selected[0] in selections or selected[0] == key:
            raise Untraceable("a window function of another shape than selections and pairs")
        name, element, cond = selected
        if cond is not None and _names(cond) & {rows, key, *selections}:
            raise Untraceable("a selection's condition reading the window, its key or "
                              "another selection")
        selections[name] = (element, cond)
    last = body[-1] if body else None
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.ListComp)
            and len(last.value.generators) == 2):
        raise Untraceable("a window function not returning a list of pairs")
    loops = []
    for loop in last.value.generators:
        if (loop.is_async or loop.ifs or not isinstance(loop.target, ast.Name)
                or not isinstance(loop.iter, ast.Name) or loop.iter.id not in selections):
            raise Untraceable("a pair's loop other than over a selection")
        loops.append((loop.target.id, loop.iter.id))
    (a, _), (b, _) = loops
    if a == b or _names(last.value.elt) & ({rows, *selections} - {a, b}):
        raise Untraceable("a pair reading other than its two elements and the key")
    return Pairing(key, selections, (loops[0], loops[1]), last.value.elt, code.co_filename)


def pairing(func: Any) -> Pairing:
    """The pairing ``func`` is, or :class:`Untraceable`.

    Examples
    --------
    >>> def pairs(rows):
    ...     big = [r for r in rows if r.n > 2]
    ...     return [(x.n, y.n) for x in big for y in rows]
    >>> p = pairing(pairs)
    >>> p.key, list(p.selections), p.loops
    (None, ['rows', 'big'], (('x', 'big'), ('y', 'rows')))
    """
    if not isinstance(func, types.FunctionType) or func.__closure__:
        raise Untraceable("a window function that is not a plain function")
    return _parsed(func.__code__)


class _Pair(ast.NodeTransformer):
    """The result's element with its names read from one argument: ``(a, b, key)``."""

    def __init__(self, names: dict[str, int]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id not in self.names:
            return node
        return ast.copy_location(ast.Subscript(
            ast.Name(_PAIR, ast.Load()), ast.Constant(self.names[node.id]), ast.Load()), node)


def _function(arg: str, body: ast.expr, func: Any, filename: str
              ) -> Callable[[Any], Any]:
    """``lambda arg: body`` in ``func``'s globals, as a window's function runs."""
    made = ast.fix_missing_locations(ast.Expression(ast.Lambda(ast.arguments(
        posonlyargs=[], args=[ast.arg(arg)], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body)))
    return sandboxed(eval(compile(made, filename, "eval"), func.__globals__))


def flattened(specs: list[NodeSpec]) -> bool:
    """Whether ``specs`` are a window, a plain ``map`` and a ``flatten`` this module may lower."""
    window, func, flatten = specs
    return (windowed(window) and func.operator == "map" and func.policy == "raise"
            and func.func is not None and not func.params.get("args")
            and not func.params.get("kwargs") and flatten.operator == "flatten"
            and flatten.policy == "raise")


def lower_pairs(df: Any, keep: Any, element: Any, specs: list[NodeSpec], schema: Any,
                row: ElementText, ansi: bool,
                outputs: Callable[[Any, Any, bool], list[str]], *,
                narrowing: Sequence[str] = ()) -> Any:
    """The output frame of ``specs`` (see :func:`flattened`) over ``df``.

    ``keep`` is the condition of the filters before the window; ``element``
    stands for a row; ``row()`` is its text for messages (put in place by
    ``row.resolve()`` once both sides' conditions are traced); ``outputs(result,
    schema, ansi)`` makes the output columns. Raises :class:`Untraceable`
    when a part has no column form.
    """
    from pyspark.sql import functions as F

    window, func, _ = specs
    event_time = window.traits.event_time
    assert event_time is not None
    if event_time.session:
        raise Untraceable("pairs of a session window (Spark would form sessions per "
                          "selection)")
    if event_time.bounds:
        raise Untraceable("pairs of a window with its bounds")
    p = pairing(func.func)
    has_key = event_time.key is not None
    if (p.key is not None) != has_key:
        raise Untraceable("a function unpacking (key, rows) of an unkeyed window, or not "
                          "unpacking a keyed window's")
    if df.isStreaming:
        raise Untraceable("pairs of a stream's windows (a stream-stream join)")
    routing = route(window, element, ansi)
    element = routing.element
    if not isinstance(element, RowValue):
        raise Untraceable("pairs of a one-column input's values")
    slide = event_time.slide  # a tumbling window's is its size
    if slide is None or slide >= event_time.size:  # by its start, a long (window_starts)
        # From the time's microsecond, as stamped() would make its timestamp.
        # The checks on the filter below fail a row with no time, so the
        # coalesce() never takes its 0; it makes the key non-nullable, for
        # which the join adds no not-null filter: that filter computed the
        # start a second time, on every row the scan read.
        us = micros_of(routing.seconds)
        by, windowed_as = "__s", (f"coalesce({start_of(us, micros(event_time.size))}, 0) "
                                  "AS `__s`")
    else:
        by, windowed_as = "__w", (f"window({stamped(routing.seconds)}, "
                                  f"'{interval(event_time.size)}', '{interval(slide)}') AS `__w`")
    key_sql = routing.key.col if routing.key is not None else Sql("NULL")
    chosen_by: list[Any] = []
    proven, guarded = [], []
    for _, over in p.loops:
        name, cond = p.selections[over]
        guards: list[tuple[Any, Any]] = []
        non_null = set(routing.non_null)  # and what the condition's checks prove
        chosen_by.append(None if cond is None else truth(trace(
            _function(name, cond, func.func, p.filename), element, guards, ansi=ansi,
            non_null=non_null)))
        guarded.append((func.name, guards))
        proven.append(non_null)
    # Every row the window receives is checked once, for both sides: its
    # time and key first (Python routes it), then each selection's condition
    # (the function selects from the whole window), in one CASE that Spark
    # neither splits nor pushes into the scan. The sides are that one frame
    # with its window and key, each where its condition holds: the check and
    # the projection are built and analysed once, and Spark copies them into
    # both sides of the join (Nexmark q8 was built in 1.33-1.46x PySpark's
    # time with one of each per side, 0.98-1.04x so).
    steps = [(window.name, routing.guards), *guarded, (window.name, routing.beyond)]
    received = keep
    if any(step_guards for _, step_guards in steps):
        received = checked_in_order(steps, row, Sql("true"))
        if keep is not None:
            received = after(keep, received)
    base = select_expr(kept_rows(df, received, narrowing, row),
                       ["*", windowed_as, f"{key_sql} AS `__k`"])
    # A condition's failures are its guards, checked below; checking() keeps
    # one that still names a failure apart, as every filter that may fail.
    sides = [base if chosen is None else checking(base, row.resolve(chosen))
             for chosen in chosen_by]
    pairs = sides[0].alias("__l").join(sides[1].alias("__r"), F.expr(
        f"`__l`.`{by}` = `__r`.`{by}` AND `__l`.`__k` <=> `__r`.`__k`"))
    fields = fields_of(element)
    names = {p.loops[0][0]: 0, p.loops[1][0]: 1}
    stand_ins: list[Any] = [RowValue(fields, proven[0], prefix="`__l`."),
                            RowValue(fields, proven[1], prefix="`__r`.")]
    if p.key is not None and routing.key is not None:
        names[p.key] = 2
        stand_ins.append(Value(Sql("`__l`.`__k`"), routing.key.kind, routing.key.nullable))
    guards = []
    pair = _function(_PAIR, _Pair(names).visit(tree_copy(p.result)), func.func,
                     p.filename)
    result = trace(pair, tuple(stand_ins), guards, ansi=ansi)
    columns = outputs(result, schema, ansi)
    if guards:
        # Python's function fails on its window: the message names it.
        bounds = ("'start', `__l`.`__w`.`start`, 'end', `__l`.`__w`.`end`" if by == "__w"
                  else bounds_of("`__l`.`__s`", event_time.size))
        window_text = Sql(f"to_json(named_struct({bounds}, 'key', `__l`.`__k`))")
        pairs = checking(pairs, checked(guards, func.name, lambda: window_text, Sql("true")))
    return select_expr(pairs, columns)
