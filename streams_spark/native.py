"""Simple ``map`` and ``filter`` functions of a Spark-resident segment, run as Spark columns.

A function that only reads an input row's fields and combines them with
arithmetic, comparisons, ``and``/``or``/``not``, conditional expressions and
constants (``lambda r: r.kind == 2 and r.auction % 123 == 0``, ``lambda r:
(r.auction, r.price * 0.908)``) is turned into a Spark column expression,
so that Spark runs it in the JVM and no row crosses to Python for it. The
result is the one Python would give, row for row, or the query fails where
Python would raise (see :class:`Value` for each operation's rules).

A function qualifies only when it provably has no effect but its result:

* it is a plain Python function of one argument whose bytecode holds no
  call, loop, ``try``, ``is`` test, f-string or nested function (see
  :data:`ALLOWED`), and whose globals and closure variables are numbers,
  strings, booleans or None;
* tracing it over a stand-in row meets only the operations below; a branch
  on a column (``if``, ``and``, ``or``, ``not``, ``in``) is followed both
  ways, by running the function again (a pure function gives the same
  answer each time), up to :data:`MAX_PATHS` paths.

Anything else raises :class:`Untraceable` and the step runs in Python, as
before. Only steps with the default error policy (``raise``) are lowered:
a skipped or routed failure needs the Python element.

The leading filters' tests of columns against constants also go to Spark
at the head of the checking filter, which Spark pushes into the source
(:mod:`streams_spark.pushdown`, :func:`streams_spark.checks.kept_rows`).
"""

from __future__ import annotations

import dis
import types
from collections.abc import Callable
from functools import partial
from typing import Any

from streams.spec import NodeSpec
from streams_spark.round_trips import select_expr

from .checks import ElementText, after, checked, kept_rows
from .column_values import (
    BOOL,
    FLOAT,
    INT,
    NONE,
    STR,
    Untraceable,
    functions,
    kind_of,
    lift,
    truth,
)
from .pushdown import Leaf, certain, implied
from .row_values import RowValue, column, quoted
from .tracing import trace
from .window_native import lower_window, window_text, windowed
from .window_pairs import flattened, lower_pairs
from .window_starts import by_start

__all__ = ["ALLOWED", "lower_native", "pure"]


#: Opcodes (CPython 3.10-3.13) a function may use: loads, stores, arithmetic,
#: comparisons, forward jumps and building tuples, lists and dicts.
ALLOWED = frozenset({
    "RESUME", "NOP", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL",
    "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_CONST", "LOAD_SMALL_INT",
    "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_ATTR", "STORE_FAST", "STORE_FAST_LOAD_FAST",
    "STORE_FAST_STORE_FAST", "POP_TOP", "COPY", "SWAP", "ROT_TWO", "ROT_THREE", "DUP_TOP",
    "BINARY_OP", "BINARY_ADD", "BINARY_SUBTRACT", "BINARY_MULTIPLY", "BINARY_TRUE_DIVIDE",
    "BINARY_MODULO", "BINARY_SUBSCR", "COMPARE_OP", "CONTAINS_OP", "UNARY_NEGATIVE",
    "UNARY_NOT", "TO_BOOL", "BUILD_TUPLE", "BUILD_LIST", "LIST_EXTEND", "BUILD_MAP",
    "BUILD_CONST_KEY_MAP", "RETURN_VALUE", "RETURN_CONST", "JUMP_FORWARD",
    "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE",
    "POP_JUMP_FORWARD_IF_TRUE", "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP", "NOT_TAKEN",
})

_CONSTANTS = (int, float, str, bool, type(None))

_PLAIN = (dis.COMPILER_FLAG_NAMES and {
    flag for flag, name in dis.COMPILER_FLAG_NAMES.items()
    if name in ("VARARGS", "VARKEYWORDS", "GENERATOR", "COROUTINE", "ASYNC_GENERATOR",
                "ITERABLE_COROUTINE")})


def _constant(value: Any) -> bool:
    if type(value) in (tuple, frozenset):
        return all(_constant(v) for v in value)
    return type(value) in _CONSTANTS


