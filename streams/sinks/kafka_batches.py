"""``to_kafka``'s batches: the messages written between two of a source's tokens.

A source that confirms writes a batch late (``from_kafka`` in a consumer
group, ``from_redis``) asks :class:`~streams.sinks.kafka.ToKafka` for a
token at the end of each batch and commits the batch's offsets once the
broker acknowledged the batch's own messages: :class:`Batch` counts them.
Under ``from_kafka`` in a consumer group without a loop, which pushes its
messages in batches, the sink holds a batch's messages and hands them over
in one ``produce_batch()`` call (:func:`send_held`): a batch's delivery
callback is then passed once a call, not once a message, which costs about
as much as the produce. Without a group no message names a callback, and
``produce()`` a message costs less than its dict and its share of
``produce_batch()`` (0.48 us against 0.61 us of the main thread): each is
produced as it comes. Either step is written into fused code
(:func:`fuse_held`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..clock import get_clock, run_sync
from ..loop_thread import asyncio_loop_running

if TYPE_CHECKING:
    from ..fusion import Fuser
    from .kafka import ToKafka

__all__ = ["POLL_EVERY", "Batch", "fuse_held", "send_held", "send_held_now"]

#: Delivery callbacks are served every this many messages (and at barriers);
#: held messages are handed over at most this many at a time.
POLL_EVERY = 1000


class Batch:
    """The messages written between two tokens, and how many the broker acknowledged.

    Each message of a batch names the batch's own callback, so a batch is
    confirmed by its own deliveries: counting every delivery would take a
    later batch's for an earlier one's, whose message may still fail (the
    broker of one partition down, another's up).
    """

    __slots__ = ("done", "passed", "sent", "sink")

    def __init__(self, sink: ToKafka) -> None:
        self.sink = sink
        self.sent = 0
        self.done = 0
        #: Reports passed on to the sink's own callback (which counts them).
        self.passed = 0

    def delivered(self, err: Any, msg: Any) -> None:
        # Called once a message: a success nothing else reads is only
        # counted (the sink counts it when the batch is confirmed).
        self.done += 1
        sink = self.sink
        if err is not None or sink.transactional or sink.downstreams:
            self.passed += 1
            sink._delivered(err, msg)


def send_held(sink: ToKafka, report: bool = True) -> Any:
    """Hand ``sink``'s held messages over in one call; None, or an awaitable while room is awaited.

    The producer refuses for want of room every message from the first it
    could not queue (librdkafka stops queueing there), so sending those
    again once there is room keeps the order. Messages refused for good
    fail the node (``report``), else wait in its errors seen for the next
    barrier. With nothing held while fused code produces each message
    (``_produce_now``, a batch's end), their delivery reports are served.
    """
    if not sink._held:
        if sink._produce_now is None:
            return None
        sink._producer.poll(0)  # produced as they came: their reports, a batch's end
        return sink._report() if report and sink._errors_seen else None
    # Emptied in place: fused code appends to this very list (fuse_held).
    held = sink._held[:]
    sink._held.clear()
    while held:
        held = _produce_batch(sink, held)
        if not held:
            break
        # Not in an except block: flush() serves reports, which run nodes
        # downstream, and may raise (see ToKafka._refused).
        if asyncio_loop_running():
            return _send_held_async(sink, held, report)
        sink._producer.flush(0.005)  # sends what lingers, serves reports: room
    sink._producer.poll(0)
    return sink._report() if report and sink._errors_seen else None


async def _send_held_async(sink: ToKafka, held: list[dict[str, Any]], report: bool) -> None:
    clock = get_clock()
    while held:
        sink._producer.poll(0)
        await clock.sleep(0.005)
        held = _produce_batch(sink, held)
    pending = sink._report() if report and sink._errors_seen else None
    if pending is not None:
        await pending


def send_held_now(sink: ToKafka, report: bool = True) -> None:
    """Send what ``sink`` holds, waiting for room if need be (a batch's end, without a loop)."""
    pending = send_held(sink, report)
    if pending is not None:
        run_sync(pending)


def _produce_batch(sink: ToKafka, held: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Queue ``held``; note the messages refused for good, return those refused for room."""
    import confluent_kafka as ck

    batch = sink._batch
    try:
        if batch is None:  # no longer deferring: the producer's own callback
            good = sink._producer.produce_batch(sink.topic, held)
        else:
            good = sink._producer.produce_batch(sink.topic, held, on_delivery=batch.delivered)
    except BufferError:  # documented, though room is reported per message
        return held
    except Exception as e:  # nothing of the call was queued
        sink._errors_seen.extend((m["value"], e) for m in held)
        return []
    sink._sent += good
    if batch is not None:
        batch.sent += good
    if good == len(held):
        return []
    for i, m in enumerate(held):
        err = m.pop("_error", None)
        if err is None:
            continue
        if err.code() == ck.KafkaError._QUEUE_FULL:
            rest = held[i:]
            for r in rest:
                r.pop("_error", None)
            return rest
        # The element is the value: held messages are str, bytes or None.
        sink._errors_seen.append((m["value"], ck.KafkaException(err)))
    return []


def fuse_held(sink: ToKafka, f: Fuser, x: str) -> None:
    """Write ``sink``'s step into fused code (:mod:`streams.fusion`).

    While a source's batch lasts, a ``bytes`` element's message is produced
    right there (``_produce_now``: without a group), or held for the batch's
    ``produce_batch()`` (``_batch_ends``: in a group), the common cases
    under ``from_kafka``: no call into the sink a message. A message the
    producer does not take (a full queue, a refusal) goes through
    ``update``, which waits for room or fails the node naming it, as do
    anything else, and a sink with a key, a transaction or nodes downstream
    (fixed while the code lives).
    """
    update = f.bind(sink.update, "update")
    if sink.transactional or sink.key is not None or sink.downstreams:
        f.line(f"return {update}({x})")
        return
    node = f.bind(sink, "sink")
    held = f.bind(sink._held, "held")
    topic = f.bind(sink.topic, "topic")
    produce = f.fresh("produce")
    f.line(f"if type({x}) is bytes:\n"
           f"    {produce} = {node}._produce_now\n"
           f"    if {produce} is not None:\n"
           f"        try:\n"
           f"            {produce}({topic}, {x})\n"
           f"        except Exception:\n"
           f"            pass\n"
           f"        else:\n"
           f"            return None\n"
           # Out of the handler: update() produces again (see ToKafka._refused).
           f"        return {update}({x})\n"
           f"    if {node}._batch_ends:\n"
           f"        {held}.append({{'value': {x}}})\n"
           f"        if len({held}) >= {POLL_EVERY}:\n"
           f"            return {f.bind(send_held, 'send_held')}({node})\n"
           f"        return None\n"
           f"return {update}({x})")
