"""to_kafka under from_kafka: in a consumer group each batch's messages in one produce_batch(),
without one each message produced as it comes."""

from __future__ import annotations

from typing import Any

import pytest

from streams import Stream
from tests.streams.test_kafka_delivery import committed as committed_by

pytestmark = pytest.mark.kafka


def committed(params: dict[str, Any], topic: str, partitions: int) -> list[int]:
    return committed_by(None, params, topic, partitions)


def group(broker: Any, name: str) -> dict[str, Any]:
    return broker.config(**{"group.id": name, "auto.offset.reset": "earliest",
                            "session.timeout.ms": 6000})


def pipeline(broker: Any, name: str, values: list[bytes], batch: int
             ) -> tuple[str, str, dict[str, Any], Stream[Any]]:
    """Topics ``name``-in (holding ``values``) and ``name``-out, and a group's source."""
    src = broker.create_topic(f"{name}-in")
    dst = broker.create_topic(f"{name}-out")
    broker.produce(src, values)
    params = group(broker, name)
    return src, dst, params, Stream.from_kafka([src], params, batch=batch)


class Handed:
    """For each element: the messages handed to the producer, and where its batch began.

    The source's offsets move at a batch's end: every earlier batch's
    messages, and none of this one's, are handed over when they are equal.
    """

    def __init__(self, source: Any, topic: str) -> None:
        self.source, self.topic = source, topic
        self.sink: Any = None
        self.handed: list[int] = []
        self.began: list[int] = []

    def __call__(self, v: bytes) -> bytes:
        self.handed.append(self.sink._sent)
        self.began.append(self.source.offsets.get((self.topic, 0), 0))
        return v


def test_a_batchs_messages_are_handed_over_at_its_end_and_none_before(
        kafka_broker: Any) -> None:
    src, dst, params, source = pipeline(kafka_broker, "held",
                                        [b"%02d" % i for i in range(60)], 7)
    note = Handed(source, src)
    note.sink = source.map(note).to_kafka(dst, kafka_broker.config(**{"linger.ms": 20}))
    source.start()
    assert note.handed == note.began
    assert any(h < i for i, h in enumerate(note.handed))  # messages were held
    assert kafka_broker.read(dst) == [b"%02d" % i for i in range(60)]
    assert committed(params, src, 1) == [60]


@pytest.mark.parametrize("element", ["bytes", "keyed", "str"])
def test_without_a_group_each_message_is_produced_as_it_comes(kafka_broker: Any,
                                                             element: str) -> None:
    src = kafka_broker.create_topic(f"direct-{element}-in")
    dst = kafka_broker.create_topic(f"direct-{element}-out")
    kafka_broker.produce(src, [b"%02d" % i for i in range(30)])
    source = Stream.from_kafka([src], kafka_broker.config(), offset="earliest", batch=7)
    queued: list[int] = []
    sink: Any = None

    def note(v: bytes) -> bytes:
        # Nothing leaves the producer's queue before close (linger.ms), which
        # then holds every message handed over so far.
        queued.append(len(sink._producer) + len(sink._held))
        assert not sink._held
        return v

    noted = source.map(note) if element != "str" else source.map(note).map(bytes.decode)
    sink = noted.to_kafka(dst, kafka_broker.config(**{"linger.ms": 250_000}),
                          key=(lambda v: v[1:]) if element == "keyed" else None)
    source.start()
    assert queued == list(range(30))
    assert read_keyed(kafka_broker, dst) == [
        (b"%d" % (i % 10) if element == "keyed" else None, b"%02d" % i) for i in range(30)]


def test_stopped_inside_a_batch_what_was_processed_is_written_and_committed(
        kafka_broker: Any) -> None:
    src, dst, params, source = pipeline(kafka_broker, "held-stop",
                                        [b"%02d" % i for i in range(50)], 20)

    def stop_after_36(v: bytes) -> bytes:
        if v == b"36":  # the 37th, inside the second batch
            source.stop()
        return v

    source.map(stop_after_36).to_kafka(dst, kafka_broker.config(**{"linger.ms": 20}))
    source.start()
    assert kafka_broker.read(dst) == [b"%02d" % i for i in range(37)]
    assert committed(params, src, 1) == [37]


