"""``from_tcp`` and ``from_http_server``: a connection's end, and ``stop()`` on the caller's loop.

Real loopback sockets; what a test waits for is an event, never a delay.
GUARD only bounds a hang of a broken implementation.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import Stream, VirtualClock

GUARD = 30.0  # seconds: only ever reached when the behaviour under test is broken


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def until(condition: Any) -> None:
    """Wait for ``condition()``: turns of the loop, not time (at most GUARD seconds)."""

    async def turns() -> None:
        while not condition():
            await asyncio.sleep(0)

    await asyncio.wait_for(turns(), GUARD)


@pytest.fixture
def no_loop_thread(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records any start (or lookup) of the shared loop thread instead of making it."""
    from streams import loop_thread

    asked: list[str] = []

    def refuse() -> Any:
        asked.append("loop_thread()")
        raise AssertionError("the shared loop thread was asked for")

    monkeypatch.setattr(loop_thread, "loop_thread", refuse)
    return asked


@pytest.mark.parametrize("slow", [False, True], ids=["at once", "behind a slow pipeline"])
def test_tcp_emits_the_last_message_of_a_connection_without_its_delimiter(slow: bool) -> None:
    async def main() -> list[bytes]:
        three = asyncio.Event()
        source = Stream.from_tcp(0)
        L = source.sink_to_list()

        async def take(x: bytes) -> None:
            # slow: the first message is held until the server has seen the
            # client's end of file, the rest of the data buffered behind it.
            while slow and not all(s.closed() for s in source._connections):
                await asyncio.sleep(0)  # waiting for the server's read, not for time
            if len(L) == 3:
                three.set()

        source.sink(take)
        source.start()
        _, w = await asyncio.open_connection("127.0.0.1", source.port)
        w.write(b"first\n")
        await w.drain()
        await until(lambda: L)
        w.write(b"second\nlast")
        await w.drain()
        w.close()
        await w.wait_closed()
        await asyncio.wait_for(three.wait(), GUARD)
        await source.stop()
        return L

    assert asyncio.run(main()) == [b"first\n", b"second\n", b"last"]


def test_tcp_a_connection_the_server_times_out_emits_nothing_more(clock: VirtualClock) -> None:
    async def main() -> list[bytes]:
        source = Stream.from_tcp(0, idle_timeout=5.0)
        L = source.sink_to_list()
        source.start()
        reader, w = await asyncio.open_connection("127.0.0.1", source.port)
        w.write(b"whole\nhalf a mess")
        await w.drain()
        await until(lambda: L)  # the server's read
        await clock.advance_async(6.0)
        assert await asyncio.wait_for(reader.read(), GUARD) == b""  # closed by the server
        w.close()
        await source.stop()
        return L

    assert asyncio.run(main()) == [b"whole\n"]


def test_tcp_stop_on_the_callers_loop_waits_for_the_message_in_flight(
        no_loop_thread: list[str]) -> None:
    async def main() -> list[bytes]:
        gate, entered = asyncio.Event(), asyncio.Event()
        done: list[bytes] = []

        async def slow(x: bytes) -> None:
            entered.set()
            await gate.wait()
            done.append(x)

        source = Stream.from_tcp(0)
        source.sink(slow)
        source.start()
        _, w = await asyncio.open_connection("127.0.0.1", source.port)
        w.write(b"a\n")
        await w.drain()
        await asyncio.wait_for(entered.wait(), GUARD)
        end = source.stop()
        assert end is not None  # on a loop: an awaitable, as Source.stop() promises
        stopped = asyncio.ensure_future(_wait(end))
        await settle()
        assert not stopped.done()  # the message is still in the pipeline
        gate.set()
        await asyncio.wait_for(stopped, GUARD)
        assert done == [b"a\n"]
        w.close()
        return done

    asyncio.run(main())
    assert no_loop_thread == []


