"""Shared fixtures: a virtual clock for anything timed, and the Spark session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from streams import VirtualClock, use_clock


@pytest.fixture
def clock() -> Iterator[VirtualClock]:
    """A virtual clock installed for the test: time moves only by ``advance``."""
    with use_clock(VirtualClock()) as c:
        yield c


# Test directories whose tests run functions on Spark.
SPARK_TEST_DIRS = ("streams_spark", "equivalence")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The shared local SparkSession (UI off, Arrow on, 2 shuffle partitions).

    Starting the JVM costs seconds (more on a loaded 2-core machine), so one
    session serves the whole run: the one ``to_spark()`` uses when given none.
    """
    from streams_spark.session import default_session

    yield default_session()


@pytest.fixture(autouse=True)
def _spark_functions_by_value(request: pytest.FixtureRequest) -> None:
    # Spark's Python workers cannot import test modules: the functions they
    # define travel by value. PySpark ships its own copy of cloudpickle and
    # the build-time check uses the installed one: register with both.
    if request.path.parent.name not in SPARK_TEST_DIRS:
        return
    import cloudpickle
    from pyspark import cloudpickle as spark_cloudpickle

    module = sys.modules.get(request.module.__name__)
    if module is None:
        return
    for pickler in (cloudpickle, spark_cloudpickle):
        if module.__name__ not in pickler.list_registry_pickle_by_value():
            pickler.register_pickle_by_value(module)
