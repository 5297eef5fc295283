"""Which client a pipeline runs on: given, default, or an embedded cluster."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from distributed import Client, LocalCluster
from distributed.core import Status

import streams_dask  # noqa: F401
from streams import Stream


def run(source: Stream[Any], data: list[int]) -> None:
    for x in data:
        source.emit(x)
    source.close()


@pytest.mark.dask
def test_to_dask_binds_the_client_given(client: Client) -> None:
    source: Stream[Any] = Stream()
    scatter = source.to_dask(client).map(abs).scatter()
    out = scatter.map(str).gather().sink_to_list()
    run(source, [-1, 2])
    assert out == ["1", "2"]
    assert scatter._runner is not None and scatter._runner.client is client


@pytest.mark.dask
def test_default_client_is_used(cluster: LocalCluster) -> None:
    with Client(cluster) as default:
        source: Stream[Any] = Stream()
        scatter = source.scatter()
        out = scatter.map(str).gather().sink_to_list()
        run(source, [1, 2])
        assert out == ["1", "2"]
        assert scatter._runner is not None and scatter._runner.client is default
    assert default.status != "running"


@pytest.mark.dask
def test_embedded_cluster_starts_on_first_use_and_closes_with_the_pipeline(
        caplog: pytest.LogCaptureFixture) -> None:
    source: Stream[Any] = Stream()
    scatter = source.scatter()
    out = scatter.map(lambda x: x * 2).gather().sink_to_list()
    assert scatter._runner is None  # building starts nothing
    with caplog.at_level(logging.INFO, logger="streams_dask"):
        for x in range(5):
            source.emit(x)
        assert scatter._runner is not None
        cluster, own_client = scatter._runner.connection.owned
        assert isinstance(cluster, LocalCluster)
        # The dashboard, like the scheduler, listens on loopback only.
        bound = {sock.getsockname()[0]
                 for sock in cluster.scheduler.http_server._sockets.values()}
        assert bound and bound <= {"127.0.0.1", "::1"}, bound
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        source.close()
    assert out == [0, 2, 4, 6, 8]
    started = [r for r in caplog.records if "started a LocalCluster" in r.getMessage()]
    assert len(started) == 1
    assert cluster.status == Status.closed
    assert own_client.status == "closed"


@pytest.mark.dask
def test_flush_delivers_everything_in_flight_without_closing(client: Client) -> None:
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client, batch_size=3)
    out = scatter.map(lambda x: x * 10).gather().sink_to_list()
    for x in range(20):
        source.emit(x)
    scatter.flush()
    assert out == [x * 10 for x in range(20)]
    assert scatter.in_flight == 0
    source.emit(20)
    source.close()
    assert out[-1] == 200
