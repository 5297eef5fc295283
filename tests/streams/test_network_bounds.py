"""Network sources under hostile clients, on loopback: every resource is bounded.

Silent and half-open clients are closed after an idle timeout (``from_tcp``
on the library's clock, so a virtual clock drives it here), connections and
requests in flight are capped, and a body larger than ``max_body`` (chunked
or not) is refused without being read. A read that should end because the
server closed the connection is guarded by a generous timeout so that a
failure fails instead of hanging; nothing is asserted about elapsed time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import Stream, VirtualClock, use_clock

GUARD = 30.0  # seconds: only ever reached when the behaviour under test is broken


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Read until EOF: True once the server has closed the connection."""
    data = await asyncio.wait_for(reader.read(), GUARD)
    return isinstance(data, bytes)


async def turns(n: int = 50) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_tcp_closes_a_connection_idle_longer_than_idle_timeout() -> None:
    with use_clock(VirtualClock()) as clock:
        source = Stream.from_tcp(0, idle_timeout=5.0)
    got = source.sink_to_list()

    async def main() -> None:
        source.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", source.port)
        writer.write(b"half a mess")  # no delimiter: the message never completes
        await writer.drain()
        await clock.advance_async(4.0)
        writer.write(b"age\n")  # a complete message re-arms the timeout
        await writer.drain()
        while not got:
            await asyncio.sleep(0)
        await clock.advance_async(4.0)  # 8 s since connecting, 4 since the message
        await turns()
        assert len(source._connections) == 1
        await clock.advance_async(1.0)
        assert await closed_by_server(reader)
        assert not source._connections
        writer.close()
        source.stop()

    asyncio.run(main())
    assert got == [b"half a message\n"]


def test_tcp_closes_connections_over_max_connections() -> None:
    source = Stream.from_tcp(0, max_connections=2)

    async def main() -> None:
        source.start()
        conns = [await asyncio.open_connection("127.0.0.1", source.port) for _ in range(2)]
        while len(source._connections) < 2:
            await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("127.0.0.1", source.port)
        assert await closed_by_server(reader)
        assert source.refused == 1 and len(source._connections) == 2
        for _, w in [*conns, (reader, writer)]:
            w.close()
        source.stop()

    asyncio.run(main())


def test_tcp_bounds_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match=r"from_tcp\(\): idle_timeout must be > 0"):
        Stream.from_tcp(0, idle_timeout=0)
    with pytest.raises(ValueError, match=r"from_tcp\(\): max_connections must be"):
        Stream.from_tcp(0, max_connections=0)


async def post(port: int, body: bytes, chunked: bool = False,
               announce_only: bool = False) -> tuple[int, dict[str, str]]:
    """POST ``body`` over a raw connection; return the status (0: reset) and headers.

    ``announce_only`` sends the headers and waits for the answer before the
    body; a chunked body is sent while the answer is read.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = "POST /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"

    async def send() -> None:
        try:
            if chunked:
                writer.write((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
                step = 64 * 1024
                for i in range(0, len(body), step):
                    part = body[i:i + step]
                    writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            else:
                writer.write((head + f"Content-Length: {len(body)}\r\n\r\n").encode())
                if not announce_only:
                    writer.write(body)
            await writer.drain()
        except ConnectionError:
            pass  # the server answered and closed before the end

    sending = asyncio.ensure_future(send())
    try:
        response = await asyncio.wait_for(reader.read(), GUARD)
    except ConnectionResetError:
        response = b"HTTP/1.1 0 reset\r\n\r\n"
    await sending
    writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    headers = dict(line.split(": ", 1) for line in
                   rest.split(b"\r\n\r\n")[0].decode().split("\r\n") if ": " in line)
    return int(status_line.split()[1]), headers


def test_http_refuses_a_body_over_max_body_before_reading_it() -> None:
    source = Stream.from_http_server(0, max_body=2**20)
    got = source.map(len).sink_to_list()

    async def main() -> tuple[int, int]:
        source.start()
        small, _ = await post(source.port, b"x" * 1000)
        big, _ = await post(source.port, b"y" * (3 * 2**20), announce_only=True)
        source.stop()
        return small, big

    assert asyncio.run(main()) == (200, 400)
    assert got == [1000]


def test_http_cuts_off_a_chunked_body_at_max_body() -> None:
    source = Stream.from_http_server(0, max_body=2**20)
    got = source.map(len).sink_to_list()

    async def main() -> tuple[int, int]:
        source.start()
        small, _ = await post(source.port, b"x" * 1000, chunked=True)
        # 64 MiB offered: refused (400, or the connection reset under the
        # client's feet) once 1 MiB has arrived.
        big, _ = await post(source.port, b"y" * (64 * 2**20), chunked=True)
        source.stop()
        return small, big

    small, big = asyncio.run(main())
    assert small == 200 and big in (400, 0)
    assert got == [1000]


def test_http_answers_503_over_max_in_flight_and_serves_the_rest() -> None:
    source = Stream.from_http_server(0, max_in_flight=1)
    gate: asyncio.Event
    got: list[bytes] = []

    async def slow(x: bytes) -> None:
        await gate.wait()
        got.append(x)

    source.sink(slow)

    async def main() -> tuple[int, int, dict[str, str]]:
        nonlocal gate
        gate = asyncio.Event()
        source.start()
        first = asyncio.ensure_future(post(source.port, b"first"))
        while source._in_flight < 1:
            await asyncio.sleep(0)
        second, headers = await post(source.port, b"second")
        gate.set()
        status, _ = await first
        source.stop()
        return status, second, headers

    status, second, headers = asyncio.run(main())
    assert (status, second) == (200, 503)
    assert headers.get("Retry-After") == "1"
    assert got == [b"first"] and source.refused == 1


def test_http_closes_connections_over_max_connections() -> None:
    source = Stream.from_http_server(0, max_connections=2)

    async def main() -> None:
        source.start()
        idle = [await asyncio.open_connection("127.0.0.1", source.port) for _ in range(2)]
        while len(source._server._connections) < 2:
            await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("127.0.0.1", source.port)
        assert await closed_by_server(reader)
        assert source.refused == 1
        for _, w in [*idle, (reader, writer)]:
            w.close()
        source.stop()

    asyncio.run(main())


def test_http_closes_a_silent_connection_after_idle_timeout() -> None:
    # Tornado times this on the loop's own clock: a short real timeout.
    source = Stream.from_http_server(0, idle_timeout=0.05)

    async def main() -> None:
        source.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", source.port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: a\r\n")  # headers never finish
        await writer.drain()
        assert await closed_by_server(reader)
        writer.close()
        source.stop()

    asyncio.run(main())


def test_http_bounds_are_checked_when_built() -> None:
    for name in ("max_body", "max_connections", "max_in_flight"):
        kwargs: dict[str, Any] = {name: 0}
        with pytest.raises(ValueError, match=rf"from_http_server\(\): {name} must be"):
            Stream.from_http_server(0, **kwargs)
