"""What Spark executors need to run a segment: this library, and the user's code.

On a cluster the executors' Python may lack ``streams`` (or hold another
version of it): before the first job of a session whose master is not
local, the driver's own ``streams`` and ``streams_spark`` are zipped and
added with ``SparkContext.addPyFile``, so every executor imports the code
the driver runs. Their third-party dependencies (pyarrow, pandas, toolz,
tornado) must be installed there, as for PySpark itself.

A function from a module of the user's (a file next to the notebook or
script, not an installed package) would be pickled by reference and fail
on an executor at the first batch; :func:`by_value` registers such modules,
and the user's modules they import, with Spark's cloudpickle when the graph
is built, so their functions travel by value.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import io
import os
import site
import sys
import sysconfig
import tempfile
import threading
import zipfile
from types import FunctionType, ModuleType
from typing import Any

__all__ = ["PACKAGES", "by_value", "library_zip", "register_by_value", "ship_library"]

#: The packages executors import to run a segment.
PACKAGES = ("streams", "streams_spark")

#: Modules whose functions executors import by name (never sent by value).
_BY_NAME = ("streams", "streams_spark", "streams_dask", "pyspark", "__main__", "builtins")

_lock = threading.Lock()
_shipped: set[str] = set()  # application ids
_zip: str | None = None


def library_zip() -> str:
    """A zip of :data:`PACKAGES` as this process imports them (built once).

    Examples
    --------
    >>> import zipfile
    >>> names = zipfile.ZipFile(library_zip()).namelist()
    >>> "streams/core.py" in names, "streams_spark/nodes.py" in names
    (True, True)
    >>> any("__pycache__" in n for n in names)
    False
    """
    global _zip
    with _lock:
        if _zip is not None and os.path.exists(_zip):
            return _zip
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for name in PACKAGES:
                root = os.path.dirname(importlib.import_module(name).__file__ or "")
                for folder, dirs, files in os.walk(root):
                    dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                    for f in sorted(files):
                        if not f.endswith((".pyc", ".pyo")):
                            full = os.path.join(folder, f)
                            z.write(full, os.path.join(
                                name, os.path.relpath(full, root)).replace(os.sep, "/"))
        data = buf.getvalue()
        # Named by content: Spark refuses a second file of one name with
        # other bytes, and a changed library gets a new name.
        digest = hashlib.sha256(data).hexdigest()[:16]
        path = os.path.join(tempfile.mkdtemp(prefix="streams-lib-"),
                            f"streams-{digest}.zip")
        with open(path, "wb") as out:
            out.write(data)
        _zip = path
        return path


def ship_library(session: Any) -> None:
    """Add this library to the executors of ``session``'s cluster (once per application).

    A local master's workers run the driver's interpreter, which has it;
    Spark Connect sessions (no SparkContext) are left as they are.
    """
    sc = getattr(session, "_sc", None)
    if sc is None or str(sc.master).startswith("local"):
        return
    app = str(sc.applicationId)
    if app in _shipped:
        return
    sc.addPyFile(library_zip())
    _shipped.add(app)


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(getattr(site, "getsitepackages", list)())
    user = getattr(site, "getusersitepackages", lambda: None)()
    if isinstance(user, str):
        roots.add(user)
    return tuple(os.path.realpath(r) + os.sep for r in roots)


def _users_module(name: Any) -> ModuleType | None:
    """The module named ``name`` if it is the user's own (not installed, not this library)."""
    if not isinstance(name, str) or name.split(".")[0] in _BY_NAME:
        return None
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if module is None or path is None:
        return None
    if os.path.realpath(path).startswith(_installed_roots()):
        return None
    return module


def by_value(func: Any) -> None:
    """Send the functions of ``func``'s module by value, if it is the user's own.

    A module that is not in the standard library or an installed package
    (a ``helpers.py`` next to a notebook) is registered with PySpark's
    cloudpickle: executors that cannot import it receive the function's code.
    So are the user's modules it imports (``import constants``, ``from
    parsing import parse``), and theirs in turn: a function sent by value
    still names the modules of the globals it uses, which an executor
    could not import either.
    """
    while isinstance(func, functools.partial):
        func = func.func
    module = _users_module(getattr(func, "__module__", None) or type(func).__module__)
    todo = [] if module is None else [module]
    while todo:
        if not register_by_value(module := todo.pop()):
            continue  # registered before, with the modules it imports
        for value in list(vars(module).values()):
            if isinstance(value, ModuleType):
                used = _users_module(value.__name__)
            elif isinstance(value, type | FunctionType):
                used = _users_module(value.__module__)
            else:
                continue
            if used is not None:
                todo.append(used)


def register_by_value(module: ModuleType) -> bool:
    """Have PySpark's cloudpickle send ``module``'s functions by value; False if it already did.

    >>> import json
    >>> register_by_value(json), register_by_value(json)
    (True, False)
    >>> from pyspark import cloudpickle
    >>> cloudpickle.unregister_pickle_by_value(json)
    """
    from pyspark import cloudpickle

    if module.__name__ in cloudpickle.list_registry_pickle_by_value():
        return False
    cloudpickle.register_pickle_by_value(module)
    return True
