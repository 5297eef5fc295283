"""``Stream.from_kafka_batched``: a Kafka topic read in per-partition batches, as streamz does.

A source plans the batches: each poll it emits ``(consumer_params, topic,
partition, keys, low, high)`` for the offsets of every partition not yet
planned, up to its high watermark (at most ``max_batch_size`` a partition;
the broker is asked for the watermark when a batch would reach the one last
known), and :func:`get_message_batch` reads one such range. In-process
both run here; with ``dask=True`` the plans are scattered and the reads run
on the Dask workers, so reading grows with the workers (the client only
plans offsets).

Offsets are committed to the consumer group once every downstream step for
the batches planned has finished: with Dask, once ``gather()`` has delivered
their results (at least once); each poll then waits for that. Without a
group, nothing is committed and the next batches are planned while the
last ones are read. With a :class:`~streams.state.Checkpointer`
the positions are part of each checkpoint (taken after the batches
in flight have come back), for exactly-once restarts. A partition's position
moves past a batch once the batch is pushed: a batch whose step failed is
read again when the source is started again.
"""

from __future__ import annotations

import operator
from bisect import bisect_right
from itertools import islice
from typing import Any

from ..clock import get_clock, run_sync
from ..core import Stream
from ..graph import walk
from ..loop_thread import asyncio_loop_running
from ..pending import gather_pending as _gather_pending
from ..spec import register_operator
from .base import Source
from .kafka_config import _import_kafka, kafka_consumer_config
from .kafka_readers import range_reader

__all__ = ["FromKafkaBatched", "from_kafka_batched", "get_message_batch"]


def _seconds(interval: Any) -> float:
    """``"1s"``, ``"250ms"``, ``"2m"`` or a number, in seconds.

    Examples
    --------
    >>> _seconds("1s"), _seconds("250ms"), _seconds(0.5)
    (1.0, 0.25, 0.5)
    """
    if isinstance(interval, (int, float)) and not isinstance(interval, bool):
        return float(interval)
    text = str(interval).strip()
    for unit, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


def get_message_batch(kafka_params: dict[str, Any], topic: str, partition: int, keys: bool,
                      low: int, high: int, timeout: float | None = None) -> list[Any]:
    """The messages of ``topic``'s ``partition`` from offset ``low`` to ``high`` (inclusive).

    Values (``bytes``), or ``{"key": ..., "value": ...}`` dicts with ``keys``.
    Waits for the range to be readable, at most ``timeout`` seconds if given.
    The consumer is kept assigned for the process's next read, which goes on
    from ``high + 1`` without restarting its fetching (see
    :mod:`~streams.sources.kafka_readers`).
    """
    ck = _import_kafka("from_kafka_batched()")
    out: list[Any] = []
    clock = get_clock()
    deadline = None if timeout is None else clock.now() + timeout
    at = [ck.TopicPartition(topic, partition)]
    with range_reader(kafka_params, topic, partition, low) as reader:
        consumer = reader.consumer
        expected = low  # the offset of the next message of the range
        held, reader.held = reader.held, []
        while expected <= high and (deadline is None or clock.now() < deadline):
            # Never more than the range's remaining offsets: what the consumer
            # delivers past ``high`` is the next range's, read from here too.
            # consume() returns at that count or at its timeout: a range that
            # ends in offsets no message holds (below) never reaches its count,
            # so the wait is short (a 1 s wait made every range of a topic
            # written in transactions take a second).
            msgs = held or consumer.consume(min(high - expected + 1, 10_000), timeout=0.01)
            held = []
            take = 0 if keys else _taken_whole(ck.Message, msgs, partition, expected, high)
            if take:
                # The common case, tested and taken a batch at a time.
                out.extend(map(ck.Message.value, islice(msgs, take)))
                expected = msgs[take - 1].offset() + 1
                msgs = msgs[take:]  # past ``high``, if any: the loop keeps them
            for i, msg in enumerate(msgs):
                if msg.error() is not None:
                    raise ck.KafkaException(msg.error())
                off = msg.offset()
                if msg.partition() != partition or off < expected:
                    continue  # of an assignment before this one: librdkafka drops those
                if off > high:  # after offsets no message holds: the next range's
                    reader.held = msgs[i:]
                    expected = high + 1
                    break
                out.append({"key": msg.key(), "value": msg.value()} if keys else msg.value())
                expected = off + 1
            # The range may end in offsets no message holds (a transaction's
            # commit marker, an aborted transaction's messages): the
            # consumer's position passes them.
            if expected <= high and consumer.position(at)[0].offset > high:
                expected = high + 1
        reader.next = expected
    return out