@pytest.mark.parametrize("queue", [7, 1000])
def test_each_partitions_order_is_kept_and_nothing_lost_when_the_queue_is_full(
        kafka_broker: Any, queue: int) -> None:
    src = kafka_broker.create_topic(f"held-order-in-{queue}", partitions=2)
    dst = kafka_broker.create_topic(f"held-order-out-{queue}", partitions=2)
    for p in (0, 1):
        kafka_broker.produce(src, [b"%d-%03d" % (p, i) for i in range(200)], partition=p)
    params = group(kafka_broker, f"held-order-{queue}")
    source = Stream.from_kafka([src], params, batch=50)
    # A queue of 7 messages refuses most of each batch: the rest is sent
    # again, in order, once the broker has taken some.
    source.to_kafka(dst, kafka_broker.config(**{"queue.buffering.max.messages": queue,
                                                "linger.ms": 5}),
                    key=lambda v: v[:1])
    source.start()
    out = kafka_broker.read(dst)
    assert sorted(out) == sorted(b"%d-%03d" % (p, i) for p in (0, 1) for i in range(200))
    for p in (0, 1):  # a key's messages go to one partition, in the order read
        assert [v for v in out if v.startswith(b"%d-" % p)] == [
            b"%d-%03d" % (p, i) for i in range(200)]
    assert committed(params, src, 2) == [200, 200]


def test_a_message_the_producer_refuses_fails_the_node_naming_it(kafka_broker: Any) -> None:
    big = b"x" * 5000
    values = [b"%d" % i for i in range(5)] + [big] + [b"%d" % i for i in range(6, 10)]
    src, dst, params, source = pipeline(kafka_broker, "held-refused", values, 100)
    sink = source.to_kafka(dst, kafka_broker.config(**{"message.max.bytes": 1000}))
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException, match=r"to_kafka.*failed on element b'xxx.*too large") as e:
        source.start()
    assert e.value.element == big  # type: ignore[attr-defined]
    sink.flush()
    # The rest of the batch was written; the batch is not committed.
    assert kafka_broker.read(dst) == [v for v in values if v != big]
    assert committed(params, src, 1) == [-1001]


def test_without_a_group_a_refused_message_fails_the_node_naming_it(kafka_broker: Any) -> None:
    big = b"x" * 5000
    values = [b"%d" % i for i in range(5)] + [big] + [b"%d" % i for i in range(6, 10)]
    src = kafka_broker.create_topic("direct-refused-in")
    dst = kafka_broker.create_topic("direct-refused-out")
    kafka_broker.produce(src, values)
    source = Stream.from_kafka([src], kafka_broker.config(), offset="earliest", batch=100)
    sink = source.to_kafka(dst, kafka_broker.config(**{"message.max.bytes": 1000}))
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException, match=r"to_kafka.*failed on element b'xxx.*too large") as e:
        source.start()
    assert e.value.element == big  # type: ignore[attr-defined]
    sink.flush()
    # Produced as they came: those before it; the source stopped there.
    assert kafka_broker.read(dst) == values[:5]
    assert source.offsets == {(src, 0): 5}


def test_a_refused_message_routed_to_the_error_stream_lets_the_batch_commit(
        kafka_broker: Any) -> None:
    big = b"x" * 5000
    src, dst, params, source = pipeline(kafka_broker, "held-routed", [b"a", big, b"c"], 100)
    sink = source.to_kafka(dst, kafka_broker.config(**{"message.max.bytes": 1000}))
    failed = sink.on_error("route").errors.sink_to_list()
    source.start()
    assert [r.element for r in failed] == [big]
    assert kafka_broker.read(dst) == [b"a", b"c"]
    assert committed(params, src, 1) == [3]


def test_a_failed_delivery_inside_a_batch_is_raised_with_its_element(kafka_broker: Any) -> None:
    src, _, params, source = pipeline(kafka_broker, "held-lost", [b"%d" % i for i in range(5)], 100)
    # Nothing listens there: every message times out, after 200 ms.
    sink = source.to_kafka("t", {"bootstrap.servers": "127.0.0.1:9",
                                 "message.timeout.ms": 200, "log_level": 0})
    with pytest.raises(RuntimeError, match="delivery failed") as e:
        source.start()
    assert e.value.element in {b"%d" % i for i in range(5)}  # type: ignore[attr-defined]
    sink.flush()
    assert committed(params, src, 1) == [-1001]


