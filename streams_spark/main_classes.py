"""Values holding a class of ``__main__`` (a script's, a notebook's) cross by value.

Plain pickle names a class by module and name. An executor's ``__main__``
is PySpark's worker, not the user's script: an element of a class defined
in the script fails to unpickle there (``Can't get attribute 'Point' on
<module 'pyspark.daemon'>``), where in-process it works. Functions of
``__main__`` already travel by value; so do values holding such a class,
pickled by PySpark's cloudpickle: the one the job's functions are pickled
with, which tracks the classes it sends by value, so a class an executor
receives in a function and in an element is one class there, and a value
coming back to the driver is of the driver's own class again.

Only where needed, since pickling a class by value costs far more than
naming it: elements are pickled plainly, and again by value only when a
class of ``__main__`` is found in them. The driver looks for one only when
the plain pickles name ``__main__`` (a search of their bytes,
:func:`names_main`); on an executor, such a class came by value and its
instances do not pickle plainly, which is when it is looked for there.

Examples
--------
>>> import enum
>>> Color = enum.IntEnum("Color", {"RED": 1}, module="__main__")
>>> names_main(b"\\x8c\\x08__main__\\x94\\x8c\\x05Color"), names_main(pickle.dumps(1))
(True, False)
>>> pickle.loads(dumps(Color.RED)) == 1  # by value: no __main__.Color needed to load it
True
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterable
from typing import Any

from streams.main_classes import holds_main_class

__all__ = ["by_value", "dumps", "holds_main_class", "names_main"]


#: Where plain pickles name something of ``__main__``: ``re`` searches a buffer in place
#: (an Arrow column's data, uncopied) faster than ``bytes.__contains__`` searches a copy.
_MAIN = re.compile(b"__main__")


def names_main(pickled: Any) -> bool:
    """Whether plain pickles (any bytes-like object) may name something of ``__main__``.

    The cheap first test: a class of ``__main__`` is then looked for in the values.
    """
    return _MAIN.search(pickled) is not None


def by_value(obj: Any) -> bytes:
    """``obj`` pickled with its classes of ``__main__`` by value (PySpark's cloudpickle)."""
    from pyspark import cloudpickle

    return cloudpickle.dumps(obj, protocol=5)  # type: ignore[no-any-return]


def dumps(obj: Any, parts: Iterable[Any] | None = None) -> bytes:
    """``obj`` pickled plainly, or by value where a class of ``__main__`` it holds does not
    pickle plainly (on an executor, where the class came by value).

    ``parts``: the values ``obj`` holds (a list's, a pack's), each of which
    must pickle plainly or hold such a class; otherwise what plain pickle
    raises is raised, as it is for any other object that does not pickle:
    a value of no class of ``__main__`` (a closure) is not sent by value
    for sharing a list with one that is.
    """
    try:
        return pickle.dumps(obj, protocol=5)
    except Exception:
        if not _by_value_needed([obj] if parts is None else parts):
            raise
    return by_value(obj)


def _by_value_needed(parts: Iterable[Any]) -> bool:
    """Whether some of ``parts`` hold a class of ``__main__`` and all others pickle plainly."""
    found = False
    for part in parts:
        try:
            pickle.dumps(part, protocol=5)
        except Exception:
            if not holds_main_class(part):
                return False
            found = True
    return found