def pure(func: Any) -> bool:
    """Whether ``func``'s bytecode can do nothing but compute its result from its argument.

    Examples
    --------
    >>> pure(lambda r: (r.a, r.b * 2) if r.a > 0 else None)
    True
    >>> pure(lambda r: print(r)), pure(lambda r: r is None), pure(len)
    (False, False, False)
    """
    if not isinstance(func, types.FunctionType):
        return False
    code = func.__code__
    if code.co_argcount != 1 or code.co_kwonlyargcount or code.co_posonlyargcount > 1:
        return False
    if any(code.co_flags & flag for flag in _PLAIN):
        return False
    for cell in func.__closure__ or ():
        try:
            if not _constant(cell.cell_contents):
                return False
        except ValueError:  # an empty cell
            return False
    for ins in dis.get_instructions(code):
        if ins.opname not in ALLOWED:
            return False
        if ins.opname == "LOAD_GLOBAL" and not (
                ins.argval in func.__globals__ and _constant(func.__globals__[ins.argval])):
            return False  # a builtin (a call would follow) or a global object
        if ins.opname == "LOAD_CONST" and not _constant(ins.argval):
            return False  # a code object: a nested function or comprehension
    return True


# -- lowering ----------------------------------------------------------------------

#: The integer columns narrower than Python's integers here (64 bits): their ranges.
_NARROW = {"byte": 8, "short": 16, "integer": 32}

#: Checks a narrowing output column: ``(guards, column)`` to the column that fails the
#: query, naming the step and the element, where a guard holds (see :func:`_output`).
Checking = Callable[[list[tuple[Any, Any]], Any], Any]


def _output(x: Any, field: Any, ansi: bool, check: Checking | None = None,
            last: str = "") -> str:
    """The column ``x`` becomes in ``field``, as ``to_dataframe()`` writes it from Python.

    An integer for a narrower integer column is checked against its range
    by ``check``, with the message of the Python path (which names ``last``,
    the step that returned it): Spark's cast would fail the query with a
    bare ``CAST_OVERFLOW``, naming neither. Without ``check`` (the pairs of
    a window's elements) such an output stays in Python.
    """
    v = lift(x)
    target = field.dataType
    kind = kind_of(target)
    if v.nullable and not field.nullable:
        raise Untraceable(f"a value that may be None for the non-null column {field.name!r}")
    if v.kind == NONE:
        col = v.col.cast(target)
    elif v.raw is not None and v.dtype == target:
        col = v.raw  # a column passed through as it is
    elif v.dtype is not None and v.dtype == target:
        # A column passed through: numbers back to their own width.
        col = v.col.cast(target) if v.kind in (INT, FLOAT) else v.col
    elif v.kind == kind == INT and target.typeName() == "long":
        col = v.col.cast(target)
    elif v.kind == kind == INT and ansi and check is not None:
        bits = _NARROW[target.typeName()]
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        F = functions()
        error = F.concat(F.lit(f"OutputError: to_dataframe(): column {field.name!r} "
                               f"({target.simpleString()}) cannot hold what {last} "
                               "returned: "), v.col.cast("string"),
                         F.lit(f" is not in range: {low} to {high}"))
        # The cast itself fails only beyond the range: the check comes first.
        col = check([((v.col < F.lit(low)) | (v.col > F.lit(high)), error)],
                    v.col.cast(target))
    elif (v.kind == kind and kind in (BOOL, STR)) or (
            v.kind == FLOAT and target.typeName() == "double"):
        col = v.col
    else:
        raise Untraceable(f"a {v.kind} for the {target.simpleString()} column {field.name!r}")
    # Text, for one selectExpr(): each Column built in Python costs several
    # round trips to the JVM, which a short query notices.
    name = quoted(field.name)
    return name if str(col) == name else f"{col} AS {name}"


def _outputs(result: Any, schema: Any, ansi: bool, check: Checking | None = None,
             last: str = "") -> list[str]:
    """The output columns of ``result`` as SQL text, as ``to_dataframe()`` makes a row of it.

    ``check`` and ``last``: see :func:`_output`.
    """
    fields = schema.fields
    if isinstance(result, dict):
        return [_output(result.get(f.name), f, ansi, check, last) for f in fields]
    if isinstance(result, tuple | list):
        if len(result) != len(fields):
            raise Untraceable("a result with another number of values than columns")
        return [_output(x, f, ansi, check, last) for x, f in zip(result, fields, strict=True)]
    if isinstance(result, RowValue) or len(fields) != 1:
        raise Untraceable("a row, or one value for several columns")
    return [_output(result, fields[0], ansi, check, last)]


def _checking(label: str, row: ElementText) -> Checking:
    """A column that fails the query where a guard holds, naming ``label`` and ``row``."""
    return lambda guards, col: checked(guards, label, row, col)


def _window_checking(window: NodeSpec, func: NodeSpec, streaming: bool) -> Checking:
    """As :func:`_checking`, for the result of ``window``'s function ``func``.

    The window is named as its own checks name it (by its bounds and key, in
    :func:`~streams_spark.window_native.lower_window`'s groups).
    """
    event_time = window.traits.event_time
    assert event_time is not None
    text = window_text(event_time, by_start(event_time, streaming),
                       event_time.key is not None or event_time.session)
    return lambda guards, col: checked(guards, func.name, lambda: text, col)


