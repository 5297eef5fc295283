"""``sink_to_redis``'s own clients: one per loop, closed when the stream closes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from streams import Stream
from tests.polling import wait_until

pytestmark = pytest.mark.redis


@pytest.mark.parametrize("method", ["script", "pipeline"])
def test_one_graph_writes_under_one_asyncio_run_then_another(r: Any, redis_url: str,
                                                              method: str) -> None:
    # The client made on the first loop is not the second loop's: a new one
    # is made (the old one failed with "Event loop is closed", after writing).
    source = Stream(asynchronous=True)
    sink = source.sink_to_redis("out", url=redis_url, batch=2, method=method)
    errors = sink.on_error("route").errors.sink_to_list()

    async def run(items: list[int]) -> None:
        for x in items:
            await source.emit(x)

    asyncio.run(run([1, 2]))
    asyncio.run(run([3, 4]))
    assert errors == []
    assert [f["data"] for _, f in r.xrange("out")] == ["1", "2", "3", "4"]


@pytest.mark.parametrize("n", [5, 4], ids=["one-left", "none-left"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_sink_closes_the_client_it_made_when_the_stream_closes(
        r: Any, redis_url: str, asynchronous: bool, n: int) -> None:
    # Counted by name: clients of other tests on the server may come and go.
    name = f"sink-closing-{asynchronous}-{n}"

    def connected() -> int:
        return sum(c["name"] == name for c in r.client_list())

    before = connected()
    source = Stream(asynchronous=asynchronous)
    source.sink_to_redis("out", url=f"{redis_url}?client_name={name}", batch=2)

    async def run() -> None:
        for x in range(n):
            await source.emit(x)
        assert connected() == before + 1
        await source.aclose()

    if asynchronous:
        asyncio.run(run())
    else:
        for x in range(n):
            source.emit(x)
        assert connected() == before + 1
        source.close()
    # The server notices a closed socket on its next turn, after the client
    # has returned: wait for it to see the close.
    wait_until(lambda: connected() == before)  # none left buffered at close: closed too
    assert r.xlen("out") == n


def test_a_client_given_stays_open_when_the_stream_closes(r: Any, redis_url: str) -> None:

    client = redis.Redis.from_url(redis_url)
    source = Stream()
    source.sink_to_redis("out", client=client, batch=2)
    for x in range(3):
        source.emit(x)
    source.close()
    assert client.xlen("out") == 3  # still usable: the caller closes it
    client.close()
