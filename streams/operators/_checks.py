"""Build-time argument checks shared by the operators.

Bad arguments fail when the graph is built, with a message naming the
operator and saying what to pass instead, never later inside a worker.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import inspect
import io
import math
import numbers
import operator
import pickle
from collections.abc import Callable
from typing import Any

from ..errors import short_repr

__all__ = ["NAN_KEY", "canonical_key", "check_callable", "check_count", "check_keywords",
           "key_bytes", "key_function", "one_key"]


def check_callable(op: str, func: Any, what: str = "a function as its first argument",
                   example: str = "lambda x: ...") -> None:
    """Raise TypeError unless ``func`` is callable.

    ``what`` says where the function goes and ``example`` shows a call's
    arguments, each as the operator takes them.

    >>> check_callable("scan", None, "a function of (state, x) as its first argument",
    ...                "lambda state, x: state + x, start=0")
    Traceback (most recent call last):
    TypeError: scan() takes a function of (state, x) as its first argument, got None ...
    """
    if not callable(func):
        raise TypeError(
            f"{op}() takes {what}, got {short_repr(func)} "
            f"({type(func).__name__}); e.g. {op}({example})"
        )


def check_keywords(op: str, func: Any, kwargs: dict[str, Any], options: tuple[str, ...]) -> None:
    """Refuse a keyword ``func`` cannot take: the keywords after the function go to it.

    As streamz's, ``map(f, scale=2)`` calls ``f(x, scale=2)``; a keyword
    ``f`` has no parameter for (and no ``**kwargs``) would fail on the first
    element, so it is refused now, an operator's ``options`` it resembles
    named (a misspelled ``start=``). A function whose signature cannot be
    read (some built-ins) is left to its call.

    >>> import operator
    >>> check_keywords("scan", operator.add, {"strat": 0}, ("start", "returns_state"))
    Traceback (most recent call last):
    TypeError: scan(): strat= is no option of scan(), and add takes no such argument (the ...
    """
    if not kwargs or func is None:
        return
    try:  # the callable's own: a decorator's wrapper may take what the wrapped one does not
        parameters = inspect.signature(func, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    for name in kwargs:
        if name not in named:
            close = difflib.get_close_matches(name, [*options, *sorted(named)], n=1, cutoff=0.7)
            hint = f"; did you mean {close[0]}=?" if close else ""
            what = getattr(func, "__name__", None) or type(func).__name__
            raise TypeError(
                f"{op}(): {name}= is no option of {op}(), and {what} takes no such argument "
                f"(the keywords after the function are passed to it){hint}")


def check_count(op: str, name: str, value: Any, minimum: int = 1,
                optional: bool = False) -> Any:
    """``value`` as an int, if it is an int >= ``minimum`` (or None if optional); else raise.

    A float with no fraction (``n / 2``) counts as its int, as streamz's
    ``partition(2.0)`` takes it.

    >>> check_count("partition", "n", 2.0), check_count("partition", "n", 3)
    (2, 3)
    >>> check_count("partition", "n", 2.5)
    Traceback (most recent call last):
    ...
    TypeError: partition(): n must be an int, got 2.5
    """
    if optional and value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{op}(): {name} must be an int, got {short_repr(value)}")
    if value < minimum:
        raise ValueError(f"{op}(): {name} must be >= {minimum}, got {value}")
    return value


def key_function(key: Any, op: str = "", name: str = "key") -> Callable[[Any], Any]:
    """A callable key as is; anything else ``k`` means ``x[k]`` (streamz).

    An index that cannot be one (a list, a dict, a set: not hashable, as
    ``x[k]`` of a dict or a tuple needs) is refused now rather than failing
    on every element.

    >>> key_function(1)(("a", "b"))
    'b'
    >>> key_function(["t"])
    Traceback (most recent call last):
    ...
    TypeError: key= must be a function or an index x[k], got the list ['t']; ...

    A bool is refused too: ``time=True`` reads as a switch, and would be
    taken as ``x[1]``.
    """
    if callable(key):
        return key  # type: ignore[no-any-return]
    if isinstance(key, bool):
        field = '"ts"' if name == "time" else '"user"'
        raise TypeError(
            f"{f'{op}(): ' if op else ''}{name}={key!r} is no {name} reader: give a function "
            f"of the element or its index or field (x[k]), as {name}={field} or {name}=0")
    try:
        hash(key)
    except TypeError:
        raise TypeError(
            f"{f'{op}(): ' if op else ''}{name}= must be a function or an index x[k], got the "
            f"{type(key).__name__} {short_repr(key)}; for several fields give a function "
            "(lambda x: (x['a'], x['b'])) or a tuple") from None
    return operator.itemgetter(key)


class _NaNKey(float):
    """The type of :data:`NAN_KEY`: pickled as a reference to it, so it stays the one."""

    __slots__ = ()

    def __reduce__(self) -> str:
        return "NAN_KEY"


#: The key of every element whose key is a float NaN (see :func:`one_key`).
NAN_KEY: float = _NaNKey("nan")


def one_key(k: Any) -> Any:
    """``k`` as a keyed state's key: every float NaN (``numpy.float64`` too) as :data:`NAN_KEY`.

    A NaN equals nothing, itself included, so a dict finds a NaN key only
    by identity: each element's NaN (a missing value) would be a key of its
    own, and a NaN key kept in two structures (a state and its expiry)
    would no longer be found once a checkpoint's pickle made two objects of
    it. Spark groups NaN keys as one, and so does Dask's routing by key
    bytes: made one here, a keyed step gives their result in-process too.

    A NaN inside a tuple key (``(user, missing_value)``) is not made one:
    each element's NaN there is a key of its own, as a tuple hashes its
    NaN by identity. Looking into every tuple key cost a scan keyed by
    tuples 30% of its rate (656 against 850 ns an element, 2026-12-06);
    give a missing value a key of its own (``x if x == x else None``).

    >>> one_key(float("nan")) is one_key(float("nan")) is NAN_KEY
    True
    >>> import pickle
    >>> pickle.loads(pickle.dumps({NAN_KEY: 1}))[NAN_KEY], one_key("a"), one_key(2.5)
    (1, 'a', 2.5)
    """
    # k != k first: it is False for any key but a NaN, at the cost of one comparison.
    return NAN_KEY if k != k and isinstance(k, float) else k


def holds_nan(key: Any) -> bool:
    """Whether a tuple (or frozenset) key holds a float NaN, at any depth.

    A dict finds such a key only by identity (see :func:`one_key`): each
    element's NaN there makes a key of its own. An engine grouping elements
    by their key's bytes gives such a key bytes of its own.

    >>> holds_nan(("a", float("nan"))), holds_nan((1, (2, float("nan")))), holds_nan(float("nan"))
    (True, True, False)
    """
    return isinstance(key, tuple | frozenset) and any(
        (isinstance(v, float) and v != v) or holds_nan(v) for v in key)


def canonical_key(key: Any) -> Any:
    """One form for keys a dict takes as one (``1``, ``1.0``, ``True``), in tuples and
    frozensets too (a frozenset's elements in one order).

    An engine that routes or groups by a key's bytes (:func:`key_bytes`, the
    same in every process) takes them of this, so that keys one state
    in-process stay one state there.

    >>> canonical_key(1.0), canonical_key(True), canonical_key(2.5), canonical_key("a")
    (1, 1, 2.5, 'a')
    >>> canonical_key(("a", 2.0, (False, 0.5)))
    ('a', 2, (0, 0.5))
    >>> import numpy
    >>> canonical_key(numpy.True_), canonical_key(numpy.float64(2.0))
    (1, 2)
    """
    kind = type(key)
    if kind is str or kind is int:
        return key
    if isinstance(key, tuple):
        return tuple(map(canonical_key, key))  # a namedtuple: one key with its tuple
    if kind is frozenset:
        return _FrozensetOf(tuple(sorted(map(canonical_key, key), key=key_bytes)))
    if isinstance(key, bool | float) and float(key).is_integer():
        return int(key)
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        return int(key)  # a NumPy integer, an IntEnum: one key with the int
    if kind is float or key is None:
        return math.nan if key != key else key
    if isinstance(key, float):  # a NaN (NAN_KEY, -nan) as one NaN's bytes; numpy.float64
        return math.nan if key != key else float(key)
    if isinstance(key, str):
        return str.__str__(key)  # a str Enum member: one key with its value
    if isinstance(key, numbers.Number):
        return _number(key)
    if isinstance(key, _dt.datetime | _dt.timedelta):
        return _moment(key)
    if type(key).__name__ == "bool" and hasattr(key, "dtype"):  # numpy.bool_: no Integral
        return int(key)
    return key


def _moment(key: _dt.datetime | _dt.timedelta) -> Any:
    """One form for times a dict takes as one: an aware datetime in UTC, a subclass's
    (pandas' ``Timestamp``) as the plain type's, without ``fold`` (equality ignores it).

    A time finer than a microsecond (a ``Timestamp``'s nanoseconds) keeps its
    type, in UTC if aware; one that cannot say its offset (``NaT``) or has no
    UTC form (``datetime.min`` east of Greenwich) is left as it is.

    >>> from datetime import datetime, timedelta, timezone
    >>> paris = timezone(timedelta(hours=1))
    >>> _moment(datetime(2024, 1, 1, 1, tzinfo=paris)) == _moment(datetime(2024, 1, 1, 0,
    ...     tzinfo=timezone.utc)), key_bytes(datetime(2024, 1, 1, 1, tzinfo=paris)) == key_bytes(
    ...     datetime(2024, 1, 1, 0, tzinfo=timezone.utc))
    (True, True)
    """
    if isinstance(key, _dt.timedelta):
        if getattr(key, "nanoseconds", 0):
            return key
        return _dt.timedelta(key.days, key.seconds, key.microseconds)
    try:
        aware = key.utcoffset() is not None
        if aware:
            key = key.astimezone(_dt.UTC)
    except (ValueError, OverflowError):  # NaT; out of range in UTC
        return key
    if getattr(key, "nanosecond", 0):
        return key
    return _dt.datetime(key.year, key.month, key.day, key.hour, key.minute, key.second,
                        key.microsecond, tzinfo=_dt.UTC if aware else None)


def _number(key: Any) -> Any:
    """One form for a number of another type (Decimal, Fraction, complex) a dict takes as one.

    >>> from decimal import Decimal
    >>> from fractions import Fraction
    >>> _number(Decimal("1.10")), _number(Fraction(1, 2)), _number(2 + 0j), _number(Decimal("1.1"))
    (Decimal('1.1'), 0.5, 2, Decimal('1.1'))
    """
    if isinstance(key, complex):
        return canonical_key(key.real) if key.imag == 0 else key
    try:
        as_float = float(key)
    except (TypeError, ValueError, OverflowError):
        return key
    if key == as_float:  # exactly a float (Python compares across types exactly)
        return canonical_key(as_float)
    if hasattr(key, "normalize"):  # a Decimal: 1.1 and 1.10 are one key
        return key.normalize()
    return key


class _FrozensetOf:
    """A frozenset that pickles its elements in one order.

    A frozenset's own pickle lists them in the set's order, which depends on
    the order they were added in; these are sorted by their key bytes.
    """

    __slots__ = ("items",)

    def __init__(self, items: tuple[Any, ...]) -> None:
        self.items = items

    def __reduce__(self) -> tuple[Any, ...]:
        return (frozenset, (self.items,))


def key_bytes(key: Any) -> bytes:
    """The bytes of a key, equal for keys a dict takes as one, in every process.

    A pickle of :func:`canonical_key`'s form. A tuple's is taken without
    pickle's memo, which writes an object met twice in it (one string as two
    fields) as a reference: equal keys would differ by which of their parts
    are the same object.

    >>> key_bytes(("ab", 1.0)) == key_bytes(("".join("ab"), True)), key_bytes(1) == key_bytes(1.0)
    (True, True)
    >>> s = "x" * 3
    >>> key_bytes((s, s)) == key_bytes((s, "".join(["x"] * 3)))
    True
    """
    k = canonical_key(key)
    if type(k) is not tuple and type(k) is not _FrozensetOf:
        return pickle.dumps(k, protocol=5)
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.fast = True  # no memo (a key holds no cycle)
    pickler.dump(k)
    return out.getvalue()
