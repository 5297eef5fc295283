"""Which elements ``sink_to_redis`` can write: Redis stores str, bytes, int and float values.

An element Redis cannot store as a stream entry (a None, bool or list
value, a field name of such a type, an empty dict: an entry has at least
one field) fails alone, under the sink's error policy, with a message
naming what to convert. It is found before its batch is sent: in the
server it would fail the batch's script after the entries before it were
added.
"""

from __future__ import annotations

from typing import Any

__all__ = ["all_writable", "name_the_field", "writable"]

#: The types of the values Redis stores (a bool is an int, but not written as one).
_PLAIN = frozenset({str, bytes, int, float})


def all_writable(items: list[Any]) -> bool:
    """Whether Redis stores every element as an entry (checked by type first, as most are).

    >>> all_writable([1, "a", {"n": 2.5}]), all_writable([1, None]), all_writable([{"b": True}])
    (True, False, False)
    >>> all_writable([{}]), all_writable([{None: 1}])
    (False, False)
    """
    if _PLAIN.issuperset(map(type, items)):
        return True
    return all((type(x) is dict and len(x) > 0 and _PLAIN.issuperset(map(type, x))
                and _PLAIN.issuperset(map(type, x.values()))) or writable(x) for x in items)


def writable(x: Any) -> bool:
    """Whether Redis stores the element as an entry (a dict's fields, or the element itself)."""
    if isinstance(x, dict):
        return len(x) > 0 and all(map(_stored, x)) and all(map(_stored, x.values()))
    return _stored(x)


def _stored(v: Any) -> bool:
    return isinstance(v, (str, bytes, int, float)) and not isinstance(v, bool)


def _why(x: Any, default_field: str) -> str | None:
    """What makes ``x`` an entry Redis cannot store, and what to do (None: nothing)."""
    if isinstance(x, dict):
        if not x:
            return ("the element is an empty dict, and a Redis stream entry needs at least "
                    "one field: drop empty elements before the sink, e.g. filter(bool)")
        for name in x:
            if not _stored(name):
                return (f"field name {name!r:.60} is a {type(name).__name__}; Redis field "
                        "names are str, bytes, int or float: convert them before the sink, "
                        "e.g. map(lambda d: {str(k): v for k, v in d.items()})")
    for name, v in (x.items() if isinstance(x, dict) else ((default_field, x),)):
        if not _stored(v):
            return (f"field {name!r} holds {type(v).__name__} {v!r:.60}; Redis stores str, "
                    f"bytes, int or float values: convert it before the sink, e.g. "
                    f"map(lambda d: {{**d, {name!r}: json.dumps(d[{name!r}])}})")
    return None


def name_the_field(exc: Exception, x: Any, default_field: str) -> Exception:
    """``exc`` with a message naming what Redis cannot store in ``x``, same type.

    >>> name_the_field(ValueError("bad"), {}, "data")
    ValueError('the element is an empty dict, and a Redis stream entry needs at least one \
field: drop empty elements before the sink, e.g. filter(bool)')
    """
    why = _why(x, default_field)
    if why is None:
        return exc
    try:
        named = type(exc)(why)
    except Exception:  # pragma: no cover - an exception type with other arguments
        return exc
    named.__cause__ = exc
    return named
