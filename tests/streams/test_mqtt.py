"""``from_mqtt`` / ``to_mqtt`` against a real mosquitto on loopback (tests/mqtt_broker.py).

Waits for delivery are events set by the pipeline itself, each guarded by a
generous timeout so that a failure fails instead of hanging; nothing is
asserted about elapsed time.
"""

from __future__ import annotations

import asyncio
import getpass
import itertools
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from streams import NodeError, Stream
from tests.mqtt_broker import MOSQUITTO, MqttBroker

pytest.importorskip("paho.mqtt.client")

import paho.mqtt.client as mqtt
import paho.mqtt.publish as publish
from paho.mqtt.enums import CallbackAPIVersion

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


# The fixes of the network review: sessions, topic filters, credentials.

USER, PASSWORD = "alice@home", "p@ss:w/rd %"  # characters a URI must percent-encode


class AuthBroker(MqttBroker):
    """A mosquitto that admits only USER with PASSWORD."""

    def __init__(self, directory: Path) -> None:
        passwd = shutil.which("mosquitto_passwd")
        if passwd is None or not Path(MOSQUITTO).exists():
            pytest.skip("needs mosquitto and mosquitto_passwd (apt-get install mosquitto)")
        passwords = directory / "passwords"
        subprocess.run([passwd, "-b", "-c", str(passwords), USER, PASSWORD], check=True,
                       capture_output=True, timeout=GUARD)
        self.directory, self.port = directory, closed_port()
        conf = directory / "mosquitto.conf"
        # As root, mosquitto would drop to a user that cannot read the file.
        conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous false\n"
                        f"password_file {passwords}\nuser {getpass.getuser()}\n"
                        "persistence false\n")
        self._log_path = directory / "mosquitto.log"
        self._log = open(self._log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=self._log,
                                        stderr=subprocess.STDOUT)
        self._wait_ready()


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthBroker]:
    broker = AuthBroker(tmp_path_factory.mktemp("mqtt-auth"))
    try:
        yield broker
    finally:
        broker.stop()


class Received:
    """The payloads a source emits, waited for by count."""

    def __init__(self, source: Stream[Any]) -> None:
        self.payloads: list[bytes] = []
        self._changed = threading.Condition()
        source.sink(self._keep)

    def _keep(self, msg: Any) -> None:
        with self._changed:
            self.payloads.append(msg.payload)
            self._changed.notify_all()

    def wait_for(self, *payloads: bytes) -> list[bytes]:
        """Wait until each of ``payloads`` came; the payloads, each once, in order."""
        with self._changed:
            assert self._changed.wait_for(lambda: set(payloads) <= set(self.payloads),
                                          GUARD), self.payloads
            # At least once: a message in flight when a connection drops may come twice.
            return list(dict.fromkeys(self.payloads))


class CuttableProxy:
    """A loopback TCP proxy to the broker whose connections the test cuts.

    While down, it closes each connection it accepts: paho cannot reconnect.
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self.down = False
        self._pairs: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self.down:
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._pairs += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Drop every connection, and refuse new ones until :meth:`restore`."""
        self.down = True
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for s in pairs:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        self.down = False

    def close(self) -> None:
        self.cut()
        self._listener.close()


def publish_one(broker: Any, topic: str, payload: bytes) -> None:
    """Publish at qos 1: returns once the broker has acknowledged it."""
    publish.single(topic, payload, qos=1, hostname=broker.host, port=broker.port)


def session_present(broker: Any, client_id: str) -> bool:
    """Whether the broker holds a session for ``client_id`` (this leaves none behind)."""
    flags: list[bool] = []
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False)
    client.on_connect = lambda c, u, f, r, p: flags.append(f.session_present)
    client.connect(broker.host, broker.port)
    while not flags:
        assert client.loop(timeout=GUARD) == mqtt.MQTT_ERR_SUCCESS
    client.disconnect()
    end = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True)
    end.connect(broker.host, broker.port)
    end.loop(timeout=GUARD)  # its CONNACK: the session checked is discarded
    end.disconnect()
    return flags[0]


def test_qos1_loses_nothing_published_while_paho_reconnects(mqtt_broker: Any,
                                                            topic: str) -> None:
    proxy = CuttableProxy(mqtt_broker.port)
    try:
        source = Stream.from_mqtt("127.0.0.1", proxy.port, topic, qos=1,
                                  connect_timeout=GUARD)
        received = Received(source)
        source.start()
        publish_one(mqtt_broker, topic, b"before")
        received.wait_for(b"before")
        proxy.cut()  # the network drops the source's connection, for a while
        publish_one(mqtt_broker, topic, b"during-1")
        publish_one(mqtt_broker, topic, b"during-2")
        proxy.restore()  # paho reconnects; the broker kept the session's messages
        assert received.wait_for(b"during-1", b"during-2") == [b"before", b"during-1",
                                                               b"during-2"]
        source.stop()
    finally:
        proxy.close()


def test_stop_ends_the_session_of_a_run_without_client_id(mqtt_broker: Any,
                                                          topic: str) -> None:
    # MQTT 3.1.1 sessions never expire: left behind, one would queue the
    # topic's messages for ever for a client that will never come back.
    source = Stream.from_mqtt(mqtt_broker.host, mqtt_broker.port, topic, qos=1)
    received = Received(source)
    source.start()
    session = source._session
    assert session is not None
    publish_one(mqtt_broker, topic, b"x")
    received.wait_for(b"x")
    source.stop()
    assert not session_present(mqtt_broker, session)