def test_elements_emitted_one_by_one_are_produced_as_they_come() -> None:
    source = Stream()
    sink = source.to_kafka("t", {"bootstrap.servers": "127.0.0.1:9", "log_level": 0,
                                 "message.timeout.ms": 200})
    source.emit(b"now")
    assert sink._sent == 1 and not sink._held  # in the producer's queue, not held
    with pytest.raises(RuntimeError, match="delivery failed"):
        sink.flush()


def test_a_transactional_sink_in_a_group_writes_each_message_with_its_headers(
        kafka_broker: Any) -> None:
    src, dst, params, source = pipeline(kafka_broker, "held-txn",
                                        [b"%02d" % i for i in range(30)], 7)
    # produce_batch() takes no headers: these messages are never held.
    sink = source.to_kafka(dst, kafka_broker.config(**{"transactional.id": "held-txn"}),
                           transactional=True)
    source.start()
    assert kafka_broker.read(dst, committed=True) == [b"%02d" % i for i in range(30)]
    assert sink.written == 30
    assert committed(params, src, 1) == [30]
    sink.written, sink.marks = 0, None  # as a fresh writer: its messages found by their headers
    assert sink._already_written() == set(range(30))


def read_keyed(broker: Any, topic: str) -> list[tuple[bytes | None, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(broker.config(**{"group.id": "test-reader", "enable.partition.eof": True}))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[bytes | None, bytes]] = []
        for _ in range(100):
            msgs = c.consume(1000, timeout=1.0)
            out += [(m.key(), m.value()) for m in msgs if m.error() is None]
            if any(m.error() is not None for m in msgs):
                return out
        raise AssertionError(f"{topic} did not end")
    finally:
        c.close()


@pytest.mark.parametrize("keyed", [True, False])
def test_keyed_and_str_elements_are_held_too(kafka_broker: Any, keyed: bool) -> None:
    src, dst, params, source = pipeline(kafka_broker, f"held-keyed-{keyed}",
                                        [b"%02d" % i for i in range(30)], 7)
    note = Handed(source, src)
    # A key, or a str to convert: the sink's update, not the fused step.
    noted = source.map(note) if keyed else source.map(note).map(bytes.decode)
    note.sink = noted.to_kafka(dst, kafka_broker.config(),
                               key=(lambda v: v[1:]) if keyed else None)
    source.start()
    assert note.handed == note.began
    assert read_keyed(kafka_broker, dst) == [
        (b"%d" % (i % 10) if keyed else None, b"%02d" % i) for i in range(30)]
    assert committed(params, src, 1) == [30]


def test_a_refused_message_leaves_no_node_or_producer_behind(kafka_broker: Any) -> None:
    # confluent-kafka's produce() raising while another exception is handled
    # keeps that exception (its issue 1266), whose frames hold the graph: the
    # sink's retry must not run inside the handler of the first refusal.
    import gc
    import weakref

    from confluent_kafka import KafkaException

    src = kafka_broker.create_topic("refused-collected-in")
    dst = kafka_broker.create_topic("refused-collected-out")
    kafka_broker.produce(src, [b"a", b"x" * 5000, b"c"])
    source = Stream.from_kafka([src], kafka_broker.config(), offset="earliest", batch=100)
    sink = source.to_kafka(dst, kafka_broker.config(**{"message.max.bytes": 1000}))
    try:
        source.start()
    except KafkaException as e:
        assert e.element == b"x" * 5000  # type: ignore[attr-defined]
    else:
        raise AssertionError("the refused message did not fail the node")
    sink.flush()
    probe = weakref.ref(sink)
    del source, sink
    gc.collect()
    assert probe() is None



def test_an_error_downstream_of_a_delivery_is_raised_and_leaves_nothing_behind(
        kafka_broker: Any) -> None:
    # An exception leaving a delivery callback through confluent-kafka's
    # flush() is kept by it: the sink raises it from Python instead.
    import gc
    import weakref

    dst = kafka_broker.create_topic("delivered-fails-out")
    source: Stream[bytes] = Stream()
    sink = source.to_kafka(dst, kafka_broker.config())
    seen = sink.map(lambda v: 1 // (v != b"b")).sink_to_list()  # fails on b"b"
    for v in (b"a", b"b", b"c"):
        source.emit(v)
    with pytest.raises(ZeroDivisionError, match=r"map\(<lambda>\) failed on element b'b'"):
        source.close()
    assert kafka_broker.read(dst) == [b"a", b"b", b"c"]
    assert seen == [1, 1]  # the other reports of the flush were served
    probe = weakref.ref(sink)
    del source, sink
    gc.collect()
    assert probe() is None
