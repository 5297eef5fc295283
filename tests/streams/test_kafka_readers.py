"""Consumers kept between range reads (``get_message_batch``), against the real broker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.clock import VirtualClock, use_clock

pytestmark = pytest.mark.kafka

PER_PARTITION = 40


@pytest.fixture(scope="module")
def two_partitions(kafka_broker: Any) -> str:
    """A topic whose partition ``p`` holds ``b"p:i"`` at offset ``i``."""
    topic = kafka_broker.create_topic("kept-readers", partitions=2)
    for p in (0, 1):
        kafka_broker.produce(topic, [b"%d:%d" % (p, i) for i in range(PER_PARTITION)],
                             partition=p)
    return topic


@pytest.fixture(autouse=True)
def no_kept_readers() -> Iterator[None]:
    from streams.sources.kafka_readers import close_idle_readers

    close_idle_readers()
    yield
    close_idle_readers()


ranges = st.lists(st.tuples(st.integers(0, 1), st.integers(0, PER_PARTITION - 1),
                            st.integers(1, PER_PARTITION)), min_size=1, max_size=6)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reads=ranges)
def test_each_read_through_a_kept_consumer_is_exactly_its_range(
        kafka_broker: Any, two_partitions: str, reads: list[tuple[int, int, int]]) -> None:
    from streams.sources.kafka_batched import get_message_batch
    from streams.sources.kafka_readers import close_idle_readers

    params = kafka_broker.config(**{"group.id": "kept"})
    for p, low, length in reads:
        high = min(low + length, PER_PARTITION) - 1
        assert get_message_batch(params, two_partitions, p, False, low, high) == [
            b"%d:%d" % (p, i) for i in range(low, high + 1)]
    # One configuration, one read at a time: one consumer a partition read.
    assert close_idle_readers() == len({p for p, _, _ in reads})


def test_a_consumer_whose_read_raised_is_closed_not_kept(kafka_broker: Any,
                                                         two_partitions: str) -> None:
    from streams.sources.kafka_readers import close_idle_readers, range_reader

    with pytest.raises(ValueError, match="downstream"), \
            range_reader(kafka_broker.config(), two_partitions, 0, 0) as reader:
        raise ValueError("downstream")
    with pytest.raises(RuntimeError, match="closed"):
        reader.consumer.assignment()
    assert close_idle_readers() == 0


def test_a_kept_consumer_idle_too_long_is_closed_at_the_next_read(
        kafka_broker: Any, two_partitions: str) -> None:
    from streams.sources.kafka_batched import get_message_batch
    from streams.sources.kafka_readers import IDLE_SECONDS, close_idle_readers, range_reader

    clock = VirtualClock()
    with use_clock(clock):
        get_message_batch(kafka_broker.config(**{"group.id": "a"}), two_partitions, 0, False,
                          0, 1)
        with range_reader(kafka_broker.config(**{"group.id": "a"}), two_partitions, 0,
                          2) as first:
            pass  # the one kept: no new consumer
        clock.advance(IDLE_SECONDS + 1)
        assert get_message_batch(kafka_broker.config(**{"group.id": "b"}), two_partitions, 1,
                                 False, 0, 1) == [b"1:0", b"1:1"]
    with pytest.raises(RuntimeError, match="closed"):
        first.consumer.assignment()  # closed by the read after its idle time
    assert close_idle_readers() == 1  # the second read's


def test_a_range_ending_in_a_transaction_marker_ends_there(kafka_broker: Any) -> None:
    # A transactional producer's commit marker takes the partition's last
    # offset and is never delivered: the read must end at its position, not
    # wait for a message at that offset (for ever, without a timeout).
    import threading

    from confluent_kafka import Consumer, Producer, TopicPartition

    from streams.sources.kafka_batched import get_message_batch

    topic = kafka_broker.create_topic("txn-range", partitions=1)
    producer = Producer(kafka_broker.config(**{"transactional.id": "txn-range"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, b"%d" % i, partition=0)
    producer.commit_transaction(30)
    probe = Consumer(kafka_broker.config(**{"group.id": "txn-probe"}))
    _, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    probe.close()
    assert high > 5  # the marker holds an offset of its own
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.extend(get_message_batch(
        kafka_broker.config(**{"group.id": "txn-range"}), topic, 0, False, 0, high - 1)),
        daemon=True)
    reader.start()
    reader.join(120)  # a bound for a hang, not a timing
    assert not reader.is_alive(), "the read waits for an offset no message holds"
    assert got == [b"%d" % i for i in range(5)]


def test_the_next_range_of_a_partition_reads_on_through_the_same_assigned_consumer(
        kafka_broker: Any, two_partitions: str) -> None:
    from confluent_kafka import TopicPartition

    from streams.sources.kafka_batched import get_message_batch
    from streams.sources.kafka_readers import close_idle_readers, range_reader

    params = kafka_broker.config(**{"group.id": "read-on"})
    with range_reader(params, two_partitions, 0, 0) as first:
        pass  # assigned at 0, nothing read: the next range at 0 takes it as it is
    got = [m for low, high in ((0, 9), (10, 10), (11, 29), (30, PER_PARTITION - 1))
           for m in get_message_batch(params, two_partitions, 0, False, low, high)]
    assert got == [b"0:%d" % i for i in range(PER_PARTITION)]
    with range_reader(params, two_partitions, 0, PER_PARTITION) as last:
        assert last is first  # still assigned: read on, not reassigned
        assert last.consumer.assignment() == [TopicPartition(two_partitions, 0)]
    assert close_idle_readers() == 1


def test_past_the_kept_limit_a_partitions_consumer_is_reassigned_not_added(
        kafka_broker: Any, two_partitions: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.sources import kafka_readers
    from streams.sources.kafka_batched import get_message_batch

    monkeypatch.setattr(kafka_readers, "MAX_KEPT", 1)
    params = kafka_broker.config(**{"group.id": "one-kept"})
    got: dict[int, list[bytes]] = {0: [], 1: []}
    for low in range(0, PER_PARTITION, 10):
        for p in (0, 1):
            got[p] += get_message_batch(params, two_partitions, p, False, low, low + 9)
    assert got == {p: [b"%d:%d" % (p, i) for i in range(PER_PARTITION)] for p in (0, 1)}
    assert kafka_readers.close_idle_readers() == 1


def test_ranges_across_transaction_markers_read_each_message_once(kafka_broker: Any) -> None:
    # Offsets 0-4 and 6-10 hold messages, 5 and 11 commit markers: a read
    # that ends on a marker may take the next range's first message from
    # its consumer; that one must be the next range's, not lost.
    from confluent_kafka import Producer

    from streams.sources.kafka_batched import get_message_batch

    topic = kafka_broker.create_topic("txn-ranges", partitions=1)
    producer = Producer(kafka_broker.config(**{"transactional.id": "txn-ranges"}))
    producer.init_transactions(30)
    for t in range(2):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, b"%d" % (5 * t + i), partition=0)
        producer.commit_transaction(30)
    params = kafka_broker.config(**{"group.id": "txn-ranges"})
    for cuts in (((0, 5), (6, 11)), ((0, 2), (3, 7), (8, 11)), ((0, 4), (5, 5), (6, 11))):
        got = [get_message_batch(params, topic, 0, False, low, high) for low, high in cuts]
        assert [m for batch in got for m in batch] == [b"%d" % i for i in range(10)], cuts
