"""Whether a value holds a class defined in ``__main__`` (a script's, a notebook's).

Plain pickle names a class by module and name; a worker process of Dask or
Spark has a ``__main__`` of its own, where such a class is not found. The
engines test values for one before they send them (Dask puts such keys in
one key group, Spark sends such values by value).

Examples
--------
>>> import enum
>>> Color = enum.IntEnum("Color", {"RED": 1}, module="__main__")
>>> holds_main_class([1, Color.RED]), holds_main_class([1, "__main__"])
(True, False)
"""

from __future__ import annotations

import io
import pickle
from typing import Any

__all__ = ["holds_main_class"]


class _Found(Exception):
    pass


class _MainClassFinder(pickle.Pickler):
    """Pickles an object only to find a class of ``__main__`` in it."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) and obj.__module__ == "__main__":
            raise _Found
        return NotImplemented


def holds_main_class(obj: Any) -> bool:
    """Whether pickling ``obj`` names a class defined in ``__main__``.

    A value that does not pickle for another reason is not one: its own
    error is the one to report.
    """
    try:
        _MainClassFinder(io.BytesIO(), protocol=5).dump(obj)
    except _Found:
        return True
    except Exception:
        return False
    return False