def test_tcp_a_sink_may_await_the_stop_of_its_own_source() -> None:
    async def main() -> list[bytes]:
        source = Stream.from_tcp(0)
        L = source.sink_to_list()

        async def stop_here(x: bytes) -> None:
            await source.stop()  # done at once: its own message ends after this

        source.sink(stop_here)
        source.start()
        _, w = await asyncio.open_connection("127.0.0.1", source.port)
        w.write(b"a\nb\n")
        await w.drain()
        await until(lambda: L)
        await asyncio.wait_for(_wait(source.stop()), GUARD)
        w.close()
        return L

    assert asyncio.run(main()) == [b"a\n"]


def test_http_stop_on_the_callers_loop_waits_for_the_body_in_flight(
        no_loop_thread: list[str]) -> None:
    from tornado.httpclient import AsyncHTTPClient

    async def main() -> None:
        gate, entered = asyncio.Event(), asyncio.Event()
        done: list[bytes] = []

        async def slow(x: bytes) -> None:
            entered.set()
            await gate.wait()
            done.append(x)

        source = Stream.from_http_server(0)
        source.sink(slow)
        source.start()
        client = AsyncHTTPClient(force_instance=True)
        response = asyncio.ensure_future(client.fetch(
            f"http://127.0.0.1:{source.port}/", method="POST", body=b"one"))
        await asyncio.wait_for(entered.wait(), GUARD)
        end = source.stop()
        assert end is not None
        stopped = asyncio.ensure_future(_wait(end))
        await settle()
        assert not stopped.done()
        gate.set()
        await asyncio.wait_for(stopped, GUARD)
        assert done == [b"one"]
        assert (await asyncio.wait_for(response, GUARD)).code == 200
        client.close()

    asyncio.run(main())
    assert no_loop_thread == []


async def _wait(awaitable: Any) -> None:
    await awaitable


@pytest.mark.parametrize("max_message, size", [(100, 90), (2**20, 900_000)])
def test_tcp_takes_messages_under_max_message_that_come_together(
        max_message: int, size: int) -> None:
    # What the stream reads ahead of a message (the next ones) counted
    # against max_message: two messages under it, sent together, closed the
    # connection after the first.
    async def main() -> list[int]:
        source = Stream.from_tcp(0, max_message=max_message)
        L = source.map(len).sink_to_list()
        source.start()
        _, writer = await asyncio.open_connection("127.0.0.1", source.port)
        writer.write((b"x" * (size - 1) + b"\n") * 5)
        await writer.drain()
        writer.close()
        await until(lambda: len(L) >= 5)  # before: one, then the connection closed
        await source.stop()
        return L

    assert asyncio.run(main()) == [size] * 5


def test_tcp_closes_the_connection_of_a_message_over_max_message_saying_so(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> list[bytes]:
        source = Stream.from_tcp(0, max_message=10)
        L = source.sink_to_list()
        source.start()
        _, writer = await asyncio.open_connection("127.0.0.1", source.port)
        writer.write(b"ok\n" + b"x" * 50 + b"\n")
        await writer.drain()
        await until(lambda: len(L) == 1 and not source._connections)
        writer.close()
        await source.stop()
        return L

    assert asyncio.run(main()) == [b"ok\n"]
    assert "longer than max_message=10 bytes" in caplog.text


def test_tcp_and_http_take_server_kwargs_third_as_streamz_does() -> None:
    tcp = Stream.from_tcp(0, b"\n", {"max_buffer_size": 2**16})
    http = Stream.from_http_server(0, "/x", {"max_body_size": 2**16})
    assert (tcp.server_kwargs, tcp.address) == ({"max_buffer_size": 2**16}, "127.0.0.1")
    assert (http.server_kwargs, http.address) == ({"max_body_size": 2**16}, "127.0.0.1")
    with pytest.raises(TypeError, match="address must be a str"):
        Stream.from_tcp(0, address=("127.0.0.1", 0))
