"""A Spark Python worker freezes its long-lived heap once; a driver never does."""

from __future__ import annotations

import gc
from typing import Any

import pytest

import streams_spark  # noqa: F401 - registers from_spark(), to_dataframe()
from streams import Stream
from streams_spark.worker_heap import freeze_worker_heap

pytestmark = pytest.mark.spark


def frozen_objects(r: Any) -> int:
    # Calls a function: runs in Python, in the worker, after the stage started.
    return gc.get_freeze_count()


def test_a_worker_running_a_stage_has_frozen_its_heap(spark: Any) -> None:
    df = spark.range(3)
    out = Stream.from_spark(df).map(frozen_objects).to_dataframe("n long").collect()
    # PySpark, pyarrow and pandas alone are far more objects than this.
    assert len(out) == 3 and all(r.n > 10_000 for r in out)


def test_the_driver_heap_is_left_alone() -> None:
    before = gc.get_freeze_count()
    assert freeze_worker_heap() is False
    assert gc.get_freeze_count() == before
