"""``from_mqtt`` / ``to_mqtt`` against a real mosquitto on loopback (tests/mqtt_broker.py).

Waits for delivery are events set by the pipeline itself, each guarded by a
generous timeout so that a failure fails instead of hanging; nothing is
asserted about elapsed time.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
from typing import Any

import pytest

from streams import NodeError, Stream

pytest.importorskip("paho.mqtt.client")

GUARD = 30.0  # seconds: only ever reached when the behaviour under test is broken
_topics = itertools.count()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic of the test's own (the broker is shared by the session)."""
    return f"streams-test/{request.node.name}/{next(_topics)}"


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def collect(source: Stream[Any], n: int) -> tuple[list[Any], threading.Event]:
    """The payloads ``source`` emits, and an event set once there are ``n``."""
    got: list[Any] = []
    done = threading.Event()

    def keep(msg: Any) -> None:
        got.append(msg.payload)
        if len(got) >= n:
            done.set()

    source.sink(keep)
    return got, done


def test_roundtrip_without_a_loop(mqtt_broker: Any, topic: str) -> None:
    source = Stream.from_mqtt(mqtt_broker.host, mqtt_broker.port, topic)
    got, done = collect(source, 4)
    source.start()  # returns once subscribed: nothing published after it is missed
    assert source.subscribed.done()
    data = [b"0", b"1", "two", 3]
    out = Stream.from_iterable(data)
    sink = out.to_mqtt(mqtt_broker.host, mqtt_broker.port, topic)
    out.start()  # runs to the end, then closes the stream: the sink disconnects
    assert sink.client is None
    assert done.wait(GUARD)
    source.stop()
    assert source.client is None  # stop() disconnected before returning
    assert got == [b"0", b"1", b"two", b"3"]  # paho sends str and int as their text


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_roundtrip_on_a_loop_at_each_qos(mqtt_broker: Any, topic: str, qos: int) -> None:
    source = Stream.from_mqtt(mqtt_broker.host, mqtt_broker.port, f"{topic}/#", qos=qos)
    got: list[Any] = []
    data = [f"{i}".encode() for i in range(20)]

    async def main() -> None:
        arrived = asyncio.Event()
        source.sink(lambda m: (got.append((m.topic, m.payload, m.qos)),
                               len(got) == len(data) and arrived.set()))
        source.start()
        await asyncio.wait_for(asyncio.wrap_future(source.subscribed), GUARD)
        out = Stream(asynchronous=True)
        out.to_mqtt(mqtt_broker.host, mqtt_broker.port, f"{topic}/x", qos=qos)
        for x in data:
            await out.emit(x)
        await out.aclose()
        await asyncio.wait_for(arrived.wait(), GUARD)
        await source.stop()

    asyncio.run(main())
    assert got == [(f"{topic}/x", x, qos) for x in data]
    assert source.client is None


def test_a_slow_pipeline_loses_nothing_with_a_small_queue(mqtt_broker: Any,
                                                          topic: str) -> None:
    # One message waits between paho's thread and the pipeline; the others
    # wait in paho's thread and the socket until the pipeline takes them.
    source = Stream.from_mqtt(mqtt_broker.host, mqtt_broker.port, topic, qos=1, max_queue=1)
    got: list[bytes] = []
    data = [f"{i}".encode() for i in range(10)]

    async def main() -> None:
        release = asyncio.Event()
        arrived = asyncio.Event()

        async def slow(msg: Any) -> None:
            await release.wait()
            got.append(msg.payload)
            if len(got) == len(data):
                arrived.set()

        source.sink(slow)
        source.start()
        await asyncio.wait_for(asyncio.wrap_future(source.subscribed), GUARD)
        out = Stream(asynchronous=True)
        out.to_mqtt(mqtt_broker.host, mqtt_broker.port, topic, qos=1)
        for x in data:
            await out.emit(x)  # acknowledged by the broker
        await out.aclose()
        assert got == []  # all held while the pipeline is busy
        release.set()
        await asyncio.wait_for(arrived.wait(), GUARD)
        await source.stop()

    asyncio.run(main())
    assert got == data


