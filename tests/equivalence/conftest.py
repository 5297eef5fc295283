"""A real local SparkSession for the equivalence tests (shared with the Spark tests).

Starting the JVM costs seconds (more on a loaded 2-core machine), so one
session serves the whole test run: the same one ``to_spark()`` uses when it
is given none (``streams_spark.default_session``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import cloudpickle
import pytest
from pyspark import cloudpickle as spark_cloudpickle

import streams_spark
from streams_spark.session import default_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The shared local session (UI off, Arrow on, 2 shuffle partitions)."""
    session = default_session()
    yield session


@pytest.fixture(autouse=True)
def _functions_by_value(request: pytest.FixtureRequest) -> None:
    # Test modules are not importable in Spark's Python workers: send the
    # functions they define by value.
    # PySpark ships its own copy of cloudpickle; the build-time check uses
    # the installed one: register the module with both.
    module = sys.modules.get(request.module.__name__)
    if module is None:
        return
    for pickler in (cloudpickle, spark_cloudpickle):
        if module.__name__ not in pickler.list_registry_pickle_by_value():
            pickler.register_pickle_by_value(module)


assert streams_spark.ToSpark  # registers to_spark()
