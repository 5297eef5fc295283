"""``to_mqtt`` / ``to_websocket`` when emits overlap: one connection, elements in order.

An asynchronous stream's ``emit()`` need not be awaited (contract 2), so
several elements may be in a sink at once. Against a real mosquitto
(tests/mqtt_broker.py) and a real ``websockets`` server on loopback; waits
are conditions guarded by a generous timeout, nothing is timed.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from streams import Stream

GUARD = 30.0  # seconds: only ever reached when the behaviour under test is broken
N = 20


def test_to_mqtt_overlapping_emits_share_one_client_in_order(
        mqtt_broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    import streams.sinks.mqtt as sink_module

    topic = "streams-test/overlapping-emits"
    made: list[Any] = []
    make_client = sink_module.mqtt_client

    def counting_client(*args: Any) -> Any:
        client = make_client(*args)
        made.append(client)
        return client

    monkeypatch.setattr(sink_module, "mqtt_client", counting_client)

    received: list[int] = []
    changed = threading.Condition()
    subscribed = threading.Event()

    def keep(client: Any, userdata: Any, msg: Any) -> None:
        with changed:
            received.append(int(msg.payload))
            changed.notify_all()

    subscriber = mqtt.Client(CallbackAPIVersion.VERSION2)
    subscriber.on_connect = lambda client, *_: client.subscribe(topic, 1)
    subscriber.on_subscribe = lambda *_: subscribed.set()
    subscriber.on_message = keep
    subscriber.connect(mqtt_broker.host, mqtt_broker.port)
    subscriber.loop_start()
    try:
        assert subscribed.wait(GUARD)

        async def main() -> None:
            source = Stream(asynchronous=True)
            sink = source.to_mqtt(mqtt_broker.host, mqtt_broker.port, topic, qos=1)
            in_flight = [source.emit(i) for i in range(N)]  # none awaited before the next
            await asyncio.wait_for(asyncio.gather(*in_flight), GUARD)
            await asyncio.wait_for(source.aclose(), GUARD)
            assert sink.client is None

        asyncio.run(main())
        with changed:
            assert changed.wait_for(lambda: len(received) >= N, GUARD), received
    finally:
        subscriber.disconnect()
        subscriber.loop_stop()
    assert len(made) == 1  # one connection for the node
    assert not made[0].is_connected()  # and aclose() closed it
    assert received == list(range(N))  # qos 1 on one connection: the order emitted


def test_to_websocket_overlapping_emits_share_one_connection_in_order() -> None:
    pytest.importorskip("websockets")
    from websockets.asyncio.server import serve

    connections: list[Any] = []
    received: list[str] = []

    async def main() -> None:
        handlers_done = 0
        changed = asyncio.Condition()

        async def handler(ws: Any) -> None:
            nonlocal handlers_done
            connections.append(ws)
            async for message in ws:
                received.append(message)
            async with changed:
                handlers_done += 1
                changed.notify_all()

        async with serve(handler, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            source = Stream(asynchronous=True)
            sink = source.to_websocket(f"ws://127.0.0.1:{port}")
            in_flight = [source.emit(str(i)) for i in range(N)]  # none awaited before the next
            await asyncio.wait_for(asyncio.gather(*in_flight), GUARD)
            await asyncio.wait_for(source.aclose(), GUARD)
            assert sink.ws is None
            # Every connection the node opened ends: the server sees each close.
            async with changed:
                await asyncio.wait_for(
                    changed.wait_for(lambda: handlers_done == len(connections)), GUARD)

    asyncio.run(main())
    assert len(connections) == 1  # one connection for the node
    assert received == [str(i) for i in range(N)]