def test_to_mqtt_raises_naming_the_node_for_a_payload_paho_refuses(mqtt_broker: Any,
                                                                   topic: str) -> None:
    source = Stream()
    sink = source.to_mqtt(mqtt_broker.host, mqtt_broker.port, topic)
    with pytest.raises(TypeError) as info:
        source.emit({"not": "bytes"})
    assert isinstance(info.value, NodeError)
    assert "to_mqtt" in str(info.value)
    source.close()
    assert sink.client is None


def test_to_mqtt_raises_naming_the_node_without_a_broker() -> None:
    source = Stream()
    source.to_mqtt("127.0.0.1", closed_port(), "t")
    with pytest.raises(ConnectionError, match=r"to_mqtt.*cannot connect to the MQTT broker"):
        source.emit(b"x")


def test_to_mqtt_error_routes_to_the_error_stream_on_a_loop() -> None:
    source = Stream(asynchronous=True)
    sink = source.to_mqtt("127.0.0.1", closed_port(), "t").on_error("route")
    errors = sink.errors.sink_to_list()

    async def main() -> None:
        await source.emit(b"lost?")

    asyncio.run(main())
    assert [e.element for e in errors] == [b"lost?"]
    assert "cannot connect" in str(errors[0].exception)


def test_from_mqtt_start_raises_without_a_broker() -> None:
    source = Stream.from_mqtt("127.0.0.1", closed_port(), "t", connect_timeout=GUARD)
    with pytest.raises(ConnectionError, match=r"from_mqtt.*cannot connect to the MQTT broker"):
        source.start()
    assert source.stopped and source.client is None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"host": ""}, "host must be a non-empty str"),
    ({"port": 0}, "port must be an int from 1 to 65535"),
    ({"port": "1883"}, "port must be an int from 1 to 65535"),
    ({"topic": ""}, "topic must be a non-empty str"),
    ({"topic": ["a", "b"]}, "topic must be a non-empty str"),
    ({"keepalive": 0}, "keepalive must be an int >= 1"),
    ({"qos": 3}, "qos must be 0, 1 or 2"),
])
def test_bad_arguments_fail_when_the_graph_is_built(kwargs: dict[str, Any],
                                                     message: str) -> None:
    args = {"host": "localhost", "port": 1883, "topic": "t", **kwargs}
    with pytest.raises(ValueError, match=f"from_mqtt\\(\\): {message}"):
        Stream.from_mqtt(**args)
    with pytest.raises(ValueError, match=f"to_mqtt\\(\\): {message}"):
        Stream().to_mqtt(**args)


def test_from_mqtt_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"from_mqtt\(\): max_queue must be an int >= 1"):
        Stream.from_mqtt("localhost", 1883, "t", max_queue=0)
    with pytest.raises(ValueError, match=r"to_mqtt\(\): publish_timeout must be > 0"):
        Stream().to_mqtt("localhost", 1883, "t", publish_timeout=0)


def test_mqtt_uri_names_the_same_source_and_sink(mqtt_broker: Any, topic: str) -> None:
    uri = f"mqtt://{mqtt_broker.host}:{mqtt_broker.port}/{topic}"
    source = Stream.from_uri(uri + "?qos=1")
    got, done = collect(source, 2)
    source.start()
    out = Stream.from_iterable([b"a", b"b"])
    out.to_uri(uri, qos=1)
    out.start()
    assert done.wait(GUARD)
    source.stop()
    assert (source.topic, source.qos) == (topic, 1)
    assert got == [b"a", b"b"]


def test_mqtt_uri_refuses_what_it_does_not_know() -> None:
    with pytest.raises(ValueError, match=r"mqtt:// sink: unknown option 'colour'"):
        Stream().to_uri("mqtt://localhost:1883/t?colour=red")
    with pytest.raises(ValueError, match=r"give a topic after the address"):
        Stream.from_uri("mqtt://localhost:1883")
