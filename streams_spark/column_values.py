"""Python values as Spark columns, while a function is traced (see :mod:`streams_spark.native`).

A :class:`Value` stands for what a function computes from an input row's
fields; its operations build the column expression Spark evaluates, with
Python's semantics, or raise :class:`Untraceable`; :mod:`streams_spark.tracing` runs a
function over such values, following each branch on a column both ways.
"""

from __future__ import annotations

import contextvars
import math
import sys
from collections.abc import Callable
from typing import Any

from .caller_code import MIRRORED, written_as

__all__ = ["BOOL", "FLOAT", "INT", "MAX_PATHS", "NONE", "OTHER", "STR", "Untraceable", "Value",
           "functions", "has_constant", "kind_of", "lift", "truth"]

#: Branches followed per function, at most.
MAX_PATHS = 32


class Untraceable(Exception):
    """The function cannot be run as a Spark column expression; it runs in Python."""


# -- kinds ----------------------------------------------------------------------

INT, FLOAT, BOOL, STR, NONE, OTHER = "int", "float", "bool", "str", "none", "other"
#: Integers within this bound convert to doubles exactly.
_EXACT = 2 ** 53
_LONG = (-(2 ** 63), 2 ** 63 - 1)
_NO_CONSTANT = object()


class Trace:
    """One run of a function: the branch decisions to take, and what it met on the way."""

    def __init__(self, decisions: list[bool], ansi: bool, guards: list[tuple[Any, Any]]
                 ) -> None:
        self.decisions = decisions
        self.taken = 0
        self.ansi = ansi
        self.path: list[Any] = []  # the conditions of the branches taken so far
        #: The branches taken so far: (the value branched on, the way taken,
        #: how many guards were recorded before it), for streams_spark.pushdown.
        self.branches: list[tuple[Value, bool, int]] = []
        self.guards = guards  # (condition, error): where Python would raise
        #: While a window's element is traced (streams_spark.window_values):
        #: where its guards go; a branch on it cannot be followed.
        self.element_guards_to: list[tuple[Any, Any]] | None = None
        #: Input columns (their text) that the guards so far prove never None.
        self.non_null: set[str] | None = None
        #: Tests (the text of their truth) that every row reaching the function
        #: has passed (True) or failed (False): the checking filter's guard
        #: tests them first (streams_spark.pushdown.certain,
        #: streams_spark.checks.kept_rows). A branch on one is not followed.
        self.known: dict[str, bool] = {}


TRACE: contextvars.ContextVar[Trace] = contextvars.ContextVar("streams_spark_trace")


class Branch(Exception):
    """A branch on a column not decided yet: the run stops, to follow both ways."""

    def __init__(self, condition: Any) -> None:
        super().__init__()
        self.condition = condition


def functions() -> Any:
    """The expression builders: Spark SQL as text (see :mod:`streams_spark.sql_text`)."""
    from . import sql_text

    return sql_text


