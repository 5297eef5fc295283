"""When ``from_kafka`` commits offsets to its consumer group.

:class:`KafkaCommits` is the base of :class:`~streams.sources.kafka.FromKafka`
that decides what is committed when (the delivery guarantees are described
in :mod:`streams.sources.kafka`): after a batch, once the nodes that buffer
output have flushed it, or, without a loop, once the broker acknowledged
the output of the batch (``to_kafka``'s tokens), while later batches are
processed; with a checkpoint, once a checkpoint covering the offsets is on
disk; and what is committed when the consumer closes. Reading is the
subclass's business: it calls ``_begin``, ``_release`` and ``_batch_done``
around each batch, and ``_close_consumer`` at the end.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ..clock import run_sync
from ..core import Stream
from ..graph import walk
from ..pending import gather_pending as _gather_pending
from .base import Source
from .kafka_config import Partition, _import_kafka

__all__ = ["KafkaCommits"]

#: Without a loop, batches whose output the broker has yet to acknowledge
#: (their offsets are committed as it does); a wait only beyond this many.
#: A batch of 1,000 takes about 2.5 ms, the acknowledgement a producer's
#: linger.ms and a round trip: with 4, a group's run waited for it in 7% of
#: its samples; 16 gave 1.22x the rate (median of 3 paired runs).
_PENDING_BATCHES = 16


class KafkaCommits(Source[Any]):
    """A Kafka source's commits to its consumer group (see the module docs)."""

    __slots__ = ("_assigned", "_barriers", "_closing", "_consumer", "_covered", "_deferred",
                 "_failed", "_holders", "_unconfirmed")
    # Set by the subclass: the consumer group (None: nothing is committed)
    # and the next offset to read of each partition.
    group: str | None
    offsets: dict[Partition, int]

    def __init__(self, **kwargs: Any) -> None:
        self._consumer: Any = None  # while it runs
        self._failed = False  # closing after a failure: a rebalance commits nothing
        self._closing = False  # the partitions are revoked by close(), not by a rebalance
        # The partitions assigned (asking the consumer waits for its main
        # thread): only their offsets are committed, a revoked partition's
        # being the group's.
        self._assigned: set[Partition] = set()
        self._barriers: list[Stream[Any]] = []
        # Nodes whose output is sent now and confirmed later (to_kafka without
        # a loop), and per batch the confirmations awaited and its offsets.
        self._deferred: list[Stream[Any]] = []
        # Without a loop, nodes that hold a batch's output and hand it over
        # in one call at its end (to_kafka's produce_batch()).
        self._holders: list[Stream[Any]] = []
        self._unconfirmed: deque[tuple[list[tuple[Any, Any]], dict[Partition, int]]] = deque()
        # (checkpoint sequence, the offsets it covers): committed to the group once on disk.
        self._covered: deque[tuple[int, dict[Partition, int]]] = deque()
        super().__init__(**kwargs)

    def _commit(self, consumer: Any, offsets: dict[Partition, int], asynchronous: bool) -> None:
        if self.group is None or not offsets:
            return
        ck = _import_kafka("from_kafka()")
        assigned = self._assigned
        tps = [ck.TopicPartition(t, p, o) for (t, p), o in offsets.items() if (t, p) in assigned]
        if not tps:
            return
        try:
            consumer.commit(offsets=tps, asynchronous=asynchronous)
        except ck.KafkaException as e:
            if e.args[0].code() != ck.KafkaError._NO_OFFSET:
                raise

    def _flush_barriers(self) -> Any:
        return _gather_pending([b._barrier() for b in self._barriers])  # type: ignore[attr-defined]

    def _batch_done(self, consumer: Any, n: int) -> Any:
        """A batch of ``n`` finished: checkpoint (when due), or flush and commit."""
        for b in self._holders:
            b._send_held()  # type: ignore[attr-defined]
        ckpt = self._checkpointer
        if ckpt is not None:
            return ckpt.step(n)
        if self.group is None:
            return None  # nothing to commit: output is delivered at the end
        if self._deferred:
            # Sent now, confirmed (and committed) at a later read: the broker
            # acknowledges this batch's output while the next ones are processed.
            sent = [(b, b._barrier_send()) for b in self._deferred]  # type: ignore[attr-defined]
            flushed = _gather_pending([b._barrier() for b in self._barriers  # type: ignore[attr-defined]
                                       if b not in self._deferred])
            self._settle(flushed)
            self._unconfirmed.append((sent, dict(self.offsets)))
            return None
        flushed = self._flush_barriers()
        if flushed is None:
            self._commit(consumer, self.offsets, asynchronous=True)
            return None
        return self._commit_after(flushed, consumer)

    def _confirm(self, consumer: Any, keep: int) -> None:
        """Commit the offsets of the oldest batches whose output the broker acknowledged.

        Batches are confirmed in order; the oldest is waited for while more
        than ``keep`` are unconfirmed.
        """
        done = None
        unconfirmed = self._unconfirmed
        while unconfirmed:
            sent, offsets = unconfirmed[0]
            if len(unconfirmed) <= keep and not all(
                    getattr(node, "_barrier_ready", None) is not None
                    and node._barrier_ready(token) for node, token in sent):
                break
            for node, token in sent:
                node._barrier_confirm(token)
            unconfirmed.popleft()
            done = offsets
        if done is not None:
            self._commit(consumer, done, asynchronous=True)

    async def _commit_after(self, flushed: Any, consumer: Any) -> None:
        await flushed
        self._commit(consumer, self.offsets, asynchronous=True)

    def _checkpoint_taken(self, sequence: int) -> None:
        self._covered.append((sequence, dict(self.offsets)))

    def _release(self, consumer: Any) -> None:
        """Commit the offsets of confirmed output, or of the newest checkpoint on disk."""
        if self._unconfirmed:
            # Several batches may await the broker's acknowledgement (a
            # producer's linger.ms holds each a while): one, as before,
            # where a node cannot tell without waiting.
            ready = all(hasattr(b, "_barrier_ready") for b in self._deferred)
            self._confirm(consumer, keep=_PENDING_BATCHES if ready else 1)
        ckpt = self._checkpointer
        if ckpt is None or not self._covered:
            return
        durable = ckpt.poll()
        done = None
        while self._covered and self._covered[0][0] <= durable:
            done = self._covered.popleft()[1]
        if done is not None:
            self._commit(consumer, done, asynchronous=True)

    @staticmethod
    def _settle(pending: Any) -> None:
        if pending is not None:
            run_sync(pending)

    def _begin(self, sync: bool) -> None:
        """Find the nodes that buffer output; ``sync``: no loop, batches end in ``_batch_done``."""
        self._barriers = [n for n in walk(self) if hasattr(n, "_barrier")]
        # Output confirmed a batch late: only when offsets are committed for it.
        deferring = sync and self.group is not None and self._checkpointer is None
        self._deferred = [b for b in self._barriers if hasattr(b, "_barrier_send")] \
            if deferring else []
        for b in self._deferred:
            b._deferring = True  # type: ignore[attr-defined]
        self._holders = [b for b in self._barriers if hasattr(b, "_hold_batches")] \
            if sync else []
        for b in self._holders:
            b._hold_batches(True)  # type: ignore[attr-defined]

    def _close_consumer(self, consumer: Any, failed: bool) -> None:
        """Commit what is done, synchronously, and close the consumer.

        After a failure nothing more is committed without a checkpoint, here
        or by leaving the group (``_on_revoke``): the output of the messages
        processed last may not be delivered, or a delivery may have failed
        behind them. What was read since the last commit is read again.
        """
        self._failed = failed
        self._closing = True
        try:
            if failed and self._checkpointer is None:
                self._unconfirmed.clear()
                return
            self._confirm(consumer, keep=0)
            if self._checkpointer is not None:
                self._release(consumer)
                if self._covered:
                    self._commit(consumer, self._covered[-1][1], asynchronous=False)
                    self._covered.clear()
            else:
                self._commit(consumer, self.offsets, asynchronous=False)
        finally:
            # What a failed or stopped batch held is sent, as what it produced
            # was; a later barrier reports what failed.
            for b in self._holders:
                b._hold_batches(False)  # type: ignore[attr-defined]
            for b in self._deferred:
                b._deferring = False  # type: ignore[attr-defined]
            consumer.close()
            self._consumer = None
            self._failed = self._closing = False
