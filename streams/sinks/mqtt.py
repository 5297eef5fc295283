"""``Stream.to_mqtt``: publish every element to an MQTT topic with paho-mqtt."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ..core import Stream
from ..sources.mqtt import check_mqtt_args, connack, mqtt_client, refused_error
from .ordered import LoopLock

__all__ = ["ToMqtt"]


@Stream.register_api()
class ToMqtt(Stream[Any]):
    """Publish each element (str, bytes, int, float or None) to ``topic``.

    The connection is opened on the first element, once the broker has
    accepted it, and kept. Each element
    is waited for until paho has handed it to the broker (``qos=0``,
    streamz's: written to the socket) or the broker acknowledged it
    (``qos`` 1 or 2); on an asynchronous stream that wait is what ``await
    emit`` waits for, off the loop. An element that cannot be published (no
    connection, credentials the broker refuses, a payload paho refuses, no
    acknowledgement within ``publish_timeout``) raises through the node's
    error policy, naming the node: streamz published without waiting and
    lost such elements silently. The end of the stream (``close()``), or
    ``destroy()``, disconnects.

    Elements are published one at a time, in the order emitted, on the
    node's one connection, also when emits overlap (an asynchronous
    ``emit`` not awaited, a ``buffer`` upstream), as streamz's synchronous
    publish did.

    Parameters
    ----------
    host, port : str, int
        The broker.
    topic : str
        The topic to publish to; the wildcards ``+`` and ``#`` are refused
        when the graph is built (they are for subscribing).
    keepalive : int
        Seconds between pings on an idle connection.
    client_kwargs : dict, optional
        Passed to the client's ``connect()``.
    qos : int
        Quality of service of each message (0, 1 or 2).
    retain : bool
        Ask the broker to keep the last message for new subscribers.
    user, pw : str, optional
        Credentials.
    publish_timeout : float
        Seconds to wait for each element's publication (and for the
        broker's answer to the connection).

    Examples
    --------
    Against a broker on ``localhost:1883`` (not run here):

    >>> from streams import Stream
    >>> source = Stream()
    >>> _ = source.map(str).to_mqtt("localhost", 1883, "sensors/temperature")
    >>> source.emit(21.5)  # doctest: +SKIP

    A topic to publish to holds no wildcard:

    >>> Stream().to_mqtt("localhost", 1883, "sensors/#")
    Traceback (most recent call last):
    ...
    ValueError: to_mqtt(): cannot publish to 'sensors/#': '+' and '#' are wildcards...
    """

    __slots__ = ("_lock", "_order", "_refusal", "c_kw", "client", "host", "keepalive", "port",
                 "publish_timeout", "pw", "qos", "retain", "topic", "user")
    _operator = "to_mqtt"
    _local_only = "it holds a connection to the broker, in this process"
    _params = ("host", "port", "topic", "keepalive", "qos", "retain")
    _graphviz_shape = "trapezium"

    def __init__(self, upstream: Stream[Any], host: str, port: int, topic: str,
                 keepalive: int = 60, client_kwargs: dict[str, Any] | None = None,
                 qos: int = 0, retain: bool = False, user: str | None = None,
                 pw: str | None = None, publish_timeout: float = 10.0,
                 **kwargs: Any) -> None:
        check_mqtt_args("to_mqtt", host, port, topic, keepalive, qos, wildcards=False)
        if not publish_timeout > 0:
            raise ValueError(f"to_mqtt(): publish_timeout must be > 0 seconds, got "
                             f"{publish_timeout!r}")
        kwargs.pop("ensure_io_loop", None)  # streamz's; publishing needs no loop here
        self.host, self.port, self.topic = host, port, topic
        self.keepalive, self.qos, self.retain = keepalive, qos, retain
        self.c_kw = dict(client_kwargs or {})  # streamz's attribute name
        self.user, self.pw = user, pw
        self.publish_timeout = publish_timeout
        #: The paho client once connected, else None.
        self.client: Any = None
        # The broker's refusal of paho's last reconnection (None once accepted).
        self._refusal: Any = None
        # Held by the thread connecting and publishing (or disconnecting): two
        # publications overlapping would each open a client of their own.
        self._lock = threading.Lock()
        # Queues the running loop's publications in the order emitted (a
        # threading.Lock is not first come, first served).
        self._order = LoopLock()
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            try:
                self._publish(x)
            except Exception as e:
                return self._fail(x, e)
            return None
        return self._publish_async(x)


    async def _publish_async(self, x: Any) -> None:
        try:
            async with self._order.get():
                # Connecting and waiting for the broker block: not on the loop.
                await asyncio.to_thread(self._publish, x)
        except Exception as e:
            pending = self._fail(x, e)
            if pending is not None:
                await pending

    def _connect(self) -> Any:
        if self.client is None:
            client = mqtt_client("to_mqtt", self.user, self.pw)
            try:
                client.connect(self.host, self.port, self.keepalive, **self.c_kw)
            except OSError as e:
                raise ConnectionError(f"{self._label()}: cannot connect to the MQTT broker at "
                                      f"{self.host}:{self.port}: {e}") from e
            # A refusal (credentials) comes in the broker's answer, not from
            # connect(): wait for it before the first publish.
            reason = connack(client, self.publish_timeout)
            if reason is None:
                raise ConnectionError(f"{self._label()}: the MQTT broker at {self.host}:"
                                      f"{self.port} did not answer the connection (closed "
                                      f"it, or no answer within {self.publish_timeout} s)")
            if reason.is_failure:
                raise refused_error(self._label(), self.host, self.port, reason)
            self._refusal = None
            client.on_connect = self._on_reconnect
            self.client = client
        return self.client

    def _on_reconnect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                      properties: Any) -> None:
        # paho's thread reconnects after a lost connection; a refusal then
        # explains the failures of the elements that follow.
        self._refusal = reason if reason.is_failure else None

    def _publish(self, x: Any) -> None:
        import paho.mqtt.client as mqtt

        with self._lock:
            info = self._connect().publish(self.topic, x, self.qos, self.retain)
            if info.rc != mqtt.MQTT_ERR_SUCCESS:
                self._raise_refusal()
                raise ConnectionError(f"{self._label()}: publishing to {self.topic!r} failed: "
                                      f"{mqtt.error_string(info.rc)}")
            info.wait_for_publish(self.publish_timeout)
            if not info.is_published():
                self._raise_refusal()
                raise TimeoutError(f"{self._label()}: {self.topic!r} not published within "
                                   f"{self.publish_timeout} s")

    def _raise_refusal(self) -> None:
        """Raise the broker's refusal of paho's reconnection, the cause of a failure."""
        if self._refusal is not None:
            raise refused_error(self._label(), self.host, self.port, self._refusal)

    def _disconnect(self) -> None:
        # After a publication in progress, which would otherwise connect again.
        with self._lock:
            client, self.client = self.client, None
        if client is not None:
            client.disconnect()
            client.loop_stop()

    async def _disconnect_async(self) -> None:
        async with self._order.get():  # after the publications queued before it
            await asyncio.to_thread(self._disconnect)  # joins paho's thread: not on the loop

    def _flush(self) -> Any:
        # End of stream: everything was published (each element waited for).
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._disconnect()
            return None
        return self._disconnect_async()

    def destroy(self, streams: list[Stream[Any]] | None = None) -> None:
        super().destroy(streams)
        if streams is None:
            self._disconnect()
