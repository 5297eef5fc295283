"""``to_kafka``'s batches: the messages written between two of a source's tokens.

A source that confirms writes a batch late (``from_kafka`` in a consumer
group, ``from_redis``) asks :class:`~streams.sinks.kafka.ToKafka` for a
token at the end of each batch and commits the batch's offsets once the
broker acknowledged the batch's own messages: :class:`Batch` counts them.
Under ``from_kafka``, which pushes its messages in batches, the sink holds
a batch's messages and hands them over in one ``produce_batch()`` call
(:class:`HeldMessages`): the batch's delivery callback is then passed once
a call, not once a message, which costs about as much as the produce.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..clock import get_clock, run_sync

if TYPE_CHECKING:
    from .kafka import ToKafka

__all__ = ["Batch", "HeldMessages"]


class Batch:
    """The messages written between two tokens, and how many the broker acknowledged.

    Each message of a batch names the batch's own callback, so a batch is
    confirmed by its own deliveries: counting every delivery would take a
    later batch's for an earlier one's, whose message may still fail (the
    broker of one partition down, another's up).
    """

    __slots__ = ("done", "sent", "sink")

    def __init__(self, sink: ToKafka) -> None:
        self.sink = sink
        self.sent = 0
        self.done = 0

    def delivered(self, err: Any, msg: Any) -> None:
        self.done += 1
        sink = self.sink
        if err is None and not (sink.transactional or sink.downstreams):
            sink._done += 1  # a success nothing else reads: one call a message less
        else:
            sink._delivered(err, msg)


class HeldMessages:
    """The held messages of :class:`~streams.sinks.kafka.ToKafka`, and how they are sent."""

    __slots__ = ()

    if TYPE_CHECKING:  # ToKafka's
        topic: str
        _producer: Any
        _batch: Batch | None
        _held: list[dict[str, Any]]
        _sent: int
        _errors_seen: list[tuple[Any, BaseException]]

        def _fail(self, x: Any, exc: BaseException) -> Any: ...

    def _send_held(self, report: bool = True) -> Any:
        """Hand the held messages over in one call; None, or an awaitable while room is awaited.

        The producer refuses for want of room every message from the first
        it could not queue (librdkafka stops queueing there), so sending
        those again once there is room keeps the order. Messages refused for
        good fail the node (``report``), else wait in ``_errors_seen`` for
        the next barrier.
        """
        held = self._held
        if not held:
            return None
        self._held = []
        while held:
            held = self._produce_batch(held)
            if not held:
                break
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                self._producer.flush(0.005)  # sends what lingers, serves reports: room
                continue
            return self._send_held_async(held, report)
        self._producer.poll(0)
        return self._report() if report and self._errors_seen else None

    async def _send_held_async(self, held: list[dict[str, Any]], report: bool) -> None:
        clock = get_clock()
        while held:
            self._producer.poll(0)
            await clock.sleep(0.005)
            held = self._produce_batch(held)
        pending = self._report() if report and self._errors_seen else None
        if pending is not None:
            await pending

    def _send_held_now(self, report: bool = True) -> None:
        """Send what is held, waiting for room if need be (a batch's end, without a loop)."""
        pending = self._send_held(report)
        if pending is not None:
            run_sync(pending)

    def _produce_batch(self, held: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Queue ``held``; note the messages refused for good, return those refused for room."""
        import confluent_kafka as ck

        batch = self._batch
        try:
            if batch is None:  # no longer deferring: the producer's own callback
                good = self._producer.produce_batch(self.topic, held)
            else:
                good = self._producer.produce_batch(self.topic, held,
                                                    on_delivery=batch.delivered)
        except BufferError:  # documented, though room is reported per message
            return held
        except Exception as e:  # nothing of the call was queued
            self._errors_seen.extend((m["value"], e) for m in held)
            return []
        self._sent += good
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
            self._errors_seen.append((m["value"], ck.KafkaException(err)))
        return []

    def _report(self) -> Any:
        """Fail the node on each error noted (its policy decides), naming the element."""
        errors, self._errors_seen = self._errors_seen, []
        pending = None
        for x, e in errors:
            pending = self._fail(x, e)
        return pending
