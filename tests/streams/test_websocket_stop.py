"""``from_websocket``: a coroutine sink that awaits its own source's ``stop()``.

The server's closing waits for every connection's handler, the one running
that sink included: awaited there, ``stop()`` is done at once (as
``from_tcp``'s), and the closing completes once the handler has returned.
Real ``websockets`` client on loopback; waits guarded by a generous timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import Stream

pytest.importorskip("websockets")

from websockets.asyncio.client import connect

GUARD = 30.0  # seconds: only ever reached when the behaviour under test is broken


def test_a_coroutine_sink_may_await_the_stop_of_its_source() -> None:
    source = Stream.from_websocket("127.0.0.1", 0)
    got: list[Any] = []

    async def main() -> None:
        stopped = asyncio.Event()
        closings: list[Any] = []

        async def sink(x: Any) -> None:
            got.append(x)
            if x == "stop":
                closing = source.stop()
                closings.append(closing)
                await closing  # inside the connection's handler: must not wait for itself
                stopped.set()

        source.sink(sink)
        source.start()
        async with connect(f"ws://127.0.0.1:{source.port}") as ws:
            await ws.send("one")
            await ws.send("stop")
            await asyncio.wait_for(stopped.wait(), GUARD)
            await asyncio.wait_for(ws.wait_closed(), GUARD)  # the server closed it
        # From outside the handlers, the same closing is awaited to its end.
        await asyncio.wait_for(_wait(closings[0]), GUARD)
        assert source.server is None
        with pytest.raises(OSError):  # nothing listens any more
            await connect(f"ws://127.0.0.1:{source.port}", open_timeout=GUARD)

    asyncio.run(main())
    assert got == ["one", "stop"]


async def _wait(awaitable: Any) -> None:
    await awaitable
