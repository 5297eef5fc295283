"""Consumers kept assigned between reads of offset ranges (``from_kafka_batched``'s batches).

:func:`~streams.sources.kafka_batched.get_message_batch` reads one range of
one partition. A new consumer for every range connects to the broker, asks
for metadata and starts its threads, then is closed: on a Dask worker
reading 5,000-message ranges that was about 40% of the worker's CPU. And a
kept consumer assigned at each range's start restarts librdkafka's fetching
there: one process read the same ranges about 5x faster with a consumer a
partition left assigned between them (benchmarks/README.md, 17:40).

So a process keeps its consumers *assigned*, each with the partition it
reads and the offset of the next message it will deliver. A read of a
range that starts at that offset takes that consumer as it is, and gets the
messages librdkafka fetched ahead; any other range is read by a consumer of
the same configuration reassigned to it (one of the partition's, else a new
one while fewer than :data:`MAX_KEPT` are kept, else the one idle longest).
Each consumer is used by one thread at a time. A consumer whose read failed
is closed, not kept. Idle consumers are closed after :data:`IDLE_SECONDS`
(looked at on the next read), by :func:`close_idle_readers`, and at exit.
What an idle consumer holds is bounded: librdkafka fetches ahead at most
:data:`QUEUED_MIN_MESSAGES` messages or :data:`QUEUED_MAX_KBYTES` a
partition (unless the configuration says otherwise), and a consumer given
back at its partition's end is paused, so that it does not poll the broker.

No offset is committed by these consumers: they are assigned partitions
(no group membership) and never commit; ``from_kafka_batched`` commits
with its own consumer.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..clock import get_clock
from .kafka_config import _import_kafka

__all__ = ["IDLE_SECONDS", "MAX_KEPT", "RangeReader", "close_idle_readers", "range_reader"]

#: A kept consumer unused this long is closed (at the next read in its process).
IDLE_SECONDS = 60.0

#: Most idle consumers kept by configuration (each holds one partition's
#: prefetched messages and librdkafka's threads).
MAX_KEPT = 8

#: ``fetch.wait.max.ms`` unless the configuration sets it. A range read asks
#: for offsets below the high watermark, which the broker has: its fetches
#: never need the broker's long poll. And a kept consumer reassigned while a
#: fetch of its last read is held by the broker (librdkafka has one fetch in
#: flight per broker) waits for that fetch: up to the default 500 ms a read.
FETCH_WAIT_MS = 10

#: ``queued.min.messages`` and ``queued.max.messages.kbytes`` unless the
#: configuration sets them: what a kept consumer fetches ahead of its next
#: range (librdkafka's defaults, 100,000 messages and 64 MiB, are a lot to
#: hold in every idle consumer of a worker).
QUEUED_MIN_MESSAGES = 20_000
QUEUED_MAX_KBYTES = 8192

_lock = threading.Lock()
#: Idle readers by configuration, each with the time it was given back.
_idle: dict[Any, list[tuple[float, RangeReader]]] = {}
#: The process whose consumers ``_idle`` holds (a forked child must not use them).
_owner = os.getpid()


class RangeReader:
    """A consumer assigned one partition, and where its next message is.

    ``next`` is the offset the next range must start at to read on where
    the last one stopped; ``held`` the messages a read took from the
    consumer past its range (only after offsets no message holds: a
    transaction's marker), first in line for the next range.
    """

    __slots__ = ("consumer", "held", "next", "partition", "paused", "topic")

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.topic: str | None = None
        self.partition = -1
        self.next = -1
        self.held: list[Any] = []
        self.paused = False

    def place(self, topic: str, partition: int, low: int) -> None:
        """Have the next message delivered be ``low``'s of ``topic``'s ``partition``."""
        if self.paused:  # a pause outlives an assignment in librdkafka
            self.consumer.resume([self._tp()])
            self.paused = False
        if (self.topic, self.partition, self.next) == (topic, partition, low):
            return
        ck = _import_kafka("from_kafka_batched()")
        # assign() replaces the assignment: librdkafka drops what it fetched
        # for the old one and starts fetching at ``low``.
        self.consumer.assign([ck.TopicPartition(topic, partition, low)])
        self.topic, self.partition, self.next = topic, partition, low
        self.held = []

    def _tp(self) -> Any:
        return _import_kafka("from_kafka_batched()").TopicPartition(self.topic, self.partition)

    def rest(self) -> None:
        """Pause fetching if the partition has nothing past ``next`` (as last fetched).

        An assigned consumer at a partition's end asks the broker for more
        every ``fetch.wait.max.ms``: for nothing, until its next range.
        """
        if self.held:
            return
        _, high = self.consumer.get_watermark_offsets(self._tp(), cached=True)
        if high >= 0 and self.next >= high:
            self.consumer.pause([self._tp()])
            self.paused = True


def _key(params: dict[str, Any]) -> Any:
    """A hashable form of ``params``, or None if a value is not hashable (not kept)."""
    key = tuple(sorted(params.items()))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _take(key: Any, topic: str, partition: int, low: int) -> RangeReader | None:
    """The kept reader to read ``low`` on with: at ``low``, else of the partition,
    else (when :data:`MAX_KEPT` are kept) the one idle longest; None for a new one."""
    global _owner
    now = get_clock().now()
    stale: list[RangeReader] = []
    reader = None
    with _lock:
        if _owner != os.getpid():  # forked: the parent's consumers are not ours
            _idle.clear()
            _owner = os.getpid()
        for k in list(_idle):
            kept = _idle[k]
            stale += [r for t, r in kept if now - t > IDLE_SECONDS]
            kept[:] = [(t, r) for t, r in kept if now - t <= IDLE_SECONDS]
            if not kept:
                del _idle[k]
        kept = _idle.get(key, [])
        ranked = sorted(range(len(kept)), key=lambda i: (
            (kept[i][1].topic, kept[i][1].partition, kept[i][1].next) != (topic, partition, low),
            (kept[i][1].topic, kept[i][1].partition) != (topic, partition),
            kept[i][0]))
        if ranked:
            best = ranked[0]
            r = kept[best][1]
            if (r.topic, r.partition) == (topic, partition) or len(kept) >= MAX_KEPT:
                reader = kept.pop(best)[1]
        if key in _idle and not kept:
            del _idle[key]
    for r in stale:
        r.consumer.close()
    return reader


def _give(key: Any, reader: RangeReader) -> None:
    with _lock:
        _idle.setdefault(key, []).append((get_clock().now(), reader))


def close_idle_readers() -> int:
    """Close every consumer this process keeps idle; return how many.

    Examples
    --------
    >>> _ = close_idle_readers()  # those earlier reads of this process left
    >>> close_idle_readers()  # none since
    0
    """
    with _lock:
        kept = [r for readers in _idle.values() for _, r in readers]
        _idle.clear()
    for r in kept:
        r.consumer.close()
    return len(kept)


atexit.register(close_idle_readers)


@contextmanager
def range_reader(kafka_params: dict[str, Any], topic: str, partition: int,
                 low: int) -> Iterator[RangeReader]:
    """A reader with ``kafka_params`` (kept or new) whose next message is ``low``'s.

    For one read by this thread: set its ``next`` (and ``held``) to where
    the read stopped. It is kept, still assigned, when the block ends
    normally, and closed when it raises.
    """
    ck = _import_kafka("from_kafka_batched()")
    params = {"fetch.wait.max.ms": FETCH_WAIT_MS, "queued.min.messages": QUEUED_MIN_MESSAGES,
              "queued.max.messages.kbytes": QUEUED_MAX_KBYTES, **kafka_params,
              "enable.auto.commit": False, "enable.partition.eof": False}
    params.setdefault("group.id", "streams-unused")
    key = _key(params)
    reader = _take(key, topic, partition, low) if key is not None else None
    if reader is None:
        reader = RangeReader(ck.Consumer(params))
    try:
        reader.place(topic, partition, low)
        yield reader
        reader.rest()
    except BaseException:
        reader.consumer.close()
        raise
    if key is None:
        reader.consumer.close()
    else:
        _give(key, reader)
