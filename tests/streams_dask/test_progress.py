"""scatter(progress=True) counts the Dask tasks done on a tqdm bar."""

from __future__ import annotations

import pytest
from distributed import Client

import streams_dask  # noqa: F401 - registers scatter()
from streams import Stream

pytest.importorskip("tqdm")


def test_progress_bar_counts_every_task_and_closes(client: Client) -> None:
    source = Stream()
    scatter = source.to_dask(client).scatter(batch_size=10, progress=True)
    out = scatter.map(lambda x: x * 2).gather().sink_to_list()
    for i in range(95):
        source.emit(i)
    source.close()
    bar = scatter._runner.progress
    assert out == [2 * i for i in range(95)]
    assert bar.n == scatter._runner.submitted >= 10  # one step per task, 10 elements at most
    assert bar.disable is True  # tqdm's close() sets it: the bar ended with the stream