def kind_of(dtype: Any) -> str:
    from pyspark.sql import types as T

    if isinstance(dtype, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        return INT
    if isinstance(dtype, T.FloatType | T.DoubleType):
        return FLOAT
    if isinstance(dtype, T.BooleanType):
        return BOOL
    if isinstance(dtype, T.StringType) and dtype == T.StringType():  # binary collation
        return STR
    return OTHER


class Value:
    """A column expression standing for a Python value while a function is traced.

    The operations keep Python's semantics exactly, or raise
    :class:`Untraceable`:

    * integers are read as 64-bit (``long``) and floats as doubles, as
      Python holds them; ``+ - *`` of two integers only with ANSI mode on,
      where an overflow fails the query (Python's integers would grow);
      with a float, the integer becomes a double, as Python converts it;
    * ``/`` needs a float operand, or an integer constant within 2 ** 53 as
      the divisor of an integer, which then must be within 2 ** 53 (Python
      divides integers exactly; the query fails beyond); ``%`` and ``//``
      only an integer by a positive integer constant (``pmod``); a zero
      divisor fails the query, as Python raises ``ZeroDivisionError``;
    * ``==`` and ``!=`` are null-safe, as ``None == None`` is true;
      ``< <= > >=`` and arithmetic on a null fail the query, as Python
      raises ``TypeError``; NaN compares as in Python (Spark orders it);
    * an integer and a float compare only when the integer is a constant
      within 2 ** 53, or the float a constant below it (Python compares
      them exactly, Spark as doubles);
    * booleans compare only with booleans and do no arithmetic (``True ==
      1`` in Python); strings only compare (Spark's binary collation orders
      as Python's code points); other types only pass through.
    """

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, col: Any, kind: str, nullable: bool, dtype: Any = None,
                 constant: Any = _NO_CONSTANT, raw: Any = None) -> None:
        self.col = col
        self.kind = kind
        self.nullable = nullable
        self.dtype = dtype  # the input column's type, for a column read as is
        self.raw = raw  # that column itself, at its own width
        self.constant = constant
        #: Never null on any row (``nullable`` is false also where a check
        #: fails the query on a null first): its truth needs no ``coalesce``.
        self.total = not nullable and constant is not _NO_CONSTANT
        #: Never NaN or infinite (an integer; an integer by an integer).
        self.finite = kind == INT or (type(constant) is float and math.isfinite(constant))
        #: A bound on its magnitude, where one is known (None: any).
        self.bound: float | None = abs(constant) if type(constant) is int or (
            type(constant) is float and self.finite) else None
        #: The value this one is the unary minus of (see :func:`_negative`).
        self.negates: Value | None = None
        #: A test of an input column against a constant (or a boolean input
        #: column): its column never fails, and Spark can push it into its source.
        self.pushable = False
        #: A pushable ordering of a column that may be None: the guards it
        #: recorded (their positions in the trace's list, first and past the
        #: last) and where they hold (the column is None), as a pushable test.
        self.fails_where: tuple[int, int, Any] | None = None
        #: A pushable test's truth as a filter's condition, or an AND or OR
        #: operand of one, in the form Spark reasons about: ``a = 2``, not
        #: ``a <=> 2`` (as a filter, the same rows), from which Spark infers
        #: that ``a`` is not null, as from a hand-written ``where``.
        self.where_true: Any = None

    def __bool__(self) -> bool:
        trace = TRACE.get()
        if trace.element_guards_to is not None:
            raise Untraceable("a branch on each element of a window")
        holds = truth(self)
        if trace.known:
            known = trace.known.get(str(holds))
            if known is not None:
                return known
        if trace.taken < len(trace.decisions):
            decision = trace.decisions[trace.taken]
            trace.taken += 1
            trace.path.append(holds if decision else ~holds)
            trace.branches.append((self, decision, len(trace.guards)))
            return decision
        raise Branch(holds)

    def __add__(self, other: Any) -> Value:
        return _arith("+", self, other)

    def __radd__(self, other: Any) -> Value:
        return _arith("+", other, self)

    def __sub__(self, other: Any) -> Value:
        return _arith("-", self, other)

    def __rsub__(self, other: Any) -> Value:
        return _arith("-", other, self)

    def __mul__(self, other: Any) -> Value:
        return _arith("*", self, other)

    def __rmul__(self, other: Any) -> Value:
        return _arith("*", other, self)

    def __truediv__(self, other: Any) -> Value:
        return _arith("/", self, other)

    def __rtruediv__(self, other: Any) -> Value:
        return _arith("/", other, self)

    def __mod__(self, other: Any) -> Value:
        return _arith("%", self, other)

    def __rmod__(self, other: Any) -> Value:
        return _arith("%", other, self)

    def __floordiv__(self, other: Any) -> Value:
        return _arith("//", self, other)

    def __rfloordiv__(self, other: Any) -> Value:
        return _arith("//", other, self)

    def __neg__(self) -> Value:
        return _negative(self) if self.kind in (INT, FLOAT) else _refuse("unary -")

    def __eq__(self, other: Any) -> Value:  # type: ignore[override]
        return _compare("==", self, other)

    def __ne__(self, other: Any) -> Value:  # type: ignore[override]
        return _compare("!=", self, other)

    def __lt__(self, other: Any) -> Value:
        return _compare("<", self, other, sys._getframe(1))

    def __le__(self, other: Any) -> Value:
        return _compare("<=", self, other, sys._getframe(1))

    def __gt__(self, other: Any) -> Value:
        return _compare(">", self, other, sys._getframe(1))

    def __ge__(self, other: Any) -> Value:
        return _compare(">=", self, other, sys._getframe(1))

    def __getattr__(self, name: str) -> Any:
        raise Untraceable(f"attribute {name!r} of a column value")


