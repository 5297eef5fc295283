"""from_kafka_batched(dask=True): read on the Dask workers, offsets committed after gather()."""

from __future__ import annotations

from typing import Any

import pytest

from streams import Stream

pytestmark = [pytest.mark.kafka, pytest.mark.dask]


def test_batches_are_read_on_the_workers_and_committed_after_gather(
        kafka_broker: Any, client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka import Consumer, TopicPartition

    from streams.sources.kafka_batched import FromKafkaBatched

    topic = kafka_broker.create_topic("dask-batched", partitions=2)
    kafka_broker.produce(topic, [b"%d" % i for i in range(40)], record_batches=False)
    params = kafka_broker.config(**{"group.id": "dask-batched",
                                    "auto.offset.reset": "earliest"})
    batches = Stream.from_kafka_batched(topic, params, dask=True, max_batch_size=6,
                                        client=client)
    at_commit: list[tuple[int, int]] = []
    out = batches.gather().sink_to_list()
    commit = FromKafkaBatched._done

    def spy(self: Any, consumer: Any, n: int) -> Any:
        result = commit(self, consumer, n)
        # (messages planned so far, messages gather() had delivered) when committed
        at_commit.append((sum(self.positions.values()), sum(map(len, out))))
        return result

    monkeypatch.setattr(FromKafkaBatched, "_done", spy)
    assert batches.describe().backend == "dask"
    batches.start()
    assert sorted(int(v) for b in out for v in b) == list(range(40))
    # Each commit came after the results of every batch planned so far were delivered.
    c = Consumer(params)
    committed = c.committed([TopicPartition(topic, p) for p in range(2)], timeout=30)
    c.close()
    assert sum(tp.offset for tp in committed) == 40
    assert at_commit and all(planned == delivered for planned, delivered in at_commit)
    assert at_commit[-1] == (40, 40)


def test_ranges_read_out_of_order_and_on_either_worker_are_each_exactly_their_messages(
        kafka_broker: Any, client: Any) -> None:
    import random

    from streams.sources.kafka_batched import get_message_batch

    topic = kafka_broker.create_topic("dask-ranges", partitions=2)
    for p in (0, 1):
        kafka_broker.produce(topic, [b"%d:%d" % (p, i) for i in range(60)], partition=p)
    params = kafka_broker.config(**{"group.id": "dask-ranges"})
    ranges = [(p, low, low + 9) for low in range(0, 60, 10) for p in (0, 1)]
    # In order (each worker's kept consumer reads on), then shuffled.
    ranges += random.Random(7).sample(ranges, len(ranges))
    workers = sorted(client.scheduler_info()["workers"])
    futures = [client.submit(get_message_batch, params, topic, p, False, low, high,
                             workers=[workers[i % len(workers)]], pure=False)
               for i, (p, low, high) in enumerate(ranges)]
    for (p, low, high), got in zip(ranges, client.gather(futures), strict=True):
        assert got == [b"%d:%d" % (p, i) for i in range(low, high + 1)]
