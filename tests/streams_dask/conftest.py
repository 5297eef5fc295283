"""Real Dask clusters for the streams_dask tests.

One ``LocalCluster`` with two worker processes is shared by the whole
session (starting one costs seconds); tests that need a cluster of their
own (killing workers, separately started processes) make it themselves.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import cloudpickle
import pytest
from distributed import Client, LocalCluster

import streams_dask  # noqa: F401 - registers scatter() and to_dask()


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """Two single-threaded worker processes on loopback."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=":0") as c:
        yield c


@pytest.fixture(scope="session")
def client(cluster: LocalCluster) -> Iterator[Client]:
    """A client of :func:`cluster`, not installed as the default client."""
    with Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(autouse=True)
def _functions_by_value(request: pytest.FixtureRequest) -> None:
    # Test modules are not importable on workers started elsewhere: send
    # the functions they define by value.
    module = sys.modules.get(request.module.__name__)
    if module is not None and module.__name__ not in cloudpickle.list_registry_pickle_by_value():
        cloudpickle.register_pickle_by_value(module)