def _refuse(what: str) -> Any:
    raise Untraceable(f"{what} on a column value")


def _refusing(name: str) -> Callable[..., Any]:
    return lambda self, *args: _refuse(name)


for _name in ("__pow__", "__rpow__", "__and__", "__rand__",
              "__or__", "__ror__", "__xor__", "__rxor__", "__invert__", "__pos__", "__abs__",
              "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "__matmul__",
              "__getitem__", "__len__", "__contains__", "__iter__", "__index__", "__int__",
              "__float__", "__round__", "__divmod__", "__rdivmod__",
              # Its text ("%s" % v, f"{v}", str(v)): an object's, not the row's value.
              "__str__", "__repr__", "__format__", "__bytes__"):
    setattr(Value, _name, _refusing(_name))


def has_constant(v: Value) -> bool:
    """Whether ``v`` is a constant known while tracing (its ``constant``)."""
    return v.constant is not _NO_CONSTANT


def lift(x: Any) -> Value:
    """A Python constant as a :class:`Value`; a value stays itself."""
    if isinstance(x, Value):
        return x
    F = functions()
    if x is None:
        return Value(F.lit(None), NONE, True, constant=None)
    if type(x) is bool:
        return Value(F.lit(x), BOOL, False, constant=x)
    if type(x) is int:
        if not _LONG[0] <= x <= _LONG[1]:
            raise Untraceable(f"the integer {x} does not fit in 64 bits")
        return Value(F.lit(x), INT, False, constant=x)  # a BIGINT literal
    if type(x) is float:
        return Value(F.lit(x), FLOAT, False, constant=x)  # a DOUBLE literal
    if type(x) is str:
        return Value(F.lit(x), STR, False, constant=x)
    raise Untraceable(f"a {type(x).__name__} constant")


def _fail(condition: Any, error: Any, value: Any) -> Any:
    """``value``; where ``condition`` holds on this path, Python raises ``error``.

    The failure is not part of ``value``'s column: a value Python computes
    may be dropped by a later step, or not be written, and Python raises all
    the same. Each step's failures are checked on every row the step sees
    (see :func:`streams_spark.checks.checked`).
    """
    F = functions()
    trace = TRACE.get()
    if trace.element_guards_to is not None:  # a window's element: no branch taken
        trace.element_guards_to.append((condition, error))
        return value
    if trace.path:
        on_path = trace.path[0]
        for c in trace.path[1:]:
            on_path = F.when(on_path, c).otherwise(False)
        condition = F.when(on_path, condition).otherwise(False)
    trace.guards.append((condition, error))
    return value


def _any_null(*values: Value) -> Any:
    """Where one of ``values`` is None (None: never), for a guard that fails there.

    An input column guarded on every path (before any branch) is never None
    on the rows that pass: the trace notes it, for the steps after this one.
    """
    trace = TRACE.get()
    if not trace.path and trace.element_guards_to is None and trace.non_null is not None:
        trace.non_null.update(str(v.col) for v in values if v.nullable and v.dtype is not None)
    cols = [v.col.isNull() for v in values if v.nullable]
    out = cols[0] if cols else None
    for c in cols[1:]:
        out = out | c
    return out


