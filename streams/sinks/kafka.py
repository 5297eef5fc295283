"""``to_kafka``: write elements to a Kafka topic through confluent-kafka.

Messages are handed to the producer's queue (librdkafka batches and sends
them in its own thread); delivery is confirmed at a *barrier*: before a
source commits the offsets of what produced them, before a checkpoint, and
when the stream closes. A message that could not be delivered fails the
node there, naming it, through the node's error policy, as do a producer
that cannot be opened (its configuration, bar what depends on where it runs,
is checked when the graph is built) and a transaction that cannot be
committed.

Under ``from_kafka`` in a consumer group without a loop, a batch's
messages are held and handed over in one ``produce_batch()`` call at the
batch's end (and at every barrier, ``flush()`` and close), its callback
passed once a call instead of once a message; elsewhere each element is
produced as it comes. Under ``from_kafka`` without a loop the step for a
``bytes`` element is written into the source's compiled loop
(:func:`~streams.sinks.kafka_batches.fuse_held`), and delivery reports are
served at each batch's end. A message the producer refuses fails the node,
naming it, as a failed delivery does.

With ``transactional=True`` (and a ``transactional.id`` in the producer
configuration) each barrier commits a Kafka transaction, and the sink takes
part in checkpoints for exactly-once output: every message carries the
headers ``streams-writer`` (the transactional id) and ``streams-seq`` (its
number in the sink's output), the checkpoint records how many messages the
sink had written and where the topic's partitions ended, and a restored
sink reads the committed messages written after that (``read_committed``)
and does not write again those the replay produces a second time. Outputs
must then be a deterministic function of the input (as for every
exactly-once sink). A fresh run with no checkpoint reads the whole topic
for its writer's messages: give a new pipeline (a new checkpoint directory)
a new ``transactional.id``.
"""

from __future__ import annotations

from typing import Any

from ..clock import get_clock, run_sync
from ..core import Stream
from ..fusion import Fuser
from ..loop_thread import asyncio_loop_running
from ..pending import gather_pending
from .kafka_batches import POLL_EVERY, Batch, fuse_held, send_held, send_held_now
from .kafka_producer import (
    begin_transaction,
    check_producer_config,
    commit_transaction,
    message_part,
    open_producer,
)
from .kafka_recovery import SEQ, WRITER, already_written

__all__ = ["ToKafka"]


