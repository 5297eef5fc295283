"""from_kafka and to_kafka against a real Kafka-protocol broker (tansu)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import Checkpointer, Stream

pytestmark = pytest.mark.kafka


def produce(broker: Any, topic: str, values: list[bytes]) -> None:
    broker.produce(topic, values)


def read_all(broker: Any, topic: str, committed: bool = False) -> list[bytes]:
    return broker.read(topic, committed)


def test_from_kafka_without_a_group_reads_to_the_end_and_closes(kafka_broker: Any,
                                                                 kafka_topic: str) -> None:
    produce(kafka_broker, kafka_topic, [b"%d" % i for i in range(50)])
    source = Stream.from_kafka([kafka_topic], kafka_broker.config(), offset="earliest")
    out = source.map(int).sink_to_list()
    source.start()
    assert out == list(range(50))
    assert source.offsets == {(kafka_topic, 0): 50}


def test_from_kafka_to_kafka_at_least_once_commits_after_delivery(kafka_broker: Any) -> None:
    src = kafka_broker.create_topic("alo-in", partitions=2)
    dst = kafka_broker.create_topic("alo-out")
    produce(kafka_broker, src, [b"%d" % i for i in range(40)])
    params = kafka_broker.config(**{"group.id": "alo", "auto.offset.reset": "earliest",
                                    "session.timeout.ms": 6000})
    source = Stream.from_kafka([src], params, batch=7)
    source.map(lambda v: b"x" + v).to_kafka(dst, kafka_broker.config())
    source.start()
    assert sorted(read_all(kafka_broker, dst)) == sorted(b"x%d" % i for i in range(40))
    # The group's offsets are at the end: a second run reads nothing. A
    # partition the producer left empty may have no offset committed (-1001):
    # "earliest" is then its end too.
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(params)
    committed = c.committed([TopicPartition(src, 0), TopicPartition(src, 1)], timeout=30)
    c.close()
    assert sum(max(tp.offset, 0) for tp in committed) == 40
    assert all(tp.offset >= 0 or tp.offset == -1001 for tp in committed)


def test_from_kafka_at_a_time_and_an_offset(kafka_broker: Any, kafka_topic: str) -> None:
    produce(kafka_broker, kafka_topic, [b"%d" % i for i in range(10)])
    source = Stream.from_kafka(kafka_topic, kafka_broker.config(), offset=7)
    out = source.sink_to_list()
    source.start()
    assert out == [b"7", b"8", b"9"]
    meta = Stream.from_kafka(kafka_topic, kafka_broker.config(), offset="earliest",
                             with_meta=True)
    rows = meta.sink_to_list()
    meta.start()
    at = rows[4]["timestamp"] / 1000
    timed = Stream.from_kafka(kafka_topic, kafka_broker.config(), offset=at)
    got = timed.sink_to_list()
    timed.start()
    assert got[-1] == b"9" and len(got) >= 6  # messages at or after the 5th one's time


def test_from_kafka_on_a_loop_follows_and_applies_backpressure(kafka_broker: Any,
                                                                 kafka_topic: str) -> None:
    produce(kafka_broker, kafka_topic, [b"%d" % i for i in range(30)])
    in_sink = 0
    most = 0

    async def slow(x: bytes) -> None:
        nonlocal in_sink, most
        in_sink += 1
        most = max(most, in_sink)
        await asyncio.sleep(0)
        in_sink -= 1

    async def main() -> list[bytes]:
        source = Stream.from_kafka([kafka_topic], kafka_broker.config(), offset="earliest",
                                   asynchronous=True, batch=5)
        out = source.sink_to_list()
        source.sink(slow)
        task = source.start()
        for _ in range(10_000):
            if len(out) >= 30:
                break
            await asyncio.sleep(0.01)
        source.stop()
        await task
        return out

    out = asyncio.run(main())
    assert out == [b"%d" % i for i in range(30)]
    assert most == 1  # each element awaited through the sink before the next


def test_from_kafka_refuses_bad_arguments_at_build_time() -> None:
    with pytest.raises(ValueError, match=r"bootstrap\.servers"):
        Stream.from_kafka(["t"], {})
    with pytest.raises(ValueError, match="non-empty list"):
        Stream.from_kafka([], {"bootstrap.servers": "h:1"})
    with pytest.raises(ValueError, match="offset must be"):
        Stream.from_kafka(["t"], {"bootstrap.servers": "h:1"}, offset="newest")
    with pytest.raises(ValueError, match=r"transactional\.id"):
        Stream().to_kafka("t", {"bootstrap.servers": "h:1"}, transactional=True)


def test_checkpointed_from_kafka_resumes_at_its_offsets(kafka_broker: Any, kafka_topic: str,
                                                       tmp_path: Any) -> None:
    produce(kafka_broker, kafka_topic, [b"%d" % i for i in range(20)])

    def run(topic: str = kafka_topic) -> tuple[Any, list[int]]:
        source = Stream.from_kafka([topic], kafka_broker.config(), offset="earliest")
        totals = source.map(int).scan(lambda s, x: s + x, start=0).sink_to_list()
        cp = Checkpointer(source, tmp_path, every=3, fsync=False)
        source.start()
        return cp, totals

    cp, totals = run()
    assert totals[-1] == sum(range(20)) and not cp.restored
    produce(kafka_broker, kafka_topic, [b"100"])
    cp, totals = run()
    assert cp.restored and totals == [sum(range(20)) + 100]
    from streams import CheckpointError

    with pytest.raises(CheckpointError, match="covers topics"):
        run("another-topic")


def test_from_kafka_batched_in_process_commits_after_the_batches(kafka_broker: Any) -> None:
    topic = kafka_broker.create_topic("batched-in", partitions=2)
    kafka_broker.produce(topic, [b"%d" % i for i in range(30)], record_batches=False)
    params = kafka_broker.config(**{"group.id": "batched", "auto.offset.reset": "earliest"})
    batches = Stream.from_kafka_batched(topic, params, max_batch_size=4)
    out = batches.sink_to_list()
    batches.start()
    assert all(0 < len(b) <= 4 for b in out)
    assert sorted(int(v) for b in out for v in b) == list(range(30))
    again = Stream.from_kafka_batched(topic, params)  # the group's offsets are at the end
    more = again.sink_to_list()
    kafka_broker.produce(topic, [b"30"], partition=0, record_batches=False)
    again.start()
    assert more == [[b"30"]]
