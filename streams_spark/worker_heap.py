"""The garbage collector of a Spark Python worker: its long-lived heap frozen once.

A stage allocates an object or more per element, and CPython's collector
runs a full collection every so often, walking every object alive. A
worker that has imported PySpark, pandas, pyarrow and the user's modules
holds hundreds of thousands of objects that live as long as the process,
so most of that walk is wasted. :func:`freeze_worker_heap` freezes them
(``gc.freeze()``, after one full collection so that no garbage is frozen
with them): the collector no longer walks them, and objects made later are
collected as before. It acts once per worker process and only in a worker
(where a task is running): a driver's heap is the user's.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_worker_heap"]

_frozen = False


def freeze_worker_heap() -> bool:
    """Freeze the worker's heap, the first time in this process; return whether it is.

    Outside a Spark task (a driver, a test calling a stage function itself)
    it does nothing and returns False.

    Examples
    --------
    >>> freeze_worker_heap()  # here no Spark task is running
    False
    """
    global _frozen
    if _frozen:
        return True
    from pyspark import TaskContext

    if TaskContext.get() is None:
        return False
    gc.collect()
    gc.freeze()
    _frozen = True
    return True
