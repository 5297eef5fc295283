"""The Redis connectors' own clients: one per loop, closed when the stream closes.

A client given of the other kind than where it is used lends its settings
to one of the connector's own; a client the source made is closed when
``start()`` fails too.
"""

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


def clients_named(r: Any, name: str) -> int:
    return sum(c["name"] == name for c in r.client_list())


@pytest.fixture
def writer(r: Any, redis_url: str) -> Any:
    """A user with a password, and the connection settings that reach database 3 as them."""
    r.acl_setuser("writer", enabled=True, passwords=["+secret"], keys=["*"], commands=["+@all"])
    url = redis.connection.parse_url(redis_url)
    yield {"host": url["host"], "port": url["port"], "db": 3, "username": "writer",
           "password": "secret"}
    r.acl_deluser("writer")


@pytest.mark.parametrize("method", ["script", "pipeline"])
def test_a_sync_client_given_to_a_sink_on_a_loop_reaches_its_server(r: Any, writer: Any,
                                                                     method: str) -> None:
    # The sink used to write with a client of its own to the default url
    # (localhost:6379, database 0): another server's, or a connection error.
    name = "sink-given-sync"
    client = redis.Redis(**writer, client_name=name)
    source = Stream(asynchronous=True)
    sink = source.sink_to_redis("out", client=client, batch=2, method=method)
    errors = sink.on_error("route").errors.sink_to_list()

    async def run() -> None:
        for x in range(3):
            await source.emit(x)
        await source.aclose()

    asyncio.run(run())
    assert errors == []
    db3 = redis.Redis(**writer, decode_responses=True)
    assert [f["data"] for _, f in db3.xrange("out")] == ["0", "1", "2"]
    # The asyncio client made from it is closed; the one given is the caller's.
    wait_until(lambda: clients_named(r, name) == 0)
    assert client.xlen("out") == 3
    client.close()
    db3.close()


@pytest.mark.parametrize("method", ["script", "pipeline"])
def test_an_asyncio_client_given_to_a_sink_without_a_loop_reaches_its_server(
        r: Any, writer: Any, method: str) -> None:
    name = "sink-given-async"
    aclient = redis.asyncio.Redis(**writer, client_name=name)
    source = Stream()
    sink = source.sink_to_redis("out", client=aclient, batch=2, method=method)
    errors = sink.on_error("route").errors.sink_to_list()
    for x in range(3):
        source.emit(x)
    assert clients_named(r, name) == 1  # a synchronous client of the sink's own
    source.close()
    assert errors == []
    db3 = redis.Redis(**writer, decode_responses=True)
    assert [f["data"] for _, f in db3.xrange("out")] == ["0", "1", "2"]
    wait_until(lambda: clients_named(r, name) == 0)

    async def still_open() -> int:
        try:
            return int(await aclient.xlen("out"))
        finally:
            await aclient.aclose()

    assert asyncio.run(still_open()) == 3
    db3.close()


def test_a_source_closes_its_client_when_start_fails(r: Any, redis_url: str) -> None:
    from redis.exceptions import ResponseError

    name = "source-failing-start"
    r.set("events", "not a stream")
    source = Stream.from_redis("events", group="g", consumer="c",
                               url=f"{redis_url}?client_name={name}")
    with pytest.raises(ResponseError, match="WRONGTYPE") as info:
        source.start()
    # The traceback held here keeps the failed call's frames, its client
    # among them: the connection is closed only if start() closed it.
    assert info.traceback
    wait_until(lambda: clients_named(r, name) == 0)
