"""to_spark(progress=True) counts the micro-batches run on a tqdm bar."""

from __future__ import annotations

from typing import Any

import pytest

import streams_spark  # noqa: F401 - registers to_spark()
from streams import Stream

pytest.importorskip("tqdm")


def test_progress_bar_counts_micro_batches_and_closes(spark: Any) -> None:
    source = Stream()
    entry = source.to_spark(session=spark, batch_size=4, progress=True)
    out = entry.map(lambda x: x + 1).gather().sink_to_list()
    for i in range(10):
        source.emit(i)
    source.close()
    assert out == [i + 1 for i in range(10)]
    bar = entry._bar
    assert bar.n == 3  # batches of 4, 4 and the last 2 at close
    assert bar.disable is True  # tqdm's close() sets it: the bar ended with the stream
