"""Build-time argument checks shared by the operators.

Bad arguments fail when the graph is built, with a message naming the
operator and saying what to pass instead, never later inside a worker.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from ..errors import short_repr

__all__ = ["canonical_key", "check_callable", "check_count", "key_function"]


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


def check_count(op: str, name: str, value: Any, minimum: int = 1,
                optional: bool = False) -> None:
    """Raise unless ``value`` is an int >= ``minimum`` (or None if optional)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{op}(): {name} must be an int, got {short_repr(value)}")
    if value < minimum:
        raise ValueError(f"{op}(): {name} must be >= {minimum}, got {value}")


def key_function(key: Any) -> Callable[[Any], Any]:
    """A callable key as is; anything else ``k`` means ``x[k]`` (streamz)."""
    if callable(key):
        return key  # type: ignore[no-any-return]
    return operator.itemgetter(key)


def canonical_key(key: Any) -> Any:
    """One form for keys a dict takes as one (``1``, ``1.0``, ``True``).

    An engine that routes or groups by a key's pickle (the same bytes in
    every process) pickles this instead, so that keys one state in-process
    stay one state there.

    >>> canonical_key(1.0), canonical_key(True), canonical_key(2.5), canonical_key("a")
    (1, 1, 2.5, 'a')
    """
    if isinstance(key, bool | float) and float(key).is_integer():
        return int(key)
    return key

