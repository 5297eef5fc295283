"""Whether a Dask cluster or client of the test fixtures is open in this process.

A LocalCluster's scheduler runs in the test process, on a thread of its own,
and draws from the ``random`` module (which worker to gather a result from;
dask's sizeof samples a list), as a client's threads do. Hypothesis, drawing
examples meanwhile on the main thread, sees the global random state change
and warns that a strategy used ``random``. While a fixture's cluster or
client is open (a session's stays open after its tests, while a
pytest-xdist worker runs others), that warning is about Dask's threads:
``tests/conftest.py`` ignores it then, and only then.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["dask_threads", "open_now"]

_open = [0]


@contextlib.contextmanager
def dask_threads() -> Iterator[None]:
    """Count a Dask cluster or client open in this process while the block runs."""
    _open[0] += 1
    try:
        yield
    finally:
        _open[0] -= 1


def open_now() -> bool:
    """Whether a fixture's Dask cluster or client is open in this process."""
    return _open[0] > 0
