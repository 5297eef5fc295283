"""Consumers kept between reads of offset ranges (``from_kafka_batched``'s batches).

:func:`~streams.sources.kafka_batched.get_message_batch` reads one range of
one partition. A new consumer for every range connects to the broker, asks
for metadata and starts its threads, then is closed: on a Dask worker
reading 5,000-message ranges that was about 40% of the worker's CPU. Here a
process keeps the consumers it made, by configuration: a read takes one
(each is used by one thread at a time), assigns it the range's partition,
and gives it back unassigned, so that an idle consumer fetches nothing. A
consumer whose read failed is closed, not kept. Idle consumers are closed
after :data:`IDLE_SECONDS` (looked at on the next read), by
:func:`close_idle_readers`, and at exit.

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

__all__ = ["IDLE_SECONDS", "close_idle_readers", "range_reader"]

#: A kept consumer unused this long is closed (at the next read in its process).
IDLE_SECONDS = 60.0

#: ``fetch.wait.max.ms`` unless the configuration sets it. A range read asks
#: for offsets below the high watermark, which the broker has: its fetches
#: never need the broker's long poll. And a kept consumer reassigned while a
#: fetch of its last read is held by the broker (librdkafka has one fetch in
#: flight per broker) waits for that fetch: up to the default 500 ms a read.
FETCH_WAIT_MS = 10

_lock = threading.Lock()
#: Idle consumers by configuration, each with the time it was given back.
_idle: dict[Any, list[tuple[float, Any]]] = {}
#: The process whose consumers ``_idle`` holds (a forked child must not use them).
_owner = os.getpid()


def _key(params: dict[str, Any]) -> Any:
    """A hashable form of ``params``, or None if a value is not hashable (not kept)."""
    key = tuple(sorted(params.items()))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _take(key: Any) -> Any:
    global _owner
    now = get_clock().now()
    stale: list[Any] = []
    consumer = None
    with _lock:
        if _owner != os.getpid():  # forked: the parent's consumers are not ours
            _idle.clear()
            _owner = os.getpid()
        for k in list(_idle):
            kept = _idle[k]
            stale += [c for t, c in kept if now - t > IDLE_SECONDS]
            kept[:] = [(t, c) for t, c in kept if now - t <= IDLE_SECONDS]
            if not kept:
                del _idle[k]
        if key in _idle:
            consumer = _idle[key].pop()[1]
            if not _idle[key]:
                del _idle[key]
    for c in stale:
        c.close()
    return consumer


def _give(key: Any, consumer: Any) -> None:
    with _lock:
        _idle.setdefault(key, []).append((get_clock().now(), consumer))


def close_idle_readers() -> int:
    """Close every consumer this process keeps idle; return how many.

    Examples
    --------
    >>> close_idle_readers()
    0
    """
    with _lock:
        kept = [c for consumers in _idle.values() for _, c in consumers]
        _idle.clear()
    for c in kept:
        c.close()
    return len(kept)


atexit.register(close_idle_readers)


@contextmanager
def range_reader(kafka_params: dict[str, Any]) -> Iterator[Any]:
    """A consumer with ``kafka_params`` (kept or new) for one read by this thread.

    Give it its assignment; it is unassigned and kept when the block ends
    normally, closed when it raises.
    """
    ck = _import_kafka("from_kafka_batched()")
    params = {"fetch.wait.max.ms": FETCH_WAIT_MS, **kafka_params,
              "enable.auto.commit": False, "enable.partition.eof": False}
    params.setdefault("group.id", "streams-unused")
    key = _key(params)
    consumer = _take(key) if key is not None else None
    if consumer is None:
        consumer = ck.Consumer(params)
    try:
        yield consumer
        consumer.unassign()
    except BaseException:
        consumer.close()
        raise
    if key is None:
        consumer.close()
    else:
        _give(key, consumer)
