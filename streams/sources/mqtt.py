"""``Stream.from_mqtt``: messages of an MQTT topic, received with paho-mqtt.

paho-mqtt runs its network loop in its own thread (as in streamz); messages
are handed to the source's loop through a bounded queue, so a slow pipeline
stops paho's thread from reading and TCP flow control slows the broker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
from typing import Any

from ..core import Stream
from .base import Source

__all__ = ["FromMqtt", "check_mqtt_args", "mqtt_client"]

logger = logging.getLogger("streams")


def check_mqtt_args(operator: str, host: Any, port: Any, topic: Any, keepalive: Any,
                    qos: Any) -> None:
    """Raise a clear error for an argument paho-mqtt would reject late, or misread.

    >>> check_mqtt_args("from_mqtt", "localhost", 1883, "a/b", 60, 0)
    >>> check_mqtt_args("from_mqtt", "localhost", 1883, "a/b", 60, 3)
    Traceback (most recent call last):
    ...
    ValueError: from_mqtt(): qos must be 0, 1 or 2, got 3
    """
    if not isinstance(host, str) or not host:
        raise ValueError(f"{operator}(): host must be a non-empty str, got {host!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{operator}(): port must be an int from 1 to 65535, got {port!r}")
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"{operator}(): topic must be a non-empty str, got {topic!r}")
    if isinstance(keepalive, bool) or not isinstance(keepalive, int) or keepalive < 1:
        raise ValueError(f"{operator}(): keepalive must be an int >= 1 (seconds), got "
                         f"{keepalive!r}")
    if qos not in (0, 1, 2) or isinstance(qos, bool):
        raise ValueError(f"{operator}(): qos must be 0, 1 or 2, got {qos!r}")


def mqtt_client(operator: str, user: str | None, pw: str | None) -> Any:
    """A paho-mqtt client (callback API 2), or an ImportError saying what to install."""
    try:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion
    except ImportError:
        raise ImportError(f"{operator}() needs paho-mqtt: pip install 'streams[mqtt]' "
                          "(or paho-mqtt)") from None
    client = mqtt.Client(CallbackAPIVersion.VERSION2)
    if user:
        client.username_pw_set(user, pw)
    return client


@Stream.register_api(staticmethod)
class FromMqtt(Source[Any]):
    """Subscribe to an MQTT topic and emit every message received.

    The elements are ``paho.mqtt.client.MQTTMessage`` objects (attributes
    ``payload``, ``topic``, ``qos``, ``timestamp``...), as in streamz. Each
    is awaited through the graph before the next is taken (backpressure):
    paho's network thread waits when ``max_queue`` messages are waiting,
    and stops reading from the broker.

    ``start()`` connects and subscribes; with no loop running it runs on the
    shared loop thread (as streamz) and returns once the broker has
    confirmed the subscription, so a message published after it returns is
    received; it raises if the broker cannot be reached within
    ``connect_timeout``. On a running loop it returns the run's task; await
    ``asyncio.wrap_future(source.subscribed)`` to wait for the subscription.
    ``stop()`` unsubscribes and disconnects (without a running loop, before
    it returns); messages received but not yet emitted then are counted in
    a warning, never dropped without one. After a lost connection paho
    reconnects, and the topic is subscribed again.

    Delivery is as the broker gives it at ``qos``: with 0 (streamz's) at most
    once.

    Parameters
    ----------
    host, port : str, int
        The broker.
    topic : str
        The topic filter to subscribe to (``+`` and ``#`` wildcards allowed).
    keepalive : int
        Seconds between pings on an idle connection.
    client_kwargs : dict, optional
        Passed to the client's ``connect_async()`` (``bind_address``...).
    user, pw : str, optional
        Credentials.
    qos : int
        The subscription's quality of service (0, 1 or 2).
    max_queue : int
        Messages held between paho's thread and the pipeline.
    connect_timeout : float
        Seconds ``start()`` waits for the subscription with no loop running.

    Examples
    --------
    Against a broker on ``localhost:1883`` (not run here):

    >>> from streams import Stream
    >>> source = Stream.from_mqtt("localhost", 1883, "sensors/#")
    >>> payloads = source.map(lambda msg: msg.payload).sink_to_list()
    >>> source.start()  # doctest: +SKIP
    """

    __slots__ = ("_dropped", "_queue", "_run_loop", "_wake", "client", "client_kwargs",
                 "connect_timeout", "host", "keepalive", "max_queue", "port", "pw", "qos",
                 "subscribed", "topic", "user")
    _operator = "from_mqtt"
    _params = ("host", "port", "topic", "keepalive", "qos")
    _needs_loop = True

    def __init__(self, host: str, port: int, topic: str, keepalive: int = 60,
                 client_kwargs: dict[str, Any] | None = None, user: str | None = None,
                 pw: str | None = None, qos: int = 0, max_queue: int = 1000,
                 connect_timeout: float = 10.0, start: bool = False, **kwargs: Any) -> None:
        check_mqtt_args("from_mqtt", host, port, topic, keepalive, qos)
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise ValueError(f"from_mqtt(): max_queue must be an int >= 1, got {max_queue!r}")
        if not connect_timeout > 0:
            raise ValueError(f"from_mqtt(): connect_timeout must be > 0 seconds, got "
                             f"{connect_timeout!r}")
        self.host, self.port, self.topic = host, port, topic
        self.keepalive, self.qos = keepalive, qos
        self.client_kwargs = dict(client_kwargs or {})
        self.user, self.pw = user, pw
        self.max_queue = max_queue
        self.connect_timeout = connect_timeout
        #: The paho client while running, else None.
        self.client: Any = None
        #: Resolved when the broker confirms the subscription (a concurrent future).
        self.subscribed: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._queue: queue.Queue[Any] = queue.Queue(max_queue)
        self._run_loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._dropped = 0
        super().__init__(start=start, **kwargs)

    def start(self) -> Any:
        """Connect and subscribe; see the class description for what it returns."""
        if self.started and not self.stopped:
            return self._task
        self.subscribed = concurrent.futures.Future()
        self._queue = queue.Queue(self.max_queue)
        task = super().start()
        if self._run_loop_of_caller() is None and isinstance(task, concurrent.futures.Future):
            try:
                self.subscribed.result(self.connect_timeout)
            except concurrent.futures.TimeoutError:
                self.stop()
                raise TimeoutError(
                    f"{self._label()}: no subscription to {self.topic!r} at "
                    f"{self.host}:{self.port} within {self.connect_timeout} s") from None
            except Exception:
                self.stop()
                raise
        return task

    @staticmethod
    def _run_loop_of_caller() -> asyncio.AbstractEventLoop | None:
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            return None

    def _run_sync(self) -> None:  # pragma: no cover - _needs_loop routes to the loop thread
        raise RuntimeError("from_mqtt() runs on an event loop")

    # paho's callbacks, on paho's network thread.

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        if reason.is_failure:
            self._not_subscribed(ConnectionRefusedError(
                f"{self._label()}: the broker at {self.host}:{self.port} refused the "
                f"connection: {reason}"))
            return
        client.subscribe(self.topic, self.qos)  # again after each reconnection

    def _on_connect_fail(self, client: Any, userdata: Any) -> None:
        self._not_subscribed(ConnectionError(
            f"{self._label()}: cannot connect to the MQTT broker at {self.host}:{self.port}"))

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any,
                      properties: Any) -> None:
        if any(r.is_failure for r in reasons):
            self._not_subscribed(PermissionError(
                f"{self._label()}: the broker refused the subscription to {self.topic!r}: "
                f"{reasons[0]}"))
        elif not self.subscribed.done():
            self.subscribed.set_result(None)

    def _not_subscribed(self, exc: Exception) -> None:
        if not self.subscribed.done():
            self.subscribed.set_exception(exc)
        self._wakeup()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        while True:
            try:
                # A timeout only to notice stop() while the queue is full.
                self._queue.put(message, timeout=0.2)
                break
            except queue.Full:
                if self.stopped:
                    self._dropped += 1
                    return
        self._wakeup()

    def _wakeup(self) -> None:
        loop, wake = self._run_loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    # The run, on the source's loop.

    async def _run_async(self) -> None:
        self._run_loop = asyncio.get_running_loop()
        self._wake = wake = asyncio.Event()
        self._dropped = 0
        client = self.client = mqtt_client("from_mqtt", self.user, self.pw)
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        client.connect_async(self.host, self.port, self.keepalive, **self.client_kwargs)
        client.loop_start()
        try:
            while not self.subscribed.done() and not self.stopped:
                await wake.wait()
                wake.clear()
            if self.subscribed.done() and self.subscribed.exception() is not None:
                raise self.subscribed.exception()  # type: ignore[misc]
            while not self.stopped:
                try:
                    message = self._queue.get_nowait()
                except queue.Empty:
                    wake.clear()
                    if self._queue.empty():
                        await wake.wait()
                    continue
                pending = self._push(message)
                if pending is not None:
                    await pending
        finally:
            await self._disconnect(client)

    async def _disconnect(self, client: Any) -> None:
        self.stopped = True
        client.disconnect()
        # Joins paho's thread, which may be waiting a moment on a full queue.
        await asyncio.to_thread(client.loop_stop)
        self.client = None
        left = self._queue.qsize() + self._dropped
        if left:
            logger.warning("%s stopped with %d received message(s) not emitted", self._label(),
                           left)

    def stop(self) -> Any:
        """Stop after the element in progress, unsubscribe and disconnect.

        With no loop running in the caller, waits until disconnected.
        """
        end = super().stop()
        self._wakeup()
        task = self._task
        from ..loop_thread import in_loop_thread

        if (isinstance(task, concurrent.futures.Future) and self._run_loop_of_caller() is None
                and not in_loop_thread()):
            try:
                task.result(self.connect_timeout)
            except Exception:
                pass
            return None
        return end
