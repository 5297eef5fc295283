"""Columns whose names hold a dot or a backtick reach Python steps under their own names."""

from __future__ import annotations

from typing import Any

import pytest

from streams import Stream

pytestmark = pytest.mark.spark


def test_dotted_and_backticked_columns_reach_python_steps(spark: Any) -> None:
    df = spark.createDataFrame([(1, -2, 3), (-4, 5, 6)], "`a.b` long, `x``y` long, c long")

    def step(r: Any) -> tuple[int, int]:
        return abs(r["a.b"]), abs(r["x`y"]) + r.c  # abs(): runs in Python, not as columns

    frame = Stream.from_spark(df).map(step).to_dataframe("v long, w long")
    assert sorted(tuple(r) for r in frame.collect()) == [(1, 5), (4, 11)]
    source = Stream.from_spark(df)
    out = source.map(step).gather().sink_to_list()
    source.start()
    assert sorted(out) == [(1, 5), (4, 11)]
