"""``from_mqtt`` acknowledges a message only once its work is done (DESIGN.md, contract 9).

Against a real mosquitto on loopback (tests/mqtt_broker.py). A run is
stopped while messages wait, already received, behind a busy pipeline: at
qos 1 with a ``client_id``, the next run with that id receives them again,
and not the message whose work was done. Waits are on conditions, each
guarded by a generous timeout; nothing is asserted about elapsed time.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from streams import Stream

pytest.importorskip("paho.mqtt.client")

import paho.mqtt.client as mqtt
import paho.mqtt.publish as publish
from paho.mqtt.enums import CallbackAPIVersion

GUARD = 30.0  # seconds: only ever reached when the behaviour under test is broken
DATA = [f"{i}".encode() for i in range(5)]
_ids = itertools.count()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic of the test's own (the broker is shared by the session)."""
    return f"streams-test/{request.node.name}/{next(_ids)}"


@pytest.fixture
def client_id(mqtt_broker: Any) -> Any:
    """A session id of the test's own; the broker forgets its session afterwards."""
    name = f"streams-acks-{next(_ids)}"
    yield name
    end = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, clean_session=True)
    end.connect(mqtt_broker.host, mqtt_broker.port)
    end.loop(timeout=GUARD)  # its CONNACK: the session is discarded
    end.disconnect()


def wait_until(condition: Callable[[], bool]) -> None:
    """Return once ``condition()`` holds; fail after GUARD seconds."""
    deadline = time.monotonic() + GUARD
    while not condition():
        assert time.monotonic() < deadline, "condition not met within GUARD"
        time.sleep(0.01)  # polling a condition, not timing the test


def publish_all(broker: Any, topic: str) -> None:
    """Publish DATA at qos 1: returns once the broker has acknowledged each."""
    publish.multiple([{"topic": topic, "payload": x, "qos": 1} for x in DATA],
                     hostname=broker.host, port=broker.port)


def all_received(source: Any) -> bool:
    """Whether the run holds every message but the first (the one in progress)."""
    return bool(source._queue.qsize() == len(DATA) - 1)


def redelivered(broker: Any, topic: str, client_id: str) -> list[bytes]:
    """What a new run with ``client_id`` receives: until DATA's last message."""
    source = Stream.from_mqtt(broker.host, broker.port, topic, qos=1, client_id=client_id,
                              connect_timeout=GUARD)
    got: list[bytes] = []
    done = threading.Event()

    def keep(msg: Any) -> None:
        got.append(msg.payload)
        if msg.payload == DATA[-1]:
            done.set()

    source.sink(keep)
    source.start()
    try:
        assert done.wait(GUARD), f"not delivered again: {got}"
    finally:
        source.stop()
    return got


def test_messages_not_emitted_at_stop_are_delivered_again_without_a_loop(
        mqtt_broker: Any, topic: str, client_id: str,
        caplog: pytest.LogCaptureFixture) -> None:
    # No loop: the run is on the shared loop thread; the sink is synchronous.
    source = Stream.from_mqtt(mqtt_broker.host, mqtt_broker.port, topic, qos=1,
                              client_id=client_id, connect_timeout=GUARD)
    first: list[bytes] = []
    all_in = threading.Event()

    def busy(msg: Any) -> None:
        first.append(msg.payload)
        assert all_in.wait(GUARD)  # the others wait, received, behind this one
        source.stop()  # from the run's own graph: it ends after this element

    source.sink(busy)
    source.start()
    with caplog.at_level(logging.WARNING, logger="streams"):
        publish_all(mqtt_broker, topic)
        wait_until(lambda: all_received(source))
        all_in.set()
        wait_until(lambda: source.client is None)  # disconnected
    assert first == DATA[:1]
    # The first message's work was done: acknowledged, it is not sent again.
    assert redelivered(mqtt_broker, topic, client_id) == DATA[1:]
    assert "stopped with 4 received message(s) not emitted; the broker delivers them " \
           f"again to the next run with client_id '{client_id}'" in caplog.text


def test_messages_not_emitted_at_stop_are_delivered_again_on_a_loop(
        mqtt_broker: Any, topic: str, client_id: str) -> None:
    # On a running loop; acknowledged only once the coroutine sink is done.
    source = Stream.from_mqtt(mqtt_broker.host, mqtt_broker.port, topic, qos=1,
                              client_id=client_id)
    first: list[bytes] = []

    async def busy(msg: Any) -> None:
        await asyncio.to_thread(wait_until, lambda: all_received(source))
        first.append(msg.payload)
        source.stop()

    source.sink(busy)

    async def main() -> None:
        run = source.start()
        await asyncio.wait_for(asyncio.wrap_future(source.subscribed), GUARD)
        await asyncio.to_thread(publish_all, mqtt_broker, topic)
        await asyncio.wait_for(run, GUARD)

    asyncio.run(main())
    assert first == DATA[:1]
    assert redelivered(mqtt_broker, topic, client_id) == DATA[1:]


@pytest.mark.parametrize("qos", [1, 2])
def test_acknowledged_messages_keep_flowing_past_the_brokers_in_flight_window(
        mqtt_broker: Any, topic: str, qos: int) -> None:
    # mosquitto sends at most 20 unacknowledged messages to a client: a
    # message never acknowledged would stop the delivery of the rest.
    source = Stream.from_mqtt(mqtt_broker.host, mqtt_broker.port, topic, qos=qos,
                              connect_timeout=GUARD)
    data = [f"{i}".encode() for i in range(60)]
    got: list[bytes] = []
    done = threading.Event()

    def keep(msg: Any) -> None:
        got.append(msg.payload)
        if len(got) == len(data):
            done.set()

    source.sink(keep)
    source.start()
    try:
        publish.multiple([{"topic": topic, "payload": x, "qos": qos} for x in data],
                         hostname=mqtt_broker.host, port=mqtt_broker.port)
        assert done.wait(GUARD), f"{len(got)} of {len(data)} received"
    finally:
        source.stop()
    assert got == data


def test_qos2_messages_not_emitted_at_stop_are_said_lost(
        mqtt_broker: Any, topic: str, client_id: str,
        caplog: pytest.LogCaptureFixture) -> None:
    # paho confirmed their receipt (PUBREC): the broker will not send them
    # again, so the warning says nothing of a redelivery, and the session
    # goes on delivering what comes next.
    source = Stream.from_mqtt(mqtt_broker.host, mqtt_broker.port, topic, qos=2,
                              client_id=client_id, connect_timeout=GUARD)
    all_in = threading.Event()

    def busy(msg: Any) -> None:
        assert all_in.wait(GUARD)
        source.stop()

    source.sink(busy)
    source.start()
    with caplog.at_level(logging.WARNING, logger="streams"):
        publish.multiple([{"topic": topic, "payload": x, "qos": 2} for x in DATA],
                         hostname=mqtt_broker.host, port=mqtt_broker.port)
        wait_until(lambda: all_received(source))
        all_in.set()
        wait_until(lambda: source.client is None)
    assert "stopped with 4 received message(s) not emitted\n" in caplog.text
    publish.single(topic, DATA[-1], qos=2, hostname=mqtt_broker.host, port=mqtt_broker.port)
    assert redelivered(mqtt_broker, topic, client_id) == DATA[-1:]