def _type_names(template: str, a: Value, b: Value) -> Any:
    """Python's ``TypeError`` message for ``a`` and ``b``, one of them None.

    A constant when only one of them may be None: it is, where the message
    is shown.
    """
    F = functions()
    names = {INT: "int", FLOAT: "float", BOOL: "bool", STR: "str", NONE: "NoneType"}
    if not (a.nullable and b.nullable):
        def known(v: Value) -> str:
            return "NoneType" if v.nullable else names.get(v.kind, "object")
        return "TypeError: " + template.replace("{a}", known(a)).replace("{b}", known(b))

    def name(v: Value) -> Any:
        known = F.lit(names.get(v.kind, "object"))
        return F.when(v.col.isNull(), F.lit("NoneType")).otherwise(known) if v.nullable \
            else known

    first, rest = template.split("{a}")
    middle, last = rest.split("{b}")
    return F.concat(F.lit("TypeError: " + first), name(a), F.lit(middle), name(b),
                    F.lit(last))


def _arith(op: str, a: Any, b: Any) -> Value:
    a, b = lift(a), lift(b)
    F = functions()
    if not {a.kind, b.kind} <= {INT, FLOAT}:
        raise Untraceable(f"{op} of {a.kind} and {b.kind}")
    floating = FLOAT in (a.kind, b.kind)
    if op == "/" and not floating:
        # Python rounds the exact quotient once; so do doubles, for integers
        # they hold exactly (within 2 ** 53): a divisor constant, the other
        # checked on each row.
        if a.kind != INT or type(b.constant) is not int or not 0 < abs(b.constant) <= _EXACT:
            raise Untraceable("/ of two integers other than by a constant within 2 ** 53")
        nulls = _any_null(a)
        x = a.col.cast("double")
        beyond = (a.col > F.lit(_EXACT)) | (a.col < F.lit(-_EXACT))
        col = _fail(beyond, F.lit(
            f"ValueError: an integer beyond 2**53 divided by {b.constant}: Python's "
            "quotient is exact, Spark's double is not; run this step in Python"), x / b.col)
        if nulls is not None:
            col = _fail(nulls, _type_names(
                "unsupported operand type(s) for /: '{a}' and '{b}'", a, b), col)
        quotient = Value(col, FLOAT, False)
        quotient.finite = True
        quotient.bound = _EXACT / abs(b.constant)  # the dividend is checked within 2 ** 53
        return quotient
    if op in ("%", "//") and not (
            a.kind == INT and type(b.constant) is int and b.constant > 0):
        raise Untraceable(f"{op} other than of an integer by a positive integer constant")
    if not floating and not TRACE.get().ansi:
        raise Untraceable(_WRAPS)
    x = a.col.cast("double") if floating and a.kind == INT else a.col
    y = b.col.cast("double") if floating and b.kind == INT else b.col
    if op in ("+", "-", "*"):
        col = _beyond_64_bits(op, a, b) if not floating else F.Sql(f"({x} {op} {y})")
    elif op == "/":
        col = _fail(y == 0, "ZeroDivisionError: float division by zero", x / y)
    elif op == "%":
        col = F.pmod(x, y)
    else:
        # Floor division: ``div`` truncates toward zero, one less where the
        # remainder is negative. Taking Python's remainder off first overflowed
        # below -2 ** 63 + y (-2 ** 63 // 3 failed the query).
        col = F.Sql(f"(({x} div {y}) - CASE WHEN ({x} % {y}) < 0 THEN 1L ELSE 0L END)")
    nulls = _any_null(a, b)
    if nulls is not None:
        col = _fail(nulls, _type_names(
            f"unsupported operand type(s) for {op}: '{{a}}' and '{{b}}'", a, b), col)
    return Value(col, FLOAT if floating else INT, False)


_WRAPS = "integer arithmetic with spark.sql.ansi.enabled off (it would wrap)"


def _beyond_64_bits(op: str, a: Value, b: Value) -> Any:
    """``a op b`` of two integers; the step fails, naming its element, beyond 64 bits.

    Python's integers grow; Spark's plain ``+ - *`` would fail the query with
    an overflow naming neither the step nor the element.
    """
    F = functions()
    col = F.exact(op, a.col, b.col)
    beyond = col.isNull()
    for v in (a, b):
        if v.nullable:  # None: Python's TypeError, checked apart
            beyond = beyond & ~v.col.isNull()
    return _fail(beyond, F.lit(
        f"OverflowError: the result of {op} is beyond Spark's 64-bit integers (Python's "
        "grow): run this step in Python (a function that calls anything runs there)"), col)