def _taken_whole(message: Any, msgs: list[Any], partition: int, low: int, high: int) -> int:
    """How many of ``msgs``, from the first, :func:`get_message_batch` takes at once; 0: none.

    Where ``msgs`` hold no error, all are of ``partition`` and their offsets
    ascend strictly from ``low`` or later, the loop would append those up to
    ``high`` (and keep the rest for the next range): those. A batch of a
    topic written in transactions reaches past ``high`` so, as its range
    counts commit markers, which are never delivered. Otherwise 0: the
    batch goes through the loop. Tested with one C-level pass of each method
    over the batch (``map(message.offset, msgs)``...), a fraction of that
    loop's cost.
    """
    if not msgs or next(filter(None, map(message.error, msgs)), None) is not None:
        return 0  # (an error is a KafkaError: always true)
    offsets = list(map(message.offset, msgs))
    if (low <= offsets[0] and all(map(operator.lt, offsets, islice(offsets, 1, None)))
            and set(map(message.partition, msgs)) == {partition}):
        return bisect_right(offsets, high)
    return 0


class FromKafkaBatched(Source[Any]):
    """Plan per-partition batches of a Kafka topic; see :func:`from_kafka_batched`.

    Examples
    --------
    >>> source = FromKafkaBatched("events", {"bootstrap.servers": "h:9092", "group.id": "etl"})
    >>> source.describe().operator
    'from_kafka_batched'
    """

    __slots__ = ("_barriers", "_known", "consumer_params", "group", "keys", "max_batch_size",
                 "npartitions", "poll_interval", "positions", "refresh_partitions", "topic")
    _operator = "from_kafka_batched"
    _replayable = True
    # The constructor's own parameters: a description builds the source back.
    _params = ("topic", "consumer_params", "poll_interval", "npartitions",
               "refresh_partitions", "max_batch_size", "keys")
    _state = ("positions",)

    @property
    def _identity_params(self) -> tuple[str, ...]:
        """What a checkpoint records of the input it covers (see streams.snapshot).

        The topic, and the group when there is one: what checkpoints written
        before recorded (the text parameters then described), so they keep
        restoring.
        """
        return ("topic",) if self.group is None else ("topic", "group")

    def __init__(self, topic: str, consumer_params: dict[str, Any], poll_interval: Any = "1s",
                 npartitions: int | None = None, refresh_partitions: bool = False,
                 max_batch_size: int = 10000, keys: bool = False, start: bool = False,
                 **kwargs: Any) -> None:
        _import_kafka("from_kafka_batched()")
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"from_kafka_batched(): topic must be a topic name, got {topic!r}")
        if npartitions is not None and not _count(npartitions):
            raise ValueError(f"from_kafka_batched(): npartitions must be an int >= 1 (or None: "
                             f"ask the broker), got {npartitions!r}")
        if not _count(max_batch_size):
            raise ValueError(f"from_kafka_batched(): max_batch_size must be an int >= 1, got "
                             f"{max_batch_size!r}")
        self.consumer_params = kafka_consumer_config(consumer_params, "from_kafka_batched()")
        self.consumer_params.setdefault("auto.offset.reset", "latest")  # as streamz
        self.topic = topic
        self.group: str | None = self.consumer_params.get("group.id")
        self.poll_interval = _seconds(poll_interval)
        self.npartitions = npartitions
        self.refresh_partitions = refresh_partitions
        self.max_batch_size = max_batch_size
        self.keys = keys
        #: The next offset to plan of each partition.
        self.positions: dict[int, int] = {}
        # Each partition's (low, high) watermarks when last asked: a query is
        # a round trip to the broker, needed only when a batch would reach it.
        self._known: dict[int, tuple[int, int]] = {}
        self._barriers: list[Stream[Any]] = []
        super().__init__(start=start, **kwargs)

    def _connect(self) -> Any:
        ck = _import_kafka("from_kafka_batched()")
        params = {**self.consumer_params, "enable.auto.commit": False}
        params.setdefault("group.id", "streams-unused")
        return ck.Consumer(params)

    def _partitions(self, consumer: Any) -> int:
        if self.npartitions is None or self.refresh_partitions:
            meta = consumer.list_topics(self.topic, timeout=30).topics.get(self.topic)
            if meta is None or meta.error is not None:
                raise RuntimeError(f"{self._label()}: topic {self.topic!r} does not exist")
            self.npartitions = max(self.npartitions or 0, len(meta.partitions))
        return self.npartitions

    def _plan(self, consumer: Any) -> list[tuple[Any, ...]]:
        """The next batch of each partition with offsets not yet pushed.

        ``positions`` moves past a batch only once it is pushed
        (:meth:`_pushed`): a batch whose push failed is planned again when
        the source is started again.
        """
        ck = _import_kafka("from_kafka_batched()")
        n = self._partitions(consumer)
        missing = [p for p in range(n) if p not in self.positions]
        if missing and self.group is not None:
            for tp in consumer.committed([ck.TopicPartition(self.topic, p) for p in missing],
                                         timeout=30):
                if tp.offset >= 0:
                    self.positions[tp.partition] = tp.offset
        plans = []
        for p in range(n):
            known = self._known.get(p)
            if (known is None or p not in self.positions
                    or known[1] - self.positions[p] < self.max_batch_size):
                known = consumer.get_watermark_offsets(ck.TopicPartition(self.topic, p),
                                                       timeout=30)
                self._known[p] = known
            low, high = known
            if p not in self.positions:
                latest = self.consumer_params["auto.offset.reset"] in ("latest", "largest", "end")
                self.positions[p] = high if latest else low
            start = max(self.positions[p], low)
            end = min(high, start + self.max_batch_size)
            if end > start:
                plans.append((self.consumer_params, self.topic, p, self.keys, start, end - 1))
        return plans

    def _pushed(self, plan: tuple[Any, ...]) -> None:
        """Every step for ``plan`` finished (or, with Dask, it was scattered): plan past it."""
        self.positions[plan[2]] = plan[5] + 1

    def _done(self, consumer: Any, n: int) -> Any:
        """The ``n`` batches of a poll are pushed: checkpoint, or flush and commit.

        None, or on a loop an awaitable of the flush and the commit: the
        flush of a node that buffers output (``to_kafka``) is awaited there,
        never run to completion inside the running loop.
        """
        ckpt = self._checkpointer
        if ckpt is not None:
            return ckpt.step(n)
        if self.group is None:
            # Nothing to commit: the next batches are planned while these are
            # read (scatter() bounds what is in flight); the end flushes all.
            return None
        flushed = _gather_pending([b._barrier() for b in self._barriers])  # type: ignore[attr-defined]
        if flushed is not None:
            if asyncio_loop_running():
                return self._commit_after(flushed, consumer)
            run_sync(flushed)
        self._commit(consumer)
        return None

    async def _commit_after(self, flushed: Any, consumer: Any) -> None:
        await flushed
        self._commit(consumer)

    def _commit(self, consumer: Any) -> None:
        ck = _import_kafka("from_kafka_batched()")
        consumer.commit(offsets=[ck.TopicPartition(self.topic, p, o)
                                 for p, o in self.positions.items()], asynchronous=False)

    def _run_sync(self) -> None:
        consumer = self._connect()
        self._barriers = [n for n in walk(self) if hasattr(n, "_barrier")]
        try:
            while not self.stopped:
                plans = self._plan(consumer)
                if not plans:
                    break
                for plan in plans:
                    pending = self._push(plan)
                    if pending is not None:
                        run_sync(pending)
                    self._pushed(plan)
                pending = self._done(consumer, len(plans))
                if pending is not None:
                    run_sync(pending)
            else:
                return
            self._end_sync()
        finally:
            consumer.close()

    async def _run_async(self) -> None:
        consumer = self._connect()
        self._barriers = [n for n in walk(self) if hasattr(n, "_barrier")]
        clock = get_clock()
        try:
            while not self.stopped:
                plans = self._plan(consumer)
                if not plans:
                    await clock.sleep(self.poll_interval)
                    continue
                if self._checkpointer is not None:
                    self._checkpointer.begin()
                for plan in plans:
                    pending = self._push(plan)
                    if pending is not None:
                        await pending
                    self._pushed(plan)
                pending = self._done(consumer, len(plans))
                if pending is not None:
                    await pending
        finally:
            consumer.close()


