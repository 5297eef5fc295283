"""Where a restored transactional ``to_kafka`` finds the messages it already wrote.

Every message of a transactional sink carries the headers ``streams-writer``
(its transactional id) and ``streams-seq`` (its number in the sink's output);
a restored sink reads the committed messages written after its checkpoint's
marks and does not write those again (see :mod:`streams.sinks.kafka`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .kafka import ToKafka

__all__ = ["SEQ", "WRITER", "already_written"]

SEQ = "streams-seq"
WRITER = "streams-writer"


def already_written(sink: ToKafka) -> set[int]:
    """The ``streams-seq`` numbers this writer committed after the restored checkpoint."""
    import confluent_kafka as ck

    writer = str(sink.producer_config["transactional.id"]).encode()
    consumer = ck.Consumer({"bootstrap.servers": sink.producer_config["bootstrap.servers"],
                            "group.id": "streams-recovery", "enable.auto.commit": False,
                            "isolation.level": "read_committed",
                            "enable.partition.eof": True,
                            # At a partition's end the broker holds a fetch this
                            # long for data (500 ms by default) before the EOF.
                            "fetch.wait.max.ms": 10})
    try:
        meta = consumer.list_topics(sink.topic, timeout=30).topics.get(sink.topic)
        if meta is None or meta.error is not None:
            return set()
        marks = sink.marks or {}
        tps = [ck.TopicPartition(sink.topic, p, marks.get(p, ck.OFFSET_BEGINNING))
               for p in meta.partitions]
        consumer.assign(tps)
        left = {tp.partition for tp in tps}
        found: set[int] = set()
        while left:
            # consume() returns at 1000 messages or at its timeout, whichever
            # comes first: the last call, with fewer left, waits out its
            # timeout (a second with 1.0, on every restart).
            for msg in consumer.consume(1000, timeout=0.01):
                err = msg.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        left.discard(msg.partition())
                        continue
                    raise ck.KafkaException(err)
                headers = dict(msg.headers() or ())
                if headers.get(WRITER) == writer:
                    seq = int(headers[SEQ] or 0)
                    if seq >= sink.written:
                        found.add(seq)
        return found
    finally:
        consumer.close()
