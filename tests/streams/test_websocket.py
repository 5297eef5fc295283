"""``from_websocket`` / ``to_websocket`` on loopback: with each other and with ``websockets``.

Waits are events set by the pipeline or the peer, each guarded by a
generous timeout so that a failure fails instead of hanging; nothing is
asserted about elapsed time.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from streams import NodeError, Stream

pytest.importorskip("websockets")

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

GUARD = 30.0  # seconds: only ever reached when the behaviour under test is broken


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_roundtrip_without_a_loop() -> None:
    # streamz's test_ws_roundtrip, on a free port: the server runs on the loop
    # thread, the sink on the private loop of synchronous emits.
    server = Stream.from_websocket("localhost", 0, start=True)
    got: list[Any] = []
    done = threading.Event()
    server.sink(lambda x: (got.append(x), len(got) == 4 and done.set()))
    data = [b"0123", "text", bytearray(b"ba"), b""]
    out = Stream.from_iterable(data)
    sink = out.to_websocket(f"ws://localhost:{server.port}")
    out.start()
    assert sink.ws is None  # the end of the stream closed the connection
    assert done.wait(GUARD)
    server.stop()
    assert server.server is None
    assert got == [b"0123", "text", b"ba", b""]


def test_to_websocket_sends_to_a_websockets_server() -> None:
    received: list[Any] = []

    async def main() -> None:
        closed = asyncio.Event()

        async def handler(ws: Any) -> None:
            async for message in ws:
                received.append(message)
            closed.set()

        async with serve(handler, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            source = Stream(asynchronous=True)
            sink = source.to_websocket(f"ws://127.0.0.1:{port}")
            for x in ["a", b"b", "c"]:
                await source.emit(x)
            await source.aclose()
            assert sink.ws is None
            await asyncio.wait_for(closed.wait(), GUARD)  # the server saw the close

    asyncio.run(main())
    assert received == ["a", b"b", "c"]


def test_from_websocket_serves_a_websockets_client_with_backpressure() -> None:
    source = Stream.from_websocket("127.0.0.1", 0)
    got: list[Any] = []

    async def main() -> None:
        release = asyncio.Event()
        all_in = asyncio.Event()

        async def slow(x: Any) -> None:
            await release.wait()
            got.append(x)
            if len(got) == 50:
                all_in.set()

        source.sink(slow)
        source.start()
        async with connect(f"ws://127.0.0.1:{source.port}") as ws:
            for i in range(50):
                await ws.send(str(i))
            await asyncio.sleep(0)
            assert got == []  # the first message is held by the pipeline
            release.set()
            await asyncio.wait_for(all_in.wait(), GUARD)
        await source.stop()

    asyncio.run(main())
    assert got == [str(i) for i in range(50)]


def test_stop_closes_open_connections() -> None:
    source = Stream.from_websocket("127.0.0.1", 0)
    got = source.sink_to_list()

    async def main() -> int | None:
        source.start()
        async with connect(f"ws://127.0.0.1:{source.port}") as ws:
            await ws.send("one")
            while not got:
                await asyncio.sleep(0)
            await source.stop()
            await asyncio.wait_for(ws.wait_closed(), GUARD)
            code: int | None = ws.close_code
        with pytest.raises(OSError):
            await connect(f"ws://127.0.0.1:{source.port}", open_timeout=GUARD)
        return code

    assert asyncio.run(main()) == 1001  # going away
    assert got == ["one"]


def test_a_pipeline_failure_closes_the_connection_with_the_error() -> None:
    source = Stream.from_websocket("127.0.0.1", 0)
    got = source.map(int).sink_to_list()

    async def main() -> Any:
        source.start()
        async with connect(f"ws://127.0.0.1:{source.port}") as ws:
            await ws.send("1")
            await ws.send("one")
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), GUARD)
            reason = ws.close_code, ws.close_reason
        await source.stop()
        return reason

    code, reason = asyncio.run(main())
    assert code == 1011
    assert reason.startswith("map(int) failed on element 'one'")
    assert got == [1]


def test_max_connections_refuses_one_more() -> None:
    source = Stream.from_websocket("127.0.0.1", 0, max_connections=1)
    got = source.sink_to_list()

    async def main() -> int | None:
        source.start()
        url = f"ws://127.0.0.1:{source.port}"
        async with connect(url) as first:
            await first.send("a")
            while not got:
                await asyncio.sleep(0)
            async with connect(url) as second:
                await asyncio.wait_for(second.wait_closed(), GUARD)
                code: int | None = second.close_code
            await first.send("b")
            while len(got) < 2:
                await asyncio.sleep(0)
        await source.stop()
        return code

    assert asyncio.run(main()) == 1013
    assert source.refused == 1
    assert got == ["a", "b"]


def test_to_websocket_refuses_what_is_not_str_or_bytes() -> None:
    source = Stream()
    source.to_websocket(f"ws://127.0.0.1:{closed_port()}")
    with pytest.raises(TypeError, match=r"to_websocket\(\) sends str or bytes, got list") as e:
        source.emit([b"a", b"b"])  # websockets would send fragments of one message
    assert isinstance(e.value, NodeError)


def test_to_websocket_raises_naming_the_node_without_a_server() -> None:
    source = Stream()
    source.to_websocket(f"ws://127.0.0.1:{closed_port()}")
    with pytest.raises(ConnectionError, match=r"to_websocket.*cannot connect to ws://"):
        source.emit(b"x")


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: Stream.from_websocket("", 8989), ValueError, "host must be a non-empty str"),
    (lambda: Stream.from_websocket("localhost", 70000), ValueError, "port must be an int"),
    (lambda: Stream.from_websocket("localhost", 0, max_connections=0), ValueError,
     "max_connections must be an int >= 1"),
    (lambda: Stream.from_websocket("localhost", 0, serve_kwargs=[1]), TypeError,
     "serve_kwargs must be a dict"),
    (lambda: Stream.from_websocket("localhost", 0, path="in"), ValueError,
     "path must be a str starting with '/'"),
    (lambda: Stream().to_websocket("http://localhost:1"), ValueError,
     "uri must be a str starting with ws:// or wss://"),
    (lambda: Stream().to_websocket("ws://localhost:1", ws_kwargs=1), TypeError,
     "ws_kwargs must be a dict"),
])
def test_bad_arguments_fail_when_the_graph_is_built(make: Any, error: type[Exception],
                                                     message: str) -> None:
    with pytest.raises(error, match=message):
        make()


def test_ws_uri_names_the_server_and_the_client() -> None:
    server = Stream.from_uri("ws://127.0.0.1:0")
    got = server.sink_to_list()

    async def main() -> None:
        server.start()
        source = Stream(asynchronous=True)
        sink = source.to_uri(f"ws://127.0.0.1:{server.port}/in")
        await source.emit("x")
        await source.aclose()
        while not got:  # the server's pipeline takes it on its own turn
            await asyncio.sleep(0)
        assert sink.uri == f"ws://127.0.0.1:{server.port}/in"
        await server.stop()

    asyncio.run(main())
    assert got == ["x"]


def test_a_ws_uri_path_is_the_only_one_served() -> None:
    # The URI's path used to be dropped: every path was served.
    from http import HTTPStatus

    from websockets.exceptions import InvalidStatus

    asked: list[str] = []

    def process_request(connection: Any, request: Any) -> Any:  # the user's own, kept
        asked.append(request.path)
        if request.path == "/in?deny":
            return connection.respond(HTTPStatus.FORBIDDEN, "no\n")
        return None

    server = Stream.from_uri("ws://127.0.0.1:0/in")
    server.serve_kwargs["process_request"] = process_request
    got = server.sink_to_list()
    statuses: list[int] = []

    async def main() -> None:
        server.start()
        for path in ("/other", "/in/more", "/in?deny"):
            with pytest.raises(InvalidStatus) as refused:
                await connect(f"ws://127.0.0.1:{server.port}{path}", open_timeout=GUARD)
            statuses.append(refused.value.response.status_code)
        async with connect(f"ws://127.0.0.1:{server.port}/in?v=1", open_timeout=GUARD) as ws:
            await ws.send("x")
        while not got:
            await asyncio.sleep(0)
        await server.stop()

    asyncio.run(main())
    assert server.path == "/in"
    assert statuses == [404, 404, 403]
    assert asked == ["/other", "/in/more", "/in?deny", "/in?v=1"]
    assert got == ["x"]


@pytest.mark.parametrize(("uri", "served", "refused"), [
    ("ws://127.0.0.1:0/", ["/", "/x"], []),  # as ws://127.0.0.1:0: every path
    ("ws://127.0.0.1:0/a%20b", ["/a%20b", "/a%20b?q=1"], ["/a", "/a%20b/"]),
    ("ws://127.0.0.1:0/pr%C3%AFces", ["/pr%C3%AFces"], ["/prices"]),
])
def test_a_ws_uri_path_is_compared_percent_decoded(uri: str, served: list[str],
                                                   refused: list[str]) -> None:
    from websockets.exceptions import InvalidStatus

    server = Stream.from_uri(uri)
    got = server.sink_to_list()
    statuses: list[int] = []

    async def main() -> None:
        server.start()
        for path in served:
            async with connect(f"ws://127.0.0.1:{server.port}{path}",
                               open_timeout=GUARD) as ws:
                await ws.send(path)
        for path in refused:
            with pytest.raises(InvalidStatus) as answer:
                await connect(f"ws://127.0.0.1:{server.port}{path}", open_timeout=GUARD)
            statuses.append(answer.value.response.status_code)
        while len(got) < len(served):
            await asyncio.sleep(0)
        await server.stop()

    asyncio.run(main())
    assert sorted(got) == sorted(served) and statuses == [404] * len(refused)


def test_to_websocket_reconnects_once_the_server_is_back() -> None:
    first = Stream.from_websocket("127.0.0.1", 0)
    got_first = first.sink_to_list()

    async def main() -> list[Any]:
        first.start()
        port = first.port
        arrived = asyncio.Event()
        first.sink(lambda x: arrived.set())
        source = Stream(asynchronous=True)
        sink = source.to_websocket(f"ws://127.0.0.1:{port}")
        await source.emit("one")
        await asyncio.wait_for(arrived.wait(), GUARD)
        await first.stop()  # closes the sink's connection (1001, going away)
        second = Stream.from_websocket("127.0.0.1", port)
        got: list[Any] = []
        both = asyncio.Event()
        second.sink(lambda x: (got.append(x), len(got) == 2 and both.set()))
        second.start()  # back on the same port
        await source.emit("two")  # streamz and streams before: sent on the closed one
        await source.emit("three")
        await asyncio.wait_for(both.wait(), GUARD)
        await source.aclose()
        assert sink.ws is None
        await second.stop()
        return got

    assert asyncio.run(main()) == ["two", "three"]
    assert got_first == ["one"]


def test_stop_then_start_without_awaiting_serves_again() -> None:
    source = Stream.from_websocket("127.0.0.1", 0)
    got: list[Any] = []

    async def main() -> None:
        arrived = asyncio.Event()
        source.sink(lambda x: (got.append(x), arrived.set()))
        source.start()
        port = source.port
        async with connect(f"ws://127.0.0.1:{port}") as ws:
            await ws.send("before")
            await asyncio.wait_for(arrived.wait(), GUARD)
        arrived.clear()
        source.stop()  # the port is free when it returns: awaiting it is optional
        source.start()
        assert (source.port, source.stopped) == (port, False)
        async with connect(f"ws://127.0.0.1:{port}", open_timeout=GUARD) as ws:
            await ws.send("after")
            await asyncio.wait_for(arrived.wait(), GUARD)
        await source.stop()

    asyncio.run(main())
    assert got == ["before", "after"]


def test_stop_and_start_before_the_server_is_up() -> None:
    source = Stream.from_websocket("127.0.0.1", 0)
    got: list[Any] = []

    async def main() -> None:
        arrived = asyncio.Event()
        source.sink(lambda x: (got.append(x), arrived.set()))
        source.start()
        source.stop()  # before the server's task has run
        source.start()
        async with connect(f"ws://127.0.0.1:{source.port}", open_timeout=GUARD) as ws:
            await ws.send("x")
            await asyncio.wait_for(arrived.wait(), GUARD)
        await source.stop()

    asyncio.run(main())
    assert got == ["x"]


def test_stop_on_the_callers_loop_starts_no_loop_thread() -> None:
    # In a fresh interpreter: an earlier test may have started the thread.
    code = """
        import asyncio, threading
        from streams import Stream
        async def main():
            source = Stream.from_websocket("127.0.0.1", 0)
            source.sink(print)
            source.start()
            for _ in range(10_000):  # turns of the loop until the server is up
                if source.server is not None:
                    break
                await asyncio.sleep(0)
            assert source.server is not None
            await source.stop()
            print(sorted(t.name for t in threading.enumerate()))
        asyncio.run(main())
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "['MainThread']"
