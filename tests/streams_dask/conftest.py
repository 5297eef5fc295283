"""Real Dask clusters for the streams_dask tests.

The ``LocalCluster`` with two worker processes shared by the whole session
(``cluster``, ``client``) is in tests/conftest.py; tests that need a cluster
of their own (killing workers, separately started processes) make it
themselves.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from distributed import Client, LocalCluster

import streams_dask  # noqa: F401 - registers scatter() and to_dask()
from tests.dask_threads import dask_threads


@pytest.fixture(autouse=True)
def _functions_by_value(request: pytest.FixtureRequest) -> None:
    # Test modules are not importable on workers started elsewhere: send
    # the functions they define by value.
    module = sys.modules.get(request.module.__name__)
    if module is not None and module.__name__ not in cloudpickle.list_registry_pickle_by_value():
        cloudpickle.register_pickle_by_value(module)


@pytest.fixture(scope="module")
def one_worker() -> Iterator[Client]:
    """A cluster of one worker: a checkpoint taken on the two of ``client`` restores here."""
    with dask_threads(), LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                      host="127.0.0.1", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as c:
        yield c


def _segment_state(ckpt: Path) -> Any:
    from streams.state import read_checkpoint

    snap = read_checkpoint(ckpt)
    assert snap is not None
    states = next(s["segment_states"] for s in snap.states
                  if isinstance(s, dict) and "segment_states" in s)
    (state,) = states.values()
    return state


@pytest.fixture
def segment_state() -> Callable[[Path], Any]:
    """The state of the one stateful node of a checkpoint's Dask segment."""
    return _segment_state