def _count(n: Any) -> bool:
    """Whether ``n`` is an int >= 1 (not a bool, not a float)."""
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


# Described and built back by its name (streams.spec.build); the method on
# Stream is streamz's factory below, which adds the reading step.
register_operator(FromKafkaBatched)


def from_kafka_batched(topic: str, consumer_params: dict[str, Any], poll_interval: Any = "1s",
                       npartitions: int | None = None, refresh_partitions: bool = False,
                       start: bool = False, dask: bool = False, max_batch_size: int = 10000,
                       keys: bool = False, engine: str | None = None, client: Any = None,
                       **kwargs: Any) -> Stream[Any]:
    """Emit lists of messages of a Kafka topic, one per partition per poll (streamz's signature).

    Returns the node emitting the batches (``source.starmap(get_message_batch)``,
    after ``scatter()`` with ``dask=True``: gather() it); ``.start()`` on it
    starts the source. ``auto.offset.reset`` defaults to ``"latest"``, as in
    streamz. Offsets are committed after every downstream step for the
    batches has finished (see the module docs). ``engine``: streamz's
    ``"cudf"`` (batches as cuDF frames) is not supported; None, the default,
    is taken. ``client``: the Dask client of ``dask=True`` (default: the
    current one).

    Examples
    --------
    >>> from streams import Stream
    >>> batches = Stream.from_kafka_batched("events", {"bootstrap.servers": "h:9092",
    ...                                                "group.id": "etl"})
    >>> [u.describe().operator for u in batches.upstreams]
    ['from_kafka_batched']
    """
    if engine is not None:
        raise ValueError(f"from_kafka_batched(): engine={engine!r} is not supported (streamz "
                         "reads batches into cuDF frames with engine='cudf'); leave it None for "
                         "lists of messages")
    source = FromKafkaBatched(topic, consumer_params, poll_interval=poll_interval,
                              npartitions=npartitions, refresh_partitions=refresh_partitions,
                              max_batch_size=max_batch_size, keys=keys, **kwargs)
    node: Stream[Any] = source
    if dask:
        # Batching asked for: reads of several partitions overlap on the
        # workers (a plain scatter() would wait for each read in turn). The
        # engine joins as a plugin (streams.plugins): without dask, its error
        # names the extra to install.
        node = source.scatter(client=client, batch_size=1000)
    batches = node.starmap(get_message_batch)
    if start:
        source.start()
    return batches


setattr(Stream, "from_kafka_batched",  # noqa: B010 - declared in streams/_api.py
        staticmethod(from_kafka_batched))