def _traceable(spec: NodeSpec) -> bool:
    return (spec.operator in ("map", "filter", "remove") and spec.policy == "raise"
            and spec.func is not None and not spec.params.get("args")
            and not spec.params.get("kwargs") and not spec.traits.stateful and pure(spec.func))


def lower_native(df: Any, specs: list[NodeSpec], schema: Any
                 ) -> tuple[Any, list[NodeSpec], Any | None]:
    """Run the leading traceable steps of a segment as Spark columns.

    Returns ``(df, rest, frame)``: ``df`` with the leading filters applied as
    one Spark filter, the steps left to run in Python, and the output frame
    when every step (and the conversion to ``schema``) became columns.
    Filters and maps after a first map are lowered only when everything is:
    a Python step after them would need the Python values.
    """
    if not specs:
        return df, specs, None
    F = functions()
    ansi = str(df.sparkSession.conf.get("spark.sql.ansi.enabled", "true")).lower() == "true"
    fields = df.schema.fields
    element: Any = RowValue(fields) if len(fields) != 1 else column(
        F.col(quoted(fields[0].name)), fields[0])
    row = ElementText(element, fields)  # named by the fields the functions read
    keep: Any = None  # the filters' condition so far
    # What the rows kept or failed so far all satisfy, for Spark to push into
    # its source (streams_spark.pushdown): known up to the first step with a
    # check, whose failing rows a later step's tests need not hold for.
    narrowing: list[str] = []
    known: dict[str, bool] = {}  # the tests those hold (streams_spark.pushdown.certain)
    narrows = True
    cut, cut_keep = 0, None  # the steps lowered while the element is still the input row
    cut_narrowing: list[str] = []
    current = element
    for i, spec in enumerate(specs):
        if not _traceable(spec) or spec.func is None:
            break
        guards: list[tuple[Any, Any]] = []
        leaves: list[Leaf] | None = [] if narrows and spec.operator != "map" else None
        keeps = spec.operator == "filter"
        try:
            result = trace(spec.func, current, guards, ansi=ansi, leaves=leaves, known=known)
            if leaves is not None:
                condition = implied(leaves, keep_when=keeps)
                if condition is not None:
                    narrowing.append(str(condition))
                    tests = certain(leaves, keep_when=keeps)
                    if tests:
                        # The checking filter tests these first, once, as its
                        # guard (checks.kept_rows): the check's own branches need
                        # not test them again (q1's kind, 3.5% of its run).
                        known.update(tests)
                        guards = []
                        result = trace(spec.func, current, guards, ansi=ansi, known=known)
            narrows = narrows and not guards
            test = None if spec.operator == "map" else truth(result)
            if spec.operator == "map":
                current = result
            # A step that keeps every row it sees (a filter whose test the
            # scan made) adds its guards alone, or nothing.
            if test is None or known.get(str(test)) is keeps:
                passes = F.lit(True) if guards else None
            else:
                passes = test if keeps else ~test
            if passes is not None:
                passes = checked(guards, spec.name, row, passes)
                # One CASE per step: a later step is evaluated only on the rows
                # the earlier ones kept, as in Python (Spark may reorder AND).
                keep = passes if keep is None else after(keep, passes)
        except Untraceable:
            break
        if current is element:
            cut, cut_keep, cut_narrowing = i + 1, keep, list(narrowing)
    else:
        if current is not element:
            last = specs[-1].name
            try:
                columns = _outputs(current, schema, ansi, _checking(last, row), last)
            except Untraceable:
                columns = None
            if columns is not None:
                out = kept_rows(df, keep, narrowing, row, prefiltered=True)
                return out, [], select_expr(out, list(map(row.resolve, columns)))
    if len(specs) == cut + 2 and windowed(specs[cut]):
        try:  # a window and its function, as Spark aggregates
            window, func = specs[cut], specs[cut + 1]
            outputs = partial(_outputs, check=_window_checking(window, func, df.isStreaming),
                              last=func.name)
            frame = lower_window(df, cut_keep, element, window, func, schema, row, ansi,
                                 outputs, narrowing=cut_narrowing)
            return df, [], frame
        except Untraceable:
            pass
    if len(specs) == cut + 3 and flattened(specs[cut:]):
        try:  # a window's pairs of its elements, as a Spark join
            return df, [], lower_pairs(df, cut_keep, element, specs[cut:], schema, row, ansi,
                                       _outputs, narrowing=cut_narrowing)
        except Untraceable:
            pass
    return kept_rows(df, cut_keep, cut_narrowing, row), specs[cut:], None
