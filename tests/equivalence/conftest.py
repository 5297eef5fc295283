"""One ``backend`` fixture: in-process (fused), on Dask, on Spark.

Each equivalence test runs a pipeline on the backend and compares with the
reference: the same pipeline in-process with fusion off, every node called
through its ``update`` method. The shared SparkSession, the Dask cluster and
the by-value pickling of test functions are in tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import streams_dask  # noqa: F401 - registers scatter() and to_dask()
import streams_spark  # noqa: F401 - registers to_spark()
from streams import Stream


@dataclass(frozen=True)
class Backend:
    """Where the middle of a pipeline runs.

    ``enter(source, batch_size)`` starts the segment below ``source``;
    ``leave(node)`` brings a result back (``gather()``), once per output.
    """

    name: str
    enter: Callable[[Stream[Any], int], Stream[Any]]
    leave: Callable[[Stream[Any]], Stream[Any]]


def _gather(node: Stream[Any]) -> Stream[Any]:
    return node.gather()


@pytest.fixture(params=[
    "in-process",
    pytest.param("dask", marks=pytest.mark.dask),
    pytest.param("spark", marks=pytest.mark.spark),
])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn, with its engine started (shared per session)."""
    if request.param == "dask":
        client = request.getfixturevalue("client")
        return Backend("dask", lambda s, size: s.to_dask(client).scatter(
            batch_size=size, max_in_flight=1 + size % 3), _gather)
    if request.param == "spark":
        request.getfixturevalue("spark")
        return Backend("spark", lambda s, size: s.to_spark(batch_size=size), _gather)
    return Backend("in-process", lambda s, size: s, lambda n: n)
