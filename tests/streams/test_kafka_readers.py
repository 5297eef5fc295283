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