def _negative(a: Value) -> Value:
    """``-a``: Spark's unary minus keeps a zero's sign, as Python does (``0.0 - a`` does not)."""
    if a.kind == INT and not TRACE.get().ansi:
        raise Untraceable(_WRAPS)
    F = functions()
    col = (_beyond_64_bits("-", lift(0), a) if a.kind == INT  # -(-2 ** 63)
           else F.Sql(f"(- {a.col})"))
    nulls = _any_null(a)
    if nulls is not None:
        col = _fail(nulls, "TypeError: bad operand type for unary -: 'NoneType'", col)
    out = Value(col, a.kind, False)
    out.finite, out.bound, out.negates = a.finite, a.bound, a
    return out


def _comparable(a: Value, b: Value) -> bool:
    kinds = {a.kind, b.kind}
    if kinds == {INT, FLOAT}:
        i, f = (a, b) if a.kind == INT else (b, a)
        return ((type(i.constant) is int and abs(i.constant) <= _EXACT)
                or (type(f.constant) is float and abs(f.constant) < _EXACT))
    return len(kinds) == 1 and OTHER not in kinds


def _compare(op: str, a: Any, b: Any, caller: Any = None) -> Value:
    a, b = lift(a), lift(b)
    F = functions()
    if op in ("==", "!="):
        if NONE not in (a.kind, b.kind) and not _comparable(a, b):
            raise Untraceable(f"{op} of {a.kind} and {b.kind}")
        col = a.col.eqNullSafe(b.col)  # never null
        if op == "!=":
            col = ~col
        total = True
    else:
        if not _comparable(a, b) or NONE in (a.kind, b.kind):
            raise Untraceable(f"{op} of {a.kind} and {b.kind}")
        col = {"<": a.col < b.col, "<=": a.col <= b.col, ">": a.col > b.col,
               ">=": a.col >= b.col}[op]
        total = not (a.nullable or b.nullable)
    floats = [v.col for v in (a, b) if v.kind == FLOAT]
    if floats:
        # Python: NaN equals nothing and orders with nothing (isnan(null) is false).
        nan = F.isnan(floats[0]) if len(floats) == 1 else F.isnan(floats[0]) | F.isnan(
            floats[1])
        col = F.when(nan, F.lit(op == "!=")).otherwise(col)
    failing = None
    if op not in ("==", "!="):
        nulls = _any_null(a, b)
        if nulls is not None:
            first = len(TRACE.get().guards)
            written = caller is None or written_as(caller, op)  # read only for a message
            shown = (op, a, b) if written else (MIRRORED[op], b, a)
            col = _fail(nulls, _type_names(
                f"'{shown[0]}' not supported between instances of '{{a}}' and '{{b}}'",
                shown[1], shown[2]), col)
            failing = (first, len(TRACE.get().guards), nulls)
    value = Value(col, BOOL, False)
    value.total = total  # NaN's CASE is never null either
    value.pushable = not floats and any(
        x.raw is not None and y.constant is not _NO_CONSTANT for x, y in ((a, b), (b, a)))
    if value.pushable:
        value.fails_where = failing
        if op == "==" and NONE not in (a.kind, b.kind):
            from .pushdown import own_width  # which builds on this module

            value.where_true = own_width(a, b)
    return value


def truth(x: Any) -> Any:
    """A non-null boolean column: whether Python finds ``x`` true."""
    F = functions()
    if isinstance(x, tuple | list | dict):
        return F.lit(len(x) > 0)
    from .row_values import RowValue  # which builds on this module

    if isinstance(x, RowValue):
        return F.lit(bool(x))
    v = lift(x)
    if v.kind == NONE:
        return F.lit(False)
    if v.kind == BOOL:
        return v.col if v.total else F.coalesce(v.col, F.lit(False))
    if v.kind in (INT, FLOAT):
        return F.coalesce(v.col != 0, F.lit(False))  # NaN is true, in both
    if v.kind == STR:
        return F.coalesce(F.length(v.col) > 0, F.lit(False))
    raise Untraceable("the truth of a column of another type")
