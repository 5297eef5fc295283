"""from_kafka and to_kafka against a real Kafka-protocol broker (tansu)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import Checkpointer, Stream
from streams.sources.kafka_batched import get_message_batch

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


@pytest.mark.parametrize("group", [None, "batched-again"])
def test_from_kafka_batched_started_again_reads_the_batch_that_failed(
        kafka_broker: Any, group: str | None) -> None:
    topic = kafka_broker.create_topic(f"batched-again-{group}")
    kafka_broker.produce(topic, [b"%d" % i for i in range(10)], record_batches=False)
    params = kafka_broker.config(**{"auto.offset.reset": "earliest",
                                    **({"group.id": group} if group else {})})
    batches = Stream.from_kafka_batched(topic, params, max_batch_size=5)
    failing = [True]

    def check(batch: list[bytes]) -> list[bytes]:
        if failing[0] and b"5" in batch:
            raise ValueError("the second batch")
        return batch

    out = batches.map(check).flatten().sink_to_list()
    with pytest.raises(ValueError, match="the second batch"):
        batches.start()
    assert batches.upstreams[0].positions == {0: 5}  # not past the batch that failed
    failing[0] = False
    batches.start()  # the cause fixed, the same source again
    assert out == [b"%d" % i for i in range(10)]


def test_from_kafka_batched_on_a_loop_in_a_group_awaits_to_kafka_then_commits(
        kafka_broker: Any) -> None:
    from tests.streams.test_kafka_delivery import committed

    src = kafka_broker.create_topic("batched-loop-in", partitions=2)
    dst = kafka_broker.create_topic("batched-loop-out")
    kafka_broker.produce(src, [b"%d" % i for i in range(20)], record_batches=False)
    params = kafka_broker.config(**{"group.id": "batched-loop", "auto.offset.reset": "earliest"})

    async def main() -> None:
        batches = Stream.from_kafka_batched(src, params, poll_interval=0.01, max_batch_size=3,
                                            asynchronous=True)
        source = batches.upstreams[0]
        batches.flatten().to_kafka(dst, kafka_broker.config(**{"linger.ms": 20}))
        run = batches.start()
        for _ in range(6000):  # a hang guard: a minute
            if sum(source.positions.values()) == 20 or run.done():
                break
            await asyncio.sleep(0.01)
        source.stop()
        await run  # the flush was run inside the running loop: it raised

    asyncio.run(main())
    assert sorted(kafka_broker.read(dst)) == sorted(b"%d" % i for i in range(20))
    assert sum(committed(kafka_broker, params, src, 2)) == 20


def test_from_kafka_batched_is_built_back_from_its_description(kafka_broker: Any,
                                                              kafka_topic: str) -> None:
    from streams.snapshot import _source_identity
    from streams.spec import build

    kafka_broker.produce(kafka_topic, [b"%d" % i for i in range(7)], record_batches=False)
    params = kafka_broker.config(**{"group.id": "built-back", "auto.offset.reset": "earliest"})
    source = Stream.from_kafka_batched(kafka_topic, params, max_batch_size=3,
                                       poll_interval=0.5).upstreams[0]
    again = build(source.describe(), [])
    assert again.describe().params == source.describe().params
    # What a checkpoint records of its input is as before: the topic and the group.
    assert _source_identity(again) == {"topic": kafka_topic, "group": "built-back"}
    no_group = Stream.from_kafka_batched(kafka_topic, kafka_broker.config()).upstreams[0]
    assert _source_identity(build(no_group.describe(), [])) == {"topic": kafka_topic}
    out = again.starmap(get_message_batch).sink_to_list()
    again.start()
    assert out == [[b"0", b"1", b"2"], [b"3", b"4", b"5"], [b"6"]]


def test_kafka_sources_refuse_bad_sizes_and_offsets_at_build_time(kafka_broker: Any,
                                                                  kafka_topic: str) -> None:
    params = kafka_broker.config(**{"auto.offset.reset": "earliest"})
    for bad in ({"max_batch_size": 2.5}, {"max_batch_size": True}, {"max_batch_size": 0},
                {"npartitions": 1.5}, {"npartitions": False}):
        (name, _), = bad.items()
        with pytest.raises(ValueError, match=rf"from_kafka_batched\(\): {name} must be an int"):
            Stream.from_kafka_batched(kafka_topic, params, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"from_kafka\(\): offset .* offsets >= 0, got -5"):
        Stream.from_kafka([kafka_topic], params, offset={0: -5})
    for bad_offsets in ({"x": 1}, {0: "5"}, {0: 1.0}, {True: 1}):
        with pytest.raises(TypeError, match=r"from_kafka\(\): offset \{partition: offset\}"):
            Stream.from_kafka([kafka_topic], params, offset=bad_offsets)
    kafka_broker.produce(kafka_topic, [b"%d" % i for i in range(5)])
    source = Stream.from_kafka([kafka_topic], params, offset={"0": 3})  # a JSON object's key
    out = source.sink_to_list()
    source.start()
    assert out == [b"3", b"4"]
