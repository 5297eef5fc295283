"""Which elements ``sink_to_redis`` can write: Redis stores str, bytes, int and float values.

An element of other values (None, a bool, a list) fails alone, under the
sink's error policy, with a message naming the field and how to convert it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["all_writable", "name_the_field", "writable"]

#: The types of the values Redis stores (a bool is an int, but not written as one).
_PLAIN = frozenset({str, bytes, int, float})


def all_writable(items: list[Any]) -> bool:
    """Whether Redis stores every element's values (checked by type first, as most are).

    >>> all_writable([1, "a", {"n": 2.5}]), all_writable([1, None]), all_writable([{"b": True}])
    (True, False, False)
    """
    if _PLAIN.issuperset(map(type, items)):
        return True
    return all((type(x) is dict and _PLAIN.issuperset(map(type, x.values()))) or writable(x)
               for x in items)


def writable(x: Any) -> bool:
    """Whether Redis stores the element's values (a dict's, or the element itself)."""
    return all(map(_stored, x.values() if isinstance(x, dict) else (x,)))


def _stored(v: Any) -> bool:
    return isinstance(v, (str, bytes, int, float)) and not isinstance(v, bool)


def name_the_field(exc: Exception, x: Any, default_field: str) -> Exception:
    """``exc`` with a message naming the field Redis cannot store, same type."""
    fields = x.items() if isinstance(x, dict) else ((default_field, x),)
    for name, v in fields:
        if not _stored(v):
            try:
                named = type(exc)(
                    f"field {name!r} holds {type(v).__name__} {v!r:.60}; Redis stores str, "
                    f"bytes, int or float values: convert it before the sink, e.g. "
                    f"map(lambda d: {{**d, {name!r}: json.dumps(d[{name!r}])}})")
            except Exception:  # pragma: no cover - an exception type with other arguments
                return exc
            named.__cause__ = exc
            return named
    return exc
