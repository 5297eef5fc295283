"""Asynchronous streams: ``await emit`` is bounded by the tasks in flight."""

from __future__ import annotations

import asyncio
from operator import add
from typing import Any

import pytest
from distributed import Client, LocalCluster

from streams import NodeError, Stream


def inc(x: int) -> int:
    return x + 1


def expected(data: list[int]) -> list[Any]:
    source: Stream[Any] = Stream()
    out = source.map(inc).scan(add).sink_to_list()
    for x in data:
        source.emit(x)
    source.close()
    return out


@pytest.mark.dask
def test_await_emit_keeps_within_the_bound(cluster: LocalCluster) -> None:
    data = list(range(60))

    async def main() -> list[Any]:
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as client:
            source: Stream[Any] = Stream(asynchronous=True)
            scatter = source.scatter(client=client, batch_size=3, max_in_flight=2)
            out = scatter.map(inc).scan(add).gather().sink_to_list()
            for x in data:
                await source.emit(x)
                runner = scatter._runner
                assert runner is not None
                assert runner.count() <= 2
                assert len(runner.pending) <= 3
            await source.aclose()
            return out

    assert asyncio.run(main()) == expected(data)


@pytest.mark.dask
def test_synchronous_client_on_an_asynchronous_stream(client: Client) -> None:
    data = list(range(25))

    async def main() -> list[Any]:
        source: Stream[Any] = Stream(asynchronous=True)
        out = source.to_dask(client).scatter().map(inc).scan(add).gather().sink_to_list()
        for x in data:
            await source.emit(x)
        await source.aclose()
        return out

    assert asyncio.run(main()) == expected(data)


@pytest.mark.dask
def test_async_worker_error_reaches_the_producer(client: Client) -> None:
    async def main() -> list[Any]:
        source: Stream[Any] = Stream(asynchronous=True)
        out = source.scatter(client=client).map(lambda x: 1 // x).gather().sink_to_list()
        errors = []
        for x in [1, 0, 1]:
            try:
                await source.emit(x)
            except NodeError as e:
                errors.append(e)
        try:
            await source.aclose()
        except NodeError as e:
            errors.append(e)
        (error,) = errors
        assert "failed on element 0" in str(error)
        return out

    # The element after the failing one is not lost, whenever the error shows.
    assert asyncio.run(main()) == [1, 1]


@pytest.mark.dask
def test_emits_keep_their_order_whenever_they_are_awaited(client: Client) -> None:
    async def main() -> list[Any]:
        source: Stream[Any] = Stream(asynchronous=True)
        out = source.scatter(client=client, batch_size=2).map(inc).gather().sink_to_list()
        pending = [source.emit(x) for x in range(12)]  # before the client is resolved
        for p in reversed(pending):
            await p
        await source.aclose()
        return out

    assert asyncio.run(main()) == list(range(1, 13))


@pytest.mark.dask
@pytest.mark.parametrize("asynchronous", [False, True])
def test_unordered_results_are_all_there_once(client: Client, asynchronous: bool) -> None:
    data = list(range(80))

    async def main() -> list[Any]:
        source: Stream[Any] = Stream(asynchronous=asynchronous)
        scatter = source.scatter(client=client, batch_size=3, max_in_flight=5, ordered=False)
        out = scatter.map(lambda x: [x, -x]).flatten().map(inc).gather().sink_to_list()
        for x in data:
            pending = source.emit(x)
            if asynchronous:
                await pending
        if asynchronous:
            await source.aclose()
        else:
            source.close()
        return out

    out = asyncio.run(main())
    assert sorted(out) == sorted(v + 1 for x in data for v in (x, -x))
