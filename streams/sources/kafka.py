"""``Stream.from_kafka``: the messages of Kafka topics, through confluent-kafka.

Messages are read in batches (``consume(batch)``) and pushed one by one,
a batch in one call of a loop compiled with the graph's steps
(:mod:`streams.fused_loop`); offsets are kept per partition (the next
offset to read) and committed only once every downstream step for a batch
has finished.

Delivery guarantees:

* with a consumer group (``group.id`` in ``consumer_params``) and no
  checkpoint, at least once: a batch's offsets are committed after every
  downstream step for it has finished and the nodes that buffer output
  (``to_kafka``, ``sink_to_redis``...) have flushed it; a rebalance commits
  the offsets of what was processed before the partitions go, and they are
  forgotten then: the next owner's commits are the partitions' offsets,
  where they resume should they come back. Without a
  loop, ``to_kafka``'s output of a batch is confirmed by the broker's
  acknowledgement of that batch's own messages while the next batches are
  processed (a few at most), and the offsets follow. After a failure
  nothing more is committed (not even by leaving the group on close);
* with a :class:`~streams.state.Checkpointer`, exactly once: the offsets are
  part of each checkpoint and a restarted pipeline reads from them, whatever
  the group's committed offsets say; the group's offsets are committed only
  once a checkpoint covering them is on disk (so tools that watch the group
  see progress). Exactly-once output needs a sink that takes part:
  ``sink_to_durable_textfile`` or ``to_kafka(..., transactional=True)``.
  A checkpoint is one process's: run one consumer per group (a rebalance to
  another process hands it the group's offsets, which lag the checkpoint).

Without a group the topics' partitions are assigned directly (no group to
join) and nothing is committed: the checkpoint is then the only record.

Without a running loop the source reads until every partition is at its
end, then closes the stream. On a loop it follows the topics until
``stop()``, polling every ``poll_interval`` seconds when there is nothing to
read, and awaits each element through the graph (a slow sink pauses
consumption; at most ``batch`` messages are held).

Here lives the source and its reading; what is committed when lives in
:mod:`streams.sources.kafka_commits`, and checking its configuration and
where it starts (shared with ``from_kafka_batched``) in
:mod:`streams.sources.kafka_config`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..clock import get_clock
from ..core import Stream
from ..fused_loop import EXHAUSTED, STOPPED, counting, loop_for, take_push
from ..loop_thread import asyncio_loop_running
from .kafka_commits import KafkaCommits
from .kafka_config import Partition, _import_kafka, kafka_consumer_config, start_offsets

__all__ = ["FromKafka", "kafka_consumer_config", "start_offsets"]


@Stream.register_api(staticmethod)
class FromKafka(KafkaCommits):
    """Emit the messages of Kafka topics (their values, as ``bytes``).

    Parameters
    ----------
    topics : list of str (or one str)
        The topics to read.
    consumer_params : dict
        librdkafka settings: ``bootstrap.servers`` and, to read as a member
        of a consumer group, ``group.id``. ``enable.auto.commit`` is turned
        off: offsets are committed by the source (see the module docs). An
        incremental rebalance protocol (``partition.assignment.strategy``
        ``cooperative-sticky``) moves only the partitions that change owner.
    poll_interval : float
        Seconds to wait when there is nothing to read (on a loop).
    start : bool
        Start right away (needs a running loop), as in streamz.
    offset : str, int, dict, datetime or float, optional
        Where to begin when neither a checkpoint nor (with ``"committed"``,
        the default) the group has an offset: ``"earliest"``, ``"latest"``,
        an offset, ``{partition: offset}``, or a time.
    batch : int
        Messages read per call to the broker client.
    keys : bool
        Emit ``{"key": ..., "value": ...}`` dicts instead of values.
    with_meta : bool
        Emit dicts with ``topic``, ``partition``, ``offset``, ``timestamp``
        (milliseconds), ``key`` and ``value``.

    Examples
    --------
    Building the graph needs no broker (nothing connects before ``start()``):

    >>> from streams import Stream, describe
    >>> source = Stream.from_kafka(["events"], {"bootstrap.servers": "localhost:9092",
    ...                                         "group.id": "etl"}, offset="earliest")
    >>> _ = source.map(len).sink_to_list()
    >>> [spec.operator for spec in describe(source).nodes]
    ['from_kafka', 'map', 'sink_to_list']

    Against a running broker (not run here)::

        source.map(process).to_kafka("results", {"bootstrap.servers": "localhost:9092"})
        source.start()     # without a loop: reads to the end, then closes
    """

    __slots__ = ("_cooperative", "_eof", "_handed_over", "_not_before", "batch",
                 "consumer_params", "group", "keys", "offset", "offsets", "poll_interval",
                 "topics", "with_meta")
    _operator = "from_kafka"
    _replayable = True
    _params = ("topics", "consumer_params", "poll_interval", "offset", "batch", "keys",
               "with_meta")
    #: What a checkpoint records of the input it covers (see streams.snapshot).
    _identity_params = ("topics", "group")
    _state = ("offsets",)

    def __init__(self, topics: Any, consumer_params: dict[str, Any], poll_interval: float = 0.1,
                 start: bool = False, offset: Any = None, batch: int = 1000, keys: bool = False,
                 with_meta: bool = False, **kwargs: Any) -> None:
        _import_kafka("from_kafka()")
        if isinstance(topics, str):
            topics = [topics]
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise ValueError(f"from_kafka(): topics must be a non-empty list of topic names, "
                             f"got {topics!r}")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"from_kafka(): batch must be an int >= 1, got {batch!r}")
        if not poll_interval > 0:
            raise ValueError(f"from_kafka(): poll_interval must be > 0 seconds, "
                             f"got {poll_interval!r}")
        self.consumer_params = kafka_consumer_config(consumer_params, "from_kafka()")
        self.topics = list(topics)
        self.group: str | None = self.consumer_params.get("group.id")
        self.poll_interval = poll_interval
        self.offset = start_offsets(offset, "from_kafka()")
        self.batch = batch
        self.keys = keys
        self.with_meta = with_meta
        #: The next offset to read of each partition seen: ``{(topic, partition): offset}``.
        self.offsets: dict[Partition, int] = {}
        # Partitions whose end was reported: the offset it was at. One is at
        # its end while nothing was read past that (see _at_end).
        self._eof: dict[Partition, int] = {}
        # Partitions started at a time: the time (ms), until a message at or after it.
        self._not_before: dict[Partition, int] = {}
        # Partitions a rebalance took away (without a checkpoint): another
        # member may have read on, so they resume at the group's committed
        # offset, not at ``offset``.
        self._handed_over: set[Partition] = set()
        # An incremental (cooperative) rebalance protocol: a rebalance adds
        # and takes away partitions, never assigns the whole set anew.
        strategy = str(self.consumer_params.get("partition.assignment.strategy", ""))
        self._cooperative = ("cooperative" in strategy
                             or self.consumer_params.get("group.protocol") == "consumer")
        super().__init__(start=start, **kwargs)

    def snapshot(self) -> dict[str, Any]:
        """The next offset of every partition, and which topics and group they belong to."""
        return {"offsets": dict(self.offsets), "covers": (sorted(self.topics), self.group)}

    def restore(self, state: dict[str, Any]) -> None:
        """Resume from ``state``'s offsets; refuse the offsets of other topics or another group."""
        covers = state.get("covers")
        if covers is not None and tuple(covers) != (sorted(self.topics), self.group):
            from ..state import CheckpointError

            raise CheckpointError(
                f"{self._label()}: the checkpoint covers topics {covers[0]} of group "
                f"{covers[1]!r}, not topics {sorted(self.topics)} of group {self.group!r}; "
                "use another checkpoint directory for another source")
        super().restore(state)
        self.offsets = dict(self.offsets)

    # -- the consumer ----------------------------------------------------------

    def _connect(self, to_the_end: bool = False) -> Any:
        ck = _import_kafka("from_kafka()")
        config = {**self.consumer_params, "enable.auto.commit": False,
                  "enable.partition.eof": True}
        if to_the_end:
            # The end of a partition is known only from an empty fetch, which
            # the broker holds up to fetch.wait.max.ms (500 by default): each
            # run ended with that wait (about 18 ms with 20). While a partition
            # has messages to read the broker answers at once.
            config.setdefault("fetch.wait.max.ms", 5)
            if self.group is None:
                # The partitions are asked for before anything is read
                # (list_topics): a new consumer's first request waited about
                # 52 ms in 4 of 12 tries with librdkafka's sparse connections
                # (against the test suite's broker), in none of 12 without.
                config.setdefault("enable.sparse.connections", False)
        # librdkafka does not fetch a partition whose local queue holds
        # queued.min.messages again for fetch.queue.backoff.ms (1 s by default):
        # a pipeline faster than about 100,000 messages/s a partition would
        # wait a second each time it caught up. The queue's bounds are kept.
        config.setdefault("fetch.queue.backoff.ms", 10)
        if self.group is None:
            config["group.id"] = "streams-unused"  # librdkafka wants one; nothing is committed
        if self.offset in ("earliest", "latest") and "auto.offset.reset" not in config:
            config["auto.offset.reset"] = self.offset
        consumer = ck.Consumer(config)
        self._assigned = set()
        if self.group is not None:
            consumer.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke)
        else:
            meta = consumer.list_topics(timeout=30)
            tps: list[Any] = []
            for topic in self.topics:
                tmeta = meta.topics.get(topic)
                if tmeta is None or tmeta.error is not None:
                    consumer.close()
                    raise RuntimeError(f"{self._label()}: topic {topic!r} does not exist on "
                                       f"{config['bootstrap.servers']}")
                tps.extend(ck.TopicPartition(topic, p) for p in sorted(tmeta.partitions))
            consumer.assign(self._positioned(consumer, tps))
            self._assigned = {(tp.topic, tp.partition) for tp in tps}
        self._consumer = consumer
        return consumer

    def _positioned(self, consumer: Any, tps: list[Any]) -> list[Any]:
        """``tps`` with their start offsets: the checkpoint's, else ``offset``'s."""
        ck = _import_kafka("from_kafka()")
        timed = []
        for tp in tps:
            saved = self.offsets.get((tp.topic, tp.partition))
            if saved is not None:
                tp.offset = saved
            elif (tp.topic, tp.partition) in self._handed_over:
                tp.offset = ck.OFFSET_STORED
            elif self.offset == "earliest":
                tp.offset = ck.OFFSET_BEGINNING
            elif self.offset == "latest":
                tp.offset = ck.OFFSET_END
            elif isinstance(self.offset, int):
                tp.offset = self.offset
            elif isinstance(self.offset, dict):
                tp.offset = self.offset.get(tp.partition, ck.OFFSET_STORED)
            elif isinstance(self.offset, tuple):
                timed.append(ck.TopicPartition(tp.topic, tp.partition, self.offset[1]))
        if timed:
            found = {(t.topic, t.partition): t.offset
                     for t in consumer.offsets_for_times(timed, timeout=30)}
            for tp in tps:
                part = (tp.topic, tp.partition)
                if part in found and part not in self.offsets:
                    self._not_before[part] = self.offset[1]
                    at = found[part]
                    tp.offset = at if at >= 0 else ck.OFFSET_END  # nothing that late yet
        return tps

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        positioned = self._positioned(consumer, partitions)
        if self._cooperative:  # assign() would replace the partitions kept
            consumer.incremental_assign(positioned)
        else:
            consumer.assign(positioned)
        self._assigned.update((tp.topic, tp.partition) for tp in partitions)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        # Called inside consume() or close(), between batches: everything read
        # so far is processed. Without a checkpoint its offsets go before the
        # partitions do, once its output is flushed; after a failure, none.
        # (The protocol takes the partitions away after this returns, in
        # either protocol: unassign()/incremental_unassign() are implied.)
        revoked = [(tp.topic, tp.partition) for tp in partitions]
        if self._checkpointer is None and self.group is not None and not self._failed:
            if not asyncio_loop_running():
                self._settle(self._flush_barriers())  # confirms deferred output too
            # (on a loop, each batch's output was flushed, awaited, before the next read)
            self._unconfirmed.clear()
            self._commit(consumer, self.offsets, asynchronous=False)
        if self._checkpointer is None and not self._closing:
            # A rebalance: the partitions' offsets are the group's from now
            # on, as another member reads on and commits past them. Kept, they
            # would be committed again (rewinding its offset) and read from
            # again were the partitions to come back. A checkpoint keeps them:
            # its state holds what was read up to them, never applied twice,
            # whatever the group's offsets say. (Closing, they are kept: what
            # this run read, where a start() again resumes.)
            for part in revoked:
                self.offsets.pop(part, None)
                self._not_before.pop(part, None)
            self._handed_over.update(revoked)
        for part in revoked:
            self._eof.pop(part, None)
            self._assigned.discard(part)

    def _read(self, consumer: Any, timeout: float) -> list[Any]:
        """One batch of messages; end-of-partition events are noted, errors raised."""
        # consume(n) waits for n messages or the timeout: wait for the first
        # one only, then take what is there.
        got: list[Any] = consumer.consume(self.batch, timeout=0)
        if not got and timeout > 0:
            got = consumer.consume(1, timeout=timeout)
            if got and self.batch > 1:
                got.extend(consumer.consume(self.batch - 1, timeout=0))
        if self._not_before:
            return self._sorted_out(got)
        # The common case, one pass: messages only.
        for i, msg in enumerate(got):
            if msg.error() is not None:
                return got[:i] + self._sorted_out(got[i:])
        return got

    def _sorted_out(self, got: list[Any]) -> list[Any]:
        """The messages of ``got``: end-of-partition events noted, early ones passed over."""
        ck = _import_kafka("from_kafka()")
        out = []
        for msg in got:
            err = msg.error()
            if err is None:
                part = (msg.topic(), msg.partition())
                if self._not_before and part in self._not_before:
                    # A broker may answer a time lookup with an earlier offset:
                    # messages before the time are passed over here.
                    if msg.timestamp()[1] < self._not_before[part]:
                        self.offsets[part] = msg.offset() + 1
                        continue
                    del self._not_before[part]
                out.append(msg)
            elif err.code() == ck.KafkaError._PARTITION_EOF:
                self._eof[(msg.topic(), msg.partition())] = msg.offset()
            else:
                raise ck.KafkaException(err)
        return out

    def _at_end(self, assigned: set[Partition]) -> bool:
        """Whether every partition of ``assigned`` is at its end (and some are assigned).

        A partition is at the end reported until a message past it is read
        (it ends again later): compared once a batch, no work a message.
        """
        eof, offsets = self._eof, self.offsets
        return bool(assigned) and all(
            part in eof and offsets.get(part, eof[part]) <= eof[part] for part in assigned)

    # -- the stream side -------------------------------------------------------

    def _values(self, msgs: list[Any]) -> Iterator[Any]:
        """What is emitted for ``msgs``, in order."""
        if self.with_meta:
            return ({"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                     "timestamp": m.timestamp()[1], "key": m.key(), "value": m.value()}
                    for m in msgs)
        if self.keys:
            return ({"key": m.key(), "value": m.value()} for m in msgs)
        # Message.value called by map: no Python frame a message. A list's
        # iterator: the compiled loop numbers nothing (30 ns a message less).
        return iter(list(map(_import_kafka("from_kafka()").Message.value, msgs)))

    def _emit_batch(self, msgs: list[Any]) -> Any:
        """Push ``msgs``; None, or an awaitable when a step is asynchronous.

        The batch goes through a loop compiled with the graph's steps written
        into it (:mod:`streams.fused_loop`): one call a batch, not a push
        function call a message, in the same order, stopping where
        :meth:`stop` is called.
        """
        return self._push_from(msgs, self._values(msgs), 0)

    def _push_from(self, msgs: list[Any], values: Iterator[Any], done: int) -> Any:
        """Push the rest of ``values`` (``done`` of ``msgs`` already went through).

        ``offsets`` moves past a message once every step for it has finished
        (an awaited step included). It is brought up to date when the batch
        ends, fails or is stopped, not once a message: that would cost as
        much as the push of a short pipeline.
        """
        counts: list[int] = []  # the compiled loop tells how many went through
        positional, counted = counting(values, counts.append)
        try:
            while True:
                push = take_push(self)
                outcome = loop_for(push, positional)(values, self, push, counted)
                done += counts.pop()
                if outcome is None:  # the graph changed: new code for the rest
                    continue
                if outcome is EXHAUSTED or outcome is STOPPED:
                    break
                # The last message counted has work pending.
                self._advance(msgs, done - 1)
                return self._finish_async(outcome, msgs, values, done)
        except BaseException:
            self._advance(msgs, done + sum(counts))
            raise
        if done == len(msgs):
            self._advance_to_position()
        else:
            self._advance(msgs, done)
        return None

    async def _finish_async(self, pending: Any, msgs: list[Any], values: Iterator[Any],
                            done: int) -> None:
        await pending
        more = self._push_from(msgs, values, done)
        if more is not None:
            await more

    def _advance(self, msgs: list[Any], done: int) -> None:
        """Move ``offsets`` past the first ``done`` of ``msgs``."""
        offsets = self.offsets
        for msg in msgs[:done]:
            offsets[(msg.topic(), msg.partition())] = msg.offset() + 1

    def _advance_to_position(self) -> None:
        """Move ``offsets`` past every message read (all of them are processed).

        The consumer's position is past the last message it returned: one call
        a batch, where reading each message's partition and offset costs as
        much as the push of a short pipeline.
        """
        ck = _import_kafka("from_kafka()")
        offsets = self.offsets
        for tp in self._consumer.position([ck.TopicPartition(t, p) for t, p in self._assigned]):
            if tp.offset >= 0:  # else nothing read there yet
                offsets[(tp.topic, tp.partition)] = tp.offset

    # -- without a loop --------------------------------------------------------

    def _run_sync(self) -> None:
        consumer = self._connect(to_the_end=True)
        failed = True
        try:
            # Each batch ends in _batch_done: a sink that can hand a batch's
            # output over in one call holds it till then (till _close_consumer).
            # Inside the try: a sink failing to start must not leave the
            # consumer in the group, holding its partitions.
            self._begin(sync=True)
            while not self.stopped:
                self._release(consumer)
                msgs = self._read(consumer, self.poll_interval)
                if not msgs:
                    if self._at_end({(tp.topic, tp.partition) for tp in consumer.assignment()}):
                        break
                    continue
                self._settle(self._emit_batch(msgs))
                self._settle(self._batch_done(consumer, len(msgs)))
                if self._eof and self._at_end(self._assigned):
                    break  # every partition's end came with this batch: no read to wait on
            else:
                failed = False
                return  # stop(): the stream stays open
            self._settle(self.close())
            if self._checkpointer is not None:
                self._settle(self._checkpointer.source_closed(self))
                self._checkpointer.wait()
            failed = False
        finally:
            self._close_consumer(consumer, failed)

    # -- on a loop -------------------------------------------------------------

    async def _run_async(self) -> None:
        consumer = self._connect()
        clock = get_clock()
        failed = True
        try:
            self._begin(sync=False)
            while not self.stopped:
                self._release(consumer)
                msgs = self._read(consumer, 0)
                if not msgs:
                    await clock.sleep(self.poll_interval)
                    continue
                ckpt = self._checkpointer
                if ckpt is not None:
                    ckpt.begin()
                pending = self._emit_batch(msgs)
                if pending is not None:
                    await pending
                pending = self._batch_done(consumer, len(msgs))
                if pending is not None:
                    await pending
            if self._checkpointer is not None:
                await self._checkpointer.wait_async()
            failed = False
        finally:
            self._close_consumer(consumer, failed)