@Stream.register_api()
class ToKafka(Stream[Any]):
    """Write each element (``str`` or ``bytes``) as a message of a Kafka topic.

    Delivered messages' values are emitted downstream, as in streamz.

    Parameters
    ----------
    topic : str
        The topic written to.
    producer_config : dict
        librdkafka settings, at least ``bootstrap.servers``.
    transactional : bool
        Commit a transaction at each barrier and take part in checkpoints
        for exactly-once output (see the module docs); needs
        ``transactional.id`` in ``producer_config``.
    key : callable, optional
        ``key(x)`` gives the message's key (``str`` or ``bytes``), which
        picks its partition.

    Examples
    --------
    Nothing connects before the first element, so a graph builds without a broker:

    >>> from streams import Stream
    >>> sink = Stream().map(str).to_kafka("numbers", {"bootstrap.servers": "localhost:9092"})
    >>> spec = sink.describe()
    >>> spec.operator, spec.params["topic"]
    ('to_kafka', 'numbers')
    >>> Stream().to_kafka("numbers", {"bootstrap.servers": "h:9092"}, transactional=True)
    Traceback (most recent call last):
    ...
    ValueError: to_kafka(transactional=True) needs a 'transactional.id' in producer_config, ...

    Against a running broker (not run here)::

        source = Stream.from_iterable(range(10))
        sink = source.map(str).to_kafka("numbers", {"bootstrap.servers": "localhost:9092"})
        source.start()      # closing the stream flushes the producer
    """

    __slots__ = (
        "_all_reports",
        "_batch",
        "_batch_ends",
        "_defer",
        "_done",
        "_errors_seen",
        "_held",
        "_in_txn",
        "_marks_seen",
        "_must_abort",
        "_produce_now",
        "_producer",
        "_raised",
        "_sent",
        "_skip",
        "key",
        "marks",
        "producer_config",
        "topic",
        "transactional",
        "written",
    )
    _operator = "to_kafka"
    _params = ("topic", "producer_config", "transactional", "key")
    _state = ("written", "marks")
    _state_params = ("topic",)
    _graphviz_shape = "trapezium"

    def __init__(self, upstream: Stream[Any], topic: str, producer_config: dict[str, Any],
                 transactional: bool = False, key: Any = None, **kwargs: Any) -> None:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "to_kafka() needs confluent-kafka: pip install 'streams[kafka]'") from e
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"to_kafka(): topic must be a topic name, got {topic!r}")
        if not isinstance(producer_config, dict) or "bootstrap.servers" not in producer_config:
            raise ValueError("to_kafka(): producer_config must be a dict with "
                             "'bootstrap.servers' (host:port of a broker)")
        if transactional and not producer_config.get("transactional.id"):
            raise ValueError("to_kafka(transactional=True) needs a 'transactional.id' in "
                             "producer_config, stable across restarts of the pipeline")
        if key is not None and not callable(key):
            raise TypeError(f"to_kafka(): key must be a function of the element, got {key!r}")
        check_producer_config(producer_config)
        self.topic = topic
        self.producer_config = dict(producer_config)
        self.transactional = transactional
        self.key = key
        #: Messages written so far (the next message's ``streams-seq``).
        self.written = 0
        #: ``{partition: offset}`` past the last message delivered, at the last
        #: barrier: kept by a transactional sink (a restored one reads from there).
        self.marks: dict[int, int] | None = None
        self._marks_seen: dict[int, int] = {}
        self._producer: Any = None
        self._skip: set[int] = set()
        self._errors_seen: list[tuple[Any, BaseException]] = []
        #: Raised downstream of a delivery: for the producer to raise (kafka_producer).
        self._raised: list[Exception] = []
        # Messages produced, but those fused code produces (_produce_now: only
        # failures reported; _open() counts every earlier message as reported).
        self._sent = 0
        self._done = 0  # delivery reports received
        # Whether the producer reports every delivery, or only failures.
        self._all_reports = False
        # While a source confirms writes a batch late (_barrier_send), the
        # messages written since the last token.
        self._batch: Batch | None = None
        self._defer = False
        # Set (with _deferring) by a source that calls _barrier_send at the
        # end of every batch it pushes: the batch's messages are then held,
        # in order, and handed over in one call (see the module docs).
        self._batch_ends = False
        self._held: list[dict[str, Any]] = []
        # While a source pushes batches without tokens: the producer's
        # produce(), which fused code calls for each bytes element.
        self._produce_now: Any = None
        self._in_txn = False
        self._must_abort = False  # a transaction failed to commit: abort it before the next
        Stream.__init__(self, upstream, **kwargs)

    # -- the producer ------------------------------------------------------------

    def _open(self) -> Exception | None:
        """Open the producer (see :func:`~streams.sinks.kafka_producer.open_producer`)."""
        return open_producer(self)

    def _already_written(self) -> set[int]:
        """The ``streams-seq`` numbers this writer committed after the restored checkpoint."""
        return already_written(self)

    def _delivered(self, err: Any, msg: Any) -> None:
        self._done += 1
        if err is not None:
            self._errors_seen.append((msg.value(), RuntimeError(f"delivery failed: {err}")))
            return
        if self.transactional:  # where a restored writer looks for its messages
            part, off = msg.partition(), msg.offset() + 1
            if off > self._marks_seen.get(part, -1):
                self._marks_seen[part] = off
        if self.downstreams:
            try:
                pending = self._push(msg.value())
                if pending is not None:
                    run_sync(pending)
            except Exception as e:  # not through confluent-kafka: see kafka_producer
                self._raised.append(e)

    # -- writing -------------------------------------------------------------------

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        producer = self._producer
        if producer is None or (self.downstreams and not self._all_reports):
            unopened = self._open()
            if unopened is not None:  # the element is not written
                return self._fail(x, unopened)
            producer = self._producer
        if type(x) is not bytes or self.transactional or self.key is not None:
            return self._write(producer, x)
        # The common case, kept short: it runs once a message.
        batch = self._batch
        try:
            if self._batch_ends:
                held = self._held
                held.append({"value": x})
                return send_held(self) if len(held) >= POLL_EVERY else None
            if batch is None:
                producer.produce(self.topic, x)
            else:
                producer.produce(self.topic, x, on_delivery=batch.delivered)
                batch.sent += 1
        except Exception as e:
            refused = e
        else:
            return self._queued(producer)
        return self._refused(x, refused, x, None, None)

    def _write(self, producer: Any, x: Any) -> Any:
        """:meth:`update` for a key, a transaction or a value to convert."""
        try:
            value = message_part(x)
            key = message_part(self.key(x)) if self.key is not None else None
        except Exception as e:
            return self._fail(x, e)
        headers = None
        if self.transactional:
            seq = self.written
            self.written += 1
            if seq in self._skip:  # committed before the crash: not written again
                self._skip.discard(seq)
                return None
            headers = [(WRITER, str(self.producer_config["transactional.id"])),
                       (SEQ, str(seq))]
        elif self._batch_ends:
            held = self._held
            held.append({"value": value} if key is None else {"value": value, "key": key})
            return send_held(self) if len(held) >= POLL_EVERY else None
        try:
            if self.transactional and not self._in_txn:  # fails once fenced
                begin_transaction(self)
            self._produce(producer, value, key, headers)
        except Exception as e:
            refused = e
        else:
            return self._queued(producer)
        return self._refused(x, refused, value, key, headers)

    def _queued(self, producer: Any) -> Any:
        """A message is queued: every :data:`POLL_EVERY`, serve reports; fail on their errors."""
        self._sent += 1
        if self._sent % POLL_EVERY == 0:
            producer.poll(0)
            if self._errors_seen:
                return self._report()
        return None

    def _refused(self, x: Any, error: Exception, value: Any, key: Any, headers: Any) -> Any:
        """After ``produce()`` raised ``error`` for ``x``: wait for room, or fail the node.

        Called after the ``except`` block, never in it: confluent-kafka 2.16
        keeps the exception being handled when ``produce()`` raises (its
        issue 1266), with its frames and the graph; the next ``produce()``
        (waiting for room), or an error stream's, would do so here.
        """
        if isinstance(error, BufferError):
            return self._produce_when_room(x, value, key, headers)
        return self._fail(x, error)

    def _produce(self, producer: Any, value: Any, key: Any, headers: Any) -> None:
        # headers=None or an on_delivery cost almost as much as the produce:
        # passed only when needed.
        batch = self._batch
        if batch is not None:
            if headers is None:
                producer.produce(self.topic, value, key, on_delivery=batch.delivered)
            else:
                producer.produce(self.topic, value, key, on_delivery=batch.delivered,
                                 headers=headers)
            batch.sent += 1
        elif headers is None:
            producer.produce(self.topic, value, key)
        else:
            producer.produce(self.topic, value, key, headers=headers)

    def _produce_when_room(self, x: Any, value: Any, key: Any, headers: Any) -> Any:
        """The producer's queue is full: wait for room (backpressure), then produce."""
        producer = self._producer
        # Never a produce() or flush() inside an except block (see _refused).
        if asyncio_loop_running():
            return self._produce_async(value, key, headers)
        while True:
            # Sends at once what lingers (a full queue has no use for
            # linger.ms) and serves reports; returns once all is delivered
            # or soon: with only failures reported, poll() would wait its
            # whole timeout however much room was made.
            producer.flush(0.005)
            try:
                self._produce(producer, value, key, headers)
            except BufferError:
                continue
            self._sent += 1
            return None

    async def _produce_async(self, value: Any, key: Any, headers: Any) -> None:
        producer = self._producer
        clock = get_clock()
        while True:
            producer.poll(0)
            try:
                self._produce(producer, value, key, headers)
                self._sent += 1
                return
            except BufferError:
                await clock.sleep(0.005)

    def _report(self) -> Any:
        """Fail the node on each failed delivery seen; the pending work of all routed errors."""
        errors, self._errors_seen = self._errors_seen, []
        return gather_pending([self._fail(x, e) for x, e in errors])

    # -- a source's batches ------------------------------------------------------------

    def _hold_batches(self, on: bool) -> None:
        """A source's batches begin (``on``) or end; set by ``from_kafka`` without a loop.

        The source calls :meth:`_send_held` at the end of every batch it
        pushes. With tokens (a consumer group) a batch's messages are held
        till then, for one ``produce_batch()``; without, fused code produces
        each as it comes. Turned off, what is held is sent (its errors left
        for the next barrier, as a failure may be what turned it off).
        """
        if on:
            if self._producer is None or (self.downstreams and not self._all_reports):
                self._open()  # fused code produces without a step that opens it
            # Unopened, each element goes through update(), which fails it.
            self._batch_ends = self._batch is not None and self._producer is not None
            self._produce_now = None if self._batch_ends or self._producer is None \
                else self._producer.produce
        else:
            self._produce_now = None
            send_held_now(self, report=False)
            self._batch_ends = False

    def _send_held(self) -> None:
        """A batch's end: its messages handed over (or their reports served); raise errors."""
        send_held_now(self)

    def _fusable(self) -> bool:
        return True

    def _fuse(self, f: Fuser, x: str) -> None:
        fuse_held(self, f, x)

    # -- barriers ----------------------------------------------------------------------

    @property
    def _deferring(self) -> bool:
        """Set by a source confirming writes a batch late with tokens (from_redis, from_kafka)."""
        return self._defer

    @_deferring.setter
    def _deferring(self, value: bool) -> None:
        self._defer = value
        if value:
            self._produce_now = None  # each message names its batch's callback
            if self._batch is None:
                self._batch = Batch(self)
            if self._producer is not None and not self._all_reports:
                # A producer that reports the successes the tokens count (if it
                # cannot be opened, the next element's update() fails on it).
                self._open()
        else:
            # What a failed batch held is sent, as what it produced was; a
            # later barrier confirms what is still in flight and reports
            # what failed (raising here would hide the failure that stopped it).
            send_held_now(self, report=False)
            self._batch_ends = False
            self._batch = None

    def _barrier_send(self) -> Any:
        """No loop running: a token for :meth:`_barrier_confirm`, the batch written since the last.

        A source confirms the token a batch or a few later, so the broker
        acknowledges them while the next is processed. A transaction is
        committed here.
        """
        self._send_held()  # the batch's messages, in one call
        batch = self._batch
        self._batch = Batch(self) if self._defer else None
        if self.transactional:
            pending = self._barrier()
            if pending is not None:
                run_sync(pending)
        elif self._producer is not None:
            self._producer.poll(0)
        return batch

    def _barrier_ready(self, token: Any) -> bool:
        """Whether the messages of ``token`` are all acknowledged (serving reports, not waiting)."""
        producer = self._producer
        if token is None:  # written before the source asked for tokens: all of them, then
            return producer is None or len(producer) == 0
        if token.done < token.sent:
            producer.poll(0)
        return bool(token.done >= token.sent)

    def _barrier_confirm(self, token: Any) -> None:
        """Wait for the delivery reports of the messages of ``token``; raise their errors."""
        producer = self._producer
        if token is None:  # written before the source asked for tokens
            if producer is not None:
                producer.flush()
        else:
            while token.done < token.sent:
                producer.poll(0.1)
            self._done += token.done - token.passed  # the successes only the token counted
        if self._errors_seen:
            pending = self._report()
            if pending is not None:  # pragma: no cover - a routed error on an async stream
                run_sync(pending)
        if self._done >= self._sent:
            self.marks = dict(self._marks_seen)

    def _barrier(self) -> Any:
        """Deliver everything produced (and commit the transaction); before acks and checkpoints."""
        producer = self._producer
        if producer is None:
            if self.marks is None:
                self.marks = {}
            return None
        sent = send_held(self)
        if asyncio_loop_running():
            return self._barrier_async(sent)
        if sent is not None:
            run_sync(sent)
        producer.flush()  # serves delivery reports: runs the nodes downstream
        return self._settled()

    async def _barrier_async(self, sent: Any = None) -> None:
        if sent is not None:
            await sent
        producer = self._producer
        clock = get_clock()
        while producer.flush(0) > 0:
            await clock.sleep(0.002)
        pending = self._settled()
        if pending is not None:
            await pending

    def _settled(self) -> Any:
        pending = self._report() if self._errors_seen else None
        if self.transactional and self._in_txn:
            uncommitted = commit_transaction(self)
            if uncommitted is not None:  # no element of its own: the transaction's
                pending = gather_pending([pending, self._fail(None, uncommitted)])
        self.marks = dict(self._marks_seen)
        return pending

    def flush(self, timeout: float = -1) -> None:
        """Deliver every message produced (streamz's ``flush``)."""
        if self._producer is not None:
            send_held_now(self)
            self._producer.flush(timeout)
            self._settled()

    def _flush(self) -> Any:
        return self._barrier()

    def restore(self, state: dict[str, Any]) -> None:
        """Resume counting messages from ``state``; the next write skips what was committed."""
        super().restore(state)
        self.marks = dict(self.marks) if self.marks is not None else None
        self._marks_seen = dict(self.marks or {})
