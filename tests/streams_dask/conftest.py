"""Real Dask clusters for the streams_dask tests.

The ``LocalCluster`` with two worker processes shared by the whole session
(``cluster``, ``client``) is in tests/conftest.py; tests that need a cluster
of their own (killing workers, separately started processes) make it
themselves.
"""

from __future__ import annotations

import sys

import cloudpickle
import pytest

import streams_dask  # noqa: F401 - registers scatter() and to_dask()


@pytest.fixture(autouse=True)
def _functions_by_value(request: pytest.FixtureRequest) -> None:
    # Test modules are not importable on workers started elsewhere: send
    # the functions they define by value.
    module = sys.modules.get(request.module.__name__)
    if module is not None and module.__name__ not in cloudpickle.list_registry_pickle_by_value():
        cloudpickle.register_pickle_by_value(module)
