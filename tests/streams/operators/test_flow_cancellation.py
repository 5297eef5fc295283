"""buffer, latest, map_async when a coroutine ends in CancelledError, or their worker is cancelled.

A call or a sink whose coroutine raises ``CancelledError`` (a request
cancelled under it) fails that element only: the worker goes on, and the
failure is reported as any other. A worker that is itself cancelled leaves
elements behind: close says so.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import Stream
from streams.errors import NodeError


async def cancelled_on_1(x: int) -> int:
    await asyncio.sleep(0)
    if x == 1:
        raise asyncio.CancelledError("request cancelled by the server library")
    return x * 10


def test_map_async_call_ending_cancelled_is_routed_and_the_rest_goes_on() -> None:
    async def main() -> tuple[list[Any], list[Any]]:
        source = Stream(asynchronous=True)
        node = source.map_async(cancelled_on_1, parallelism=2).on_error("route")
        out = node.sink_to_list()
        errors = node.errors.sink_to_list()
        for i in range(5):
            await asyncio.wait_for(source.emit(i), 10)
        await asyncio.wait_for(source.aclose(), 10)
        return out, [(r.element, type(r.exception)) for r in errors]

    out, errors = asyncio.run(main())
    assert out == [0, 20, 30, 40]
    assert errors == [(1, asyncio.CancelledError)]


def test_map_async_call_ending_cancelled_is_raised_at_close() -> None:
    async def main() -> list[int]:
        source = Stream(asynchronous=True)
        out = source.map_async(cancelled_on_1, stream_name="fetch").sink_to_list()
        for i in range(3):
            await asyncio.wait_for(source.emit(i), 10)
        with pytest.raises(NodeError, match="'fetch' failed on element 1: CancelledError"):
            await asyncio.wait_for(source.aclose(), 10)
        return out

    assert asyncio.run(main()) == [0, 20]


@pytest.mark.parametrize("operator", ["map_async", "map"])
def test_a_call_ending_cancelled_with_no_loop_raises_a_node_error(operator: str) -> None:
    # map: a coroutine map skipped the error policy (a bare CancelledError).
    source = Stream()
    out = getattr(source, operator)(cancelled_on_1).sink_to_list()
    source.emit(0)
    with pytest.raises(NodeError, match="failed on element 1: CancelledError"):
        source.emit(1)
    source.emit(2)
    assert out == [0, 20]


@pytest.mark.parametrize("operator", ["buffer", "latest"])
def test_a_sink_ending_cancelled_fails_its_element_and_the_worker_goes_on(operator: str) -> None:
    out: list[int] = []

    async def write(x: int) -> None:
        await asyncio.sleep(0)
        if x == 1:
            raise asyncio.CancelledError("connection pool closed the request")
        out.append(x)

    async def main() -> None:
        source = Stream(asynchronous=True)
        node = source.buffer(10) if operator == "buffer" else source.latest()
        node.sink(write)
        for i in range(5):
            await source.emit(i)
            if operator == "latest":
                for _ in range(5):  # latest skips what arrives while it is busy
                    await asyncio.sleep(0)
        # The sink names itself: its coroutine failed, not the worker.
        with pytest.raises(NodeError, match=r"sink\(write\) failed on element 1: CancelledError"):
            await asyncio.wait_for(source.aclose(), 10)

    asyncio.run(main())
    assert out == [0, 2, 3, 4]


@pytest.mark.parametrize("operator", ["buffer", "map_async"])
def test_a_cancelled_worker_leaving_elements_is_reported_at_close(operator: str) -> None:
    async def main() -> None:
        gate = asyncio.Event()

        async def slow(x: int) -> None:
            await gate.wait()

        source = Stream(asynchronous=True)
        if operator == "buffer":
            node = source.buffer(10)
            node.sink(slow)
        else:
            node = source.map_async(lambda x: gate.wait(), parallelism=3)
        for i in range(3):
            await source.emit(i)
        await asyncio.sleep(0)
        worker = node._worker  # type: ignore[attr-defined]
        worker.cancel()  # e.g. a shutdown cancelling every task
        await asyncio.wait((worker,))
        gate.set()
        with pytest.raises(RuntimeError, match=f"{operator}.*element\\(s\\) were never emitted"):
            await asyncio.wait_for(source.aclose(), 10)

    asyncio.run(main())


async def write_cancelled_on_1(x: int) -> None:
    await asyncio.sleep(0)
    if x == 1:
        raise asyncio.CancelledError("connection pool closed the request")


def test_an_async_sink_ending_cancelled_fails_its_element_not_the_producer() -> None:
    async def main() -> list[Any]:
        source = Stream(asynchronous=True)
        node = source.sink(write_cancelled_on_1, stream_name="write").on_error("route")
        errors = node.errors.sink_to_list()
        for i in range(3):
            await asyncio.wait_for(source.emit(i), 10)  # the producer is not cancelled
        return [(r.element, type(r.exception)) for r in errors]

    assert asyncio.run(main()) == [(1, asyncio.CancelledError)]


def test_an_async_sink_ending_cancelled_raises_a_node_error_to_the_producer() -> None:
    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(write_cancelled_on_1, stream_name="write")
        await source.emit(0)
        with pytest.raises(NodeError, match="'write' failed on element 1: CancelledError"):
            await source.emit(1)
        await source.emit(2)

    asyncio.run(main())


def test_a_producer_cancelled_while_an_async_sink_runs_is_cancelled() -> None:
    async def main() -> None:
        started, gate = asyncio.Event(), asyncio.Event()

        async def write(x: int) -> None:
            started.set()
            await gate.wait()

        source = Stream(asynchronous=True)
        source.sink(write)
        producer = asyncio.ensure_future(source.emit(1))
        await started.wait()
        producer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await producer

    asyncio.run(main())


@pytest.mark.parametrize("awaited", [True, False], ids=["awaited", "not-awaited"])
@pytest.mark.parametrize("operator", ["map", "filter"])
def test_a_coroutine_map_or_filter_ending_cancelled_fails_its_element(
        operator: str, awaited: bool) -> None:
    # It went past the error policy: an awaited emit raised a bare
    # CancelledError (the producer looked cancelled), an unawaited one lost
    # the element without a word, and nothing was routed.
    async def keep(x: int) -> bool:
        return bool(await cancelled_on_1(x) or True)

    async def main() -> tuple[list[Any], list[Any]]:
        source = Stream(asynchronous=True)
        node = (source.map(cancelled_on_1) if operator == "map" else source.filter(keep))
        node.on_error("route")
        out = node.sink_to_list()
        errors = node.errors.sink_to_list()
        for i in range(3):
            future = source.emit(i)
            if awaited:
                await asyncio.wait_for(future, 10)
        await asyncio.wait_for(source.aclose(), 10)
        return out, [(r.element, type(r.exception)) for r in errors]

    out, errors = asyncio.run(main())
    assert out == ([0, 20] if operator == "map" else [0, 2])
    assert errors == [(1, asyncio.CancelledError)]
