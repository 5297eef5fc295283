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
import uuid
from typing import Any

from ..core import Stream
from .base import Source

__all__ = ["FromMqtt", "check_mqtt_args", "check_topic", "connack", "mqtt_client",
           "refused_error"]

logger = logging.getLogger("streams")


def check_mqtt_args(operator: str, host: Any, port: Any, topic: Any, keepalive: Any,
                    qos: Any, *, wildcards: bool = True) -> None:
    """Raise a clear error for an argument paho-mqtt would reject late, or misread.

    ``wildcards``: whether ``topic`` is a filter to subscribe to (``+`` and
    ``#`` allowed) or a topic to publish to (no wildcard).

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
    check_topic(operator, topic, wildcards=wildcards)
    if isinstance(keepalive, bool) or not isinstance(keepalive, int) or keepalive < 1:
        raise ValueError(f"{operator}(): keepalive must be an int >= 1 (seconds), got "
                         f"{keepalive!r}")
    if qos not in (0, 1, 2) or isinstance(qos, bool):
        raise ValueError(f"{operator}(): qos must be 0, 1 or 2, got {qos!r}")


def check_topic(operator: str, topic: Any, *, wildcards: bool) -> None:
    """Raise a clear error for a topic (``wildcards=False``) or filter MQTT forbids.

    Checked when the graph is built: paho refuses a bad filter only on its
    network thread, after connecting, and a wildcard topic at each publish.

    >>> check_topic("from_mqtt", "sensors/+/temperature", wildcards=True)
    >>> check_topic("from_mqtt", "sensors/#/temperature", wildcards=True)
    Traceback (most recent call last):
    ...
    ValueError: from_mqtt(): topic filter 'sensors/#/temperature': '#' must be a whole level...
    >>> check_topic("to_mqtt", "sensors/#", wildcards=False)
    Traceback (most recent call last):
    ...
    ValueError: to_mqtt(): cannot publish to 'sensors/#': '+' and '#' are wildcards...
    """
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"{operator}(): topic must be a non-empty str, got {topic!r}")
    if "\0" in topic or len(topic.encode()) > 65535:
        raise ValueError(f"{operator}(): topic {topic[:80]!r} is not an MQTT topic: it holds "
                         "a NUL character or is over 65535 bytes")
    if not wildcards:
        if "+" in topic or "#" in topic:
            raise ValueError(f"{operator}(): cannot publish to {topic!r}: '+' and '#' are "
                             "wildcards, for subscribing; give one topic, as in "
                             "'sensors/temperature'")
        return
    levels = topic.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise ValueError(f"{operator}(): topic filter {topic!r}: '#' must be a whole "
                             "level and the last one, as in 'sensors/#'")
        if "+" in level and level != "+":
            raise ValueError(f"{operator}(): topic filter {topic!r}: '+' must be a whole "
                             "level, as in 'sensors/+/temperature'")


def mqtt_client(operator: str, user: str | None, pw: str | None, *, client_id: str = "",
                clean_session: bool = True, manual_ack: bool = False) -> Any:
    """A paho-mqtt client (callback API 2), or an ImportError saying what to install.

    ``client_id`` "" lets paho pick a random one (a clean session only).
    ``manual_ack``: paho acknowledges a message at qos 1 or 2 only when told
    to (``client.ack(mid, qos)``), not as soon as its callback returns.
    """
    try:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion
    except ImportError:
        raise ImportError(f"{operator}() needs paho-mqtt: pip install 'streams[mqtt]' "
                          "(or paho-mqtt)") from None
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                         clean_session=clean_session, manual_ack=manual_ack)
    if user:
        client.username_pw_set(user, pw)
    return client


def connack(client: Any, timeout: float) -> Any:
    """Start paho's thread for a client ``connect()`` connected; wait for the broker's answer.

    Returns paho's reason code of the answer (CONNACK), or None when the
    connection was lost before it or none came within ``timeout`` seconds.
    Unless the connection was accepted, paho's thread is stopped.
    """
    answer: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def answered(reason: Any) -> None:
        if not answer.done():
            answer.set_result(reason)

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any,
                   properties: Any) -> None:
        if reason.is_failure:
            client.disconnect()  # paho's thread ends now; it would wait to reconnect
        answered(reason)

    client.on_connect = on_connect
    client.on_disconnect = lambda *args: answered(None)
    client.loop_start()
    try:
        reason = answer.result(timeout)
    except concurrent.futures.TimeoutError:
        reason = None
    client.on_disconnect = None
    if reason is None or reason.is_failure:
        client.disconnect()
        client.loop_stop()
    return reason


def refused_error(label: str, host: str, port: int, reason: Any) -> ConnectionRefusedError:
    """The error for a connection the broker refused (``reason``: paho's reason code)."""
    # 134/135: MQTT 5's codes, which paho also gives for MQTT 3's CONNACK 4 and 5.
    hint = (" (check user= and pw=, or user:pw@ in an mqtt:// URI)"
            if getattr(reason, "value", None) in (134, 135) else "")
    return ConnectionRefusedError(f"{label}: the broker at {host}:{port} refused the "
                                  f"connection: {reason}{hint}")


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
    received; it raises if the broker cannot be reached or refuses within
    ``connect_timeout``. On a running loop it returns the run's task; await
    ``asyncio.wrap_future(source.subscribed)`` to wait for the subscription.
    ``stop()`` disconnects (without a running loop, before it returns);
    messages received but not yet emitted then are counted in a warning,
    which says which of them the broker delivers again (see below), never
    dropped without one. After a lost connection paho reconnects, and the
    topic is subscribed again.

    Delivery is as the broker gives it at ``qos``. With 0 (streamz's): at
    most once; what is published while the connection is down is lost.
    With 1 or 2 the source keeps an MQTT persistent session (MQTT 3.1.1,
    clean session off), so the broker queues what is published while paho
    reconnects and delivers it after: at least once across lost
    connections (a message in flight may come twice). Without
    ``client_id`` the session is this run's own (a random id), ended by
    ``stop()``: what is published while the source is stopped is not
    kept. With ``client_id``, the session outlives ``stop()`` and the
    process: the next start with the same id receives what was published
    meanwhile (as long as the broker keeps sessions, which mosquitto does
    until restarted unless ``persistence`` is on). Two clients connected
    with one id throw each other off the broker: give each running source
    its own. The session keeps its subscriptions: a source given the same
    id with another topic also receives the old topic's messages.

    A message is acknowledged to the broker once the pipeline is done with
    it (its ``emit``, coroutine sinks included), in the order received.
    With ``client_id``, a qos 1 message not emitted by ``stop()``, or by a
    crashed process, or whose pipeline raised, is delivered again to the
    next run with that id. At qos 2 paho confirms receipt (PUBREC) before
    handing a message over, so the broker never sends it again: one not
    emitted by ``stop()`` is lost (and said so), as are those of a session
    of the run's own (no ``client_id``), which ``stop()`` ends.

    Parameters
    ----------
    host, port : str, int
        The broker.
    topic : str
        The topic filter to subscribe to: ``+`` stands for one whole level,
        ``#`` for the rest, as the last level (``sensors/+/temperature``,
        ``sensors/#``). A malformed filter is refused when the graph is built.
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
    client_id : str, optional
        The MQTT client id (keyword only). With ``qos`` 1 or 2 it names a
        session the broker keeps between runs (see above).

    Examples
    --------
    Against a broker on ``localhost:1883`` (not run here):

    >>> from streams import Stream
    >>> source = Stream.from_mqtt("localhost", 1883, "sensors/#", qos=1)
    >>> payloads = source.map(lambda msg: msg.payload).sink_to_list()
    >>> source.start()  # doctest: +SKIP

    A malformed filter fails at once:

    >>> Stream.from_mqtt("localhost", 1883, "sensors/#/temperature")
    Traceback (most recent call last):
    ...
    ValueError: from_mqtt(): topic filter 'sensors/#/temperature': '#' must be a whole level...
    """

    __slots__ = ("_connected", "_dropped", "_failure", "_kept", "_queue", "_run_loop", "_session",
                 "_wake", "client", "client_id", "client_kwargs", "connect_timeout", "host",
                 "keepalive", "max_queue", "port", "pw", "qos", "subscribed", "topic", "user")
    _operator = "from_mqtt"
    _params = ("host", "port", "topic", "keepalive", "qos", "client_id")
    _needs_loop = True

    def __init__(self, host: str, port: int, topic: str, keepalive: int = 60,
                 client_kwargs: dict[str, Any] | None = None, user: str | None = None,
                 pw: str | None = None, qos: int = 0, max_queue: int = 1000,
                 connect_timeout: float = 10.0, start: bool = False, *,
                 client_id: str | None = None, **kwargs: Any) -> None:
        check_mqtt_args("from_mqtt", host, port, topic, keepalive, qos)
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise ValueError(f"from_mqtt(): max_queue must be an int >= 1, got {max_queue!r}")
        if not connect_timeout > 0:
            raise ValueError(f"from_mqtt(): connect_timeout must be > 0 seconds, got "
                             f"{connect_timeout!r}")
        if client_id is not None and (not isinstance(client_id, str) or not client_id):
            raise ValueError(f"from_mqtt(): client_id must be a non-empty str or None (a "
                             f"session of the run's own), got {client_id!r}")
        self.host, self.port, self.topic = host, port, topic
        self.keepalive, self.qos = keepalive, qos
        self.client_kwargs = dict(client_kwargs or {})
        self.user, self.pw = user, pw
        self.max_queue = max_queue
        self.connect_timeout = connect_timeout
        self.client_id = client_id
        #: The paho client while running, else None.
        self.client: Any = None
        #: Resolved when the broker confirms the subscription (a concurrent future).
        self.subscribed: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._queue: queue.Queue[Any] = queue.Queue(max_queue)
        self._run_loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        # Messages not emitted at stop, and those of them the broker delivers again.
        self._dropped = self._kept = 0
        # The run's own persistent session (qos > 0, no client_id), ended at stop.
        self._session: str | None = None
        self._connected = False
        # What ends the run after the subscription (paho's thread cannot raise it).
        self._failure: Exception | None = None
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
            self._not_subscribed(refused_error(self._label(), self.host, self.port, reason))
            return
        if self.qos and self._connected and not flags.session_present:
            logger.warning("%s: the broker at %s:%s lost the MQTT session: messages published "
                           "while it reconnected are lost", self._label(), self.host, self.port)
        self._connected = True
        try:
            client.subscribe(self.topic, self.qos)  # again after each reconnection
        except Exception as e:
            # Raised here, it would end paho's thread, and start() would wait for
            # ever: the run fails with it instead.
            error = RuntimeError(f"{self._label()}: cannot subscribe to {self.topic!r}: "
                                 f"{type(e).__name__}: {e}")
            error.__cause__ = e
            self._failure = error
            self._not_subscribed(error)

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
        while not self.stopped:
            try:
                # A timeout only to notice stop() while the queue is full.
                self._queue.put(message, timeout=0.2)
                self._wakeup()
                return
            except queue.Full:
                pass
        self._left(client, message)

    def _left(self, client: Any, message: Any) -> None:
        """Count a message not emitted (the run stops); acknowledge it if at qos 2.

        The broker never sends a qos 2 message again (paho confirmed its
        receipt): unacknowledged, it would only hold one of the session's
        few places for messages in flight.
        """
        self._dropped += 1
        if message.qos == 1 and self.client_id is not None:
            self._kept += 1
        elif message.qos == 2 and client is not None:
            client.ack(message.mid, message.qos)

    def _wakeup(self) -> None:
        loop, wake = self._run_loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    # The run, on the source's loop.

    def _broken(self) -> Exception | None:
        """Why the run must end: no subscription, or a failure on paho's thread."""
        if self.subscribed.done():
            error = self.subscribed.exception()
            if isinstance(error, Exception):
                return error
        return self._failure

    async def _run_async(self) -> None:
        self._run_loop = asyncio.get_running_loop()
        self._wake = wake = asyncio.Event()
        self._dropped = self._kept = 0
        self._failure = None
        self._connected = False
        persistent = self.qos > 0
        # A persistent session needs an id that stays the same across paho's
        # reconnections; one of this run's own (23 characters, letters and
        # digits, which every MQTT 3.1.1 broker accepts) when none is given.
        self._session = (f"streams{uuid.uuid4().hex}"[:23]
                         if persistent and not self.client_id else None)
        client = self.client = mqtt_client(
            "from_mqtt", self.user, self.pw, client_id=self.client_id or self._session or "",
            clean_session=not persistent, manual_ack=persistent)
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        client.connect_async(self.host, self.port, self.keepalive, **self.client_kwargs)
        client.loop_start()
        try:
            # Messages are taken before the subscription is confirmed: a resumed
            # session may deliver more than max_queue of them first, and paho
            # reads the confirmation only once they are taken.
            while not self.stopped:
                broken = self._broken()
                if broken is not None:
                    raise broken
                try:
                    message = self._queue.get_nowait()
                except queue.Empty:
                    wake.clear()
                    if self._queue.empty() and self._broken() is None:
                        await wake.wait()
                    continue
                pending = self._push(message)
                if pending is not None:
                    await pending
                if message.qos:  # contract 9: acknowledged once its work is done
                    client.ack(message.mid, message.qos)
        finally:
            await self._disconnect(client)

    async def _disconnect(self, client: Any) -> None:
        self.stopped = True  # paho's thread queues no more: see _on_message
        self._take_left(client)  # while connected: qos 2 ones are acknowledged
        client.disconnect()
        # Joins paho's thread, which may be waiting a moment on a full queue.
        await asyncio.to_thread(client.loop_stop)
        self.client = None
        self._take_left(None)  # queued as stop() came, too late to acknowledge
        if self._session is not None and self._connected:
            await asyncio.to_thread(self._end_session, self._session)
        left, kept = self._dropped, self._kept
        if left:
            again = (f"; the broker delivers {'them' if kept == left else kept} again to the "
                     f"next run with client_id {self.client_id!r}" if kept else "")
            logger.warning("%s stopped with %d received message(s) not emitted%s",
                           self._label(), left, again)

    def _take_left(self, client: Any) -> None:
        while True:
            try:
                self._left(client, self._queue.get_nowait())
            except queue.Empty:
                return

    def _end_session(self, client_id: str) -> None:
        """Have the broker discard the run's own session, which nobody will resume.

        MQTT 3.1.1 sessions do not expire: left there, it would queue every
        message of the topic for ever. Connecting again with its id and a
        clean session discards it.
        """
        client = mqtt_client("from_mqtt", self.user, self.pw, client_id=client_id)
        try:
            client.connect(self.host, self.port, self.keepalive, **self.client_kwargs)
            reason = connack(client, self.connect_timeout)
            if reason is not None and not reason.is_failure:
                client.disconnect()
                client.loop_stop()
        except Exception:  # the broker is gone: said below
            reason = None
        ended = reason is not None and not reason.is_failure
        if not ended:
            logger.warning("%s could not end its MQTT session %r at %s:%s: the broker keeps "
                           "it, and queues the topic's messages for it, until it expires it",
                           self._label(), client_id, self.host, self.port)

    def stop(self) -> Any:
        """Stop after the element in progress and disconnect.

        With no loop running in the caller, waits until disconnected.
        """
        end = super().stop()
        self._wakeup()
        task = self._task
        from ..loop_thread import in_loop_thread

        if (isinstance(task, concurrent.futures.Future) and self._run_loop_of_caller() is None
                and not in_loop_thread()):
            try:
                task.result(2 * self.connect_timeout)  # disconnect, and end a session
            except Exception:
                pass
            return None
        return end