def test_a_named_session_keeps_what_is_published_while_stopped(mqtt_broker: Any,
                                                               topic: str) -> None:
    client_id = f"streams-test-{next(_topics)}"
    uri = f"mqtt://{mqtt_broker.host}:{mqtt_broker.port}/{topic}?qos=1&client_id={client_id}"
    source = Stream.from_uri(uri)
    assert source.client_id == client_id
    received = Received(source)
    source.start()
    publish_one(mqtt_broker, topic, b"first run")
    received.wait_for(b"first run")
    source.stop()
    publish_one(mqtt_broker, topic, b"while stopped")
    source.start()
    publish_one(mqtt_broker, topic, b"second run")
    assert received.wait_for(b"while stopped", b"second run") == [
        b"first run", b"while stopped", b"second run"]
    source.stop()
    assert session_present(mqtt_broker, client_id)  # kept for the next run; ended here


@pytest.mark.parametrize("topic", ["a/#/b", "#/a", "a/b#", "a+", "a/+b/c", "a/#+"])
def test_from_mqtt_refuses_a_malformed_filter_when_built(topic: str) -> None:
    with pytest.raises(ValueError, match=r"from_mqtt\(\): topic filter .* must be a whole "
                                         r"level"):
        Stream.from_mqtt("localhost", 1883, topic)
    with pytest.raises(ValueError, match=r"from_mqtt\(\): topic filter"):
        Stream.from_uri(f"mqtt://localhost:1883/{topic}")


@pytest.mark.parametrize("topic", ["#", "+", "a/#", "+/+/c", "a//b", "$share/g/a/+"])
def test_from_mqtt_accepts_the_wildcards_as_whole_levels(topic: str) -> None:
    assert Stream.from_mqtt("localhost", 1883, topic).topic == topic


@pytest.mark.parametrize("topic", ["sensors/#", "a/+/b", "+"])
def test_to_mqtt_refuses_a_wildcard_topic_when_built(topic: str) -> None:
    with pytest.raises(ValueError, match=r"to_mqtt\(\): cannot publish to .* wildcards"):
        Stream().to_mqtt("localhost", 1883, topic)


def test_a_failure_on_connect_ends_start_with_it(mqtt_broker: Any, topic: str) -> None:
    source = Stream.from_mqtt(mqtt_broker.host, mqtt_broker.port, topic, connect_timeout=GUARD)
    source.topic = "a/#/b"  # past the build-time check: paho raises in on_connect
    with pytest.raises(RuntimeError, match=r"from_mqtt.*cannot subscribe to 'a/#/b'"):
        source.start()
    assert source.stopped and source.client is None


def test_a_failure_on_connect_ends_the_run_on_a_loop(mqtt_broker: Any, topic: str) -> None:
    source = Stream.from_mqtt(mqtt_broker.host, mqtt_broker.port, topic)
    source.topic = "a/#/b"  # past the build-time check: paho raises in on_connect

    async def main() -> None:
        task = source.start()
        with pytest.raises(RuntimeError, match=r"cannot subscribe to 'a/#/b'"):
            await asyncio.wait_for(task, GUARD)
        with pytest.raises(RuntimeError, match=r"cannot subscribe"):
            await asyncio.wait_for(asyncio.wrap_future(source.subscribed), GUARD)

    asyncio.run(main())
    assert source.client is None


@pytest.mark.parametrize("qos", [0, 1])
def test_to_mqtt_raises_the_refusal_of_its_credentials(auth_broker: AuthBroker,
                                                       qos: int) -> None:
    source = Stream()
    sink = source.to_mqtt(auth_broker.host, auth_broker.port, "t", user=USER, pw="wrong",
                          qos=qos, publish_timeout=GUARD)
    for x in [b"a", b"b"]:  # each element: nothing is published, or lost, silently
        with pytest.raises(ConnectionRefusedError,
                           match=r"to_mqtt.*refused the connection: Not authorized "
                                 r"\(check user= and pw="):
            source.emit(x)
    assert sink.client is None


def test_mqtt_uri_credentials_are_percent_decoded(auth_broker: AuthBroker, topic: str) -> None:
    uri = (f"mqtt://{quote(USER, safe='')}:{quote(PASSWORD, safe='')}@{auth_broker.host}:"
           f"{auth_broker.port}/{topic}?qos=1")
    source = Stream.from_uri(uri)
    assert (source.user, source.pw) == (USER, PASSWORD)
    received = Received(source)
    source.start()
    out = Stream.from_iterable([b"a", b"b"])
    sink = out.to_uri(uri)
    assert (sink.user, sink.pw) == (USER, PASSWORD)
    out.start()
    assert received.wait_for(b"a", b"b") == [b"a", b"b"]
    source.stop()


def test_mqtt_uri_topic_may_end_with_a_bare_hash(mqtt_broker: Any, topic: str) -> None:
    # A URL parser reads '#' as a fragment: the source subscribed to 'topic/'.
    source = Stream.from_uri(f"mqtt://{mqtt_broker.host}:{mqtt_broker.port}/{topic}/#?qos=1")
    assert (source.topic, source.qos) == (f"{topic}/#", 1)
    received = Received(source)
    source.start()
    publish_one(mqtt_broker, f"{topic}/a/b", b"deep")
    assert received.wait_for(b"deep") == [b"deep"]
    source.stop()
    with pytest.raises(ValueError, match=r"to_mqtt\(\): cannot publish to 'sensors/#'"):
        Stream().to_uri("mqtt://localhost:1883/sensors/#")
