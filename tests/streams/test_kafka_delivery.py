"""from_kafka's offsets and commits, and to_kafka's delivery reports, batch after batch."""

from __future__ import annotations

from typing import Any

import pytest

from streams import Stream
from streams.sinks.kafka import ToKafka

pytestmark = pytest.mark.kafka


def committed(broker: Any, params: dict[str, Any], topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(params)
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        c.close()
    return [tp.offset for tp in tps]


def test_many_small_batches_lose_nothing_and_keep_each_partitions_order(
        kafka_broker: Any) -> None:
    src = kafka_broker.create_topic("many-in", partitions=2)
    dst = kafka_broker.create_topic("many-out")
    for p in (0, 1):
        kafka_broker.produce(src, [b"%d-%03d" % (p, i) for i in range(150)], partition=p)
    params = kafka_broker.config(**{"group.id": "many", "auto.offset.reset": "earliest",
                                    "session.timeout.ms": 6000})
    source = Stream.from_kafka([src], params, batch=7)
    seen = source.sink_to_list()
    source.map(lambda v: b"x" + v).to_kafka(dst, kafka_broker.config(**{"linger.ms": 20}))
    source.start()
    out = kafka_broker.read(dst)
    assert sorted(out) == sorted(b"x%d-%03d" % (p, i) for p in (0, 1) for i in range(150))
    for p in (0, 1):  # one output partition: each input partition's messages in order
        mine = [v for v in out if v.startswith(b"x%d-" % p)]
        assert mine == [b"x%d-%03d" % (p, i) for i in range(150)]
    assert len(seen) == 300
    assert source.offsets == {(src, 0): 150, (src, 1): 150}
    assert committed(kafka_broker, params, src, 2) == [150, 150]


def test_offsets_cover_exactly_what_was_processed_when_stopped_inside_a_batch(
        kafka_broker: Any, kafka_topic: str) -> None:
    kafka_broker.produce(kafka_topic, [b"%d" % i for i in range(100)])
    source = Stream.from_kafka([kafka_topic], kafka_broker.config(), offset="earliest",
                               batch=1000)
    out: list[bytes] = []

    def take(v: bytes) -> None:
        out.append(v)
        if len(out) == 37:
            source.stop()

    source.sink(take)
    source.start()
    assert out == [b"%d" % i for i in range(37)]
    assert source.offsets == {(kafka_topic, 0): 37}
    more = source.sink_to_list()
    source.start()  # resumes past the 37 processed, nothing skipped
    assert more == [b"%d" % i for i in range(37, 100)]


def test_a_failed_batch_is_not_committed_and_is_read_again(kafka_broker: Any,
                                                           kafka_topic: str) -> None:
    kafka_broker.produce(kafka_topic, [b"%d" % i for i in range(20)])
    dst = kafka_broker.create_topic("failed-out")
    params = kafka_broker.config(**{"group.id": "failed", "auto.offset.reset": "earliest",
                                    "session.timeout.ms": 6000})

    def fail_on_the_last(v: bytes) -> bytes:
        if v == b"19":
            raise ValueError("the last one")
        return v

    source = Stream.from_kafka([kafka_topic], params)
    sink = source.map(fail_on_the_last).to_kafka(dst, kafka_broker.config(**{"linger.ms": 50}))
    with pytest.raises(ValueError, match="the last one"):
        source.start()
    # The producer holds the delivery callbacks of what it still queues, out
    # of the cycle collector's sight: flushed, it lets the graph go.
    sink.flush()
    # Nothing is committed after the failure (leaving the group included): at
    # most what earlier batches, confirmed, had committed; never the failed one.
    done = committed(kafka_broker, params, kafka_topic, 1)[0]
    assert done <= 19
    assert set(kafka_broker.read(dst)) >= {b"%d" % i for i in range(done)}
    again = Stream.from_kafka([kafka_topic], params)
    again.to_kafka(dst, kafka_broker.config())
    again.start()
    assert set(kafka_broker.read(dst)) == {b"%d" % i for i in range(20)}  # at least once
    assert committed(kafka_broker, params, kafka_topic, 1) == [20]


def test_a_failed_delivery_is_raised_when_only_failures_are_reported() -> None:
    source = Stream()
    # Nothing listens there: every message times out, after 200 ms.
    sink = source.to_kafka("t", {"bootstrap.servers": "127.0.0.1:9",
                                 "message.timeout.ms": 200, "log_level": 0})
    source.emit(b"lost")
    assert not sink._all_reports  # no transaction, no downstream node, no token
    with pytest.raises(RuntimeError, match="delivery failed"):
        sink.flush()


def test_to_kafka_emits_what_was_delivered_downstream_added_late_included(
        kafka_broker: Any, kafka_topic: str) -> None:
    source = Stream()
    sink = source.to_kafka(kafka_topic, kafka_broker.config())
    source.emit(b"before")
    assert not sink._all_reports
    delivered = sink.sink_to_list()  # successes now have a reader: reported
    source.emit(b"after")
    sink.flush()
    assert delivered == [b"after"]
    assert kafka_broker.read(kafka_topic) == [b"before", b"after"]


class _Producer:
    """Holds the delivery callbacks of what is produced; a test calls them in any order."""

    def __init__(self) -> None:
        self.reports: list[tuple[Any, bytes]] = []

    def produce(self, topic: str, value: bytes, key: Any = None, on_delivery: Any = None,
                headers: Any = None) -> None:
        self.reports.append((on_delivery, value))

    def deliver(self, value: bytes) -> None:
        (cb,) = [cb for cb, v in self.reports if v == value]

        class Msg:
            def value(self) -> bytes:
                return value

        cb(None, Msg())

    def poll(self, timeout: float = 0) -> int:
        return 0

    def __len__(self) -> int:
        return 0


def test_a_token_is_confirmed_by_its_own_messages_not_by_later_ones() -> None:
    source = Stream()
    sink = source.to_kafka("t", {"bootstrap.servers": "127.0.0.1:9"})
    producer = _Producer()
    sink._producer, sink._all_reports = producer, True
    sink._deferring = True  # as a source confirming writes a batch late
    source.emit(b"a")
    first = sink._barrier_send()
    source.emit(b"b")
    second = sink._barrier_send()
    producer.deliver(b"b")  # another partition's broker answered first
    assert sink._barrier_ready(second)
    assert not sink._barrier_ready(first)  # "a" may still fail
    producer.deliver(b"a")
    assert sink._barrier_ready(first)
    sink._barrier_confirm(first)
    sink._deferring = False


def test_to_kafka_keeps_its_description() -> None:
    sink = Stream().to_kafka("t", {"bootstrap.servers": "h:1", "linger.ms": 5})
    assert isinstance(sink, ToKafka)
    assert sink.describe().params["producer_config"] == {"bootstrap.servers": "h:1",
                                                         "linger.ms": 5}


def test_from_kafka_batched_asks_for_watermarks_only_near_the_last_one_known(
        kafka_broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.sources.kafka_batched import FromKafkaBatched

    topic = kafka_broker.create_topic("batched-marks", partitions=2)
    for p in (0, 1):
        kafka_broker.produce(topic, [b"%d" % (100 * p + i) for i in range(30)], partition=p,
                             record_batches=False)
    asked: list[int] = []
    connect = FromKafkaBatched._connect

    class Counting:
        def __init__(self, consumer: Any) -> None:
            self.consumer = consumer

        def get_watermark_offsets(self, tp: Any, timeout: float) -> Any:
            asked.append(tp.partition)
            return self.consumer.get_watermark_offsets(tp, timeout=timeout)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.consumer, name)

    monkeypatch.setattr(FromKafkaBatched, "_connect", lambda self: Counting(connect(self)))
    batches = Stream.from_kafka_batched(topic, kafka_broker.config(
        **{"auto.offset.reset": "earliest"}), max_batch_size=4)
    out = batches.sink_to_list()
    batches.start()
    assert all(0 < len(b) <= 4 for b in out)
    assert sorted(int(v) for b in out for v in b) == sorted(
        100 * p + i for p in (0, 1) for i in range(30))
    # 8 polls a partition; asked at the first, near the end and at the end.
    assert len(asked) <= 2 * 4


def test_on_a_loop_offsets_follow_each_awaited_element(kafka_broker: Any,
                                                       kafka_topic: str) -> None:
    import asyncio

    kafka_broker.produce(kafka_topic, [b"%d" % i for i in range(100)])
    seen_offsets: list[int] = []

    async def main() -> Any:
        source = Stream.from_kafka([kafka_topic], kafka_broker.config(), offset="earliest",
                                   asynchronous=True, batch=1000)

        async def slow(v: bytes) -> None:
            # Every element before this one has been awaited through the sink.
            seen_offsets.append(source.offsets.get((kafka_topic, 0), 0))
            await asyncio.sleep(0)
            if v == b"36":
                source.stop()

        source.sink(slow)
        await source.start()
        return source

    source = asyncio.run(main())
    assert seen_offsets == list(range(37))
    assert source.offsets == {(kafka_topic, 0): 37}


class Refused(Exception):
    """Raised by a consumer that only notes its configuration (see ``consumer_configs``)."""


def consumer_configs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The configurations of the consumers created from here on; each raises ``Refused``."""
    import confluent_kafka

    configs: list[dict[str, Any]] = []

    def consumer(config: dict[str, Any]) -> Any:
        configs.append(config)
        raise Refused

    monkeypatch.setattr(confluent_kafka, "Consumer", consumer)
    return configs


def test_from_kafka_waits_10_ms_to_fetch_again_unless_told(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    configs = consumer_configs(monkeypatch)
    for given in ({}, {"fetch.queue.backoff.ms": 500}):
        source = Stream.from_kafka(["t"], {"bootstrap.servers": "127.0.0.1:9", **given})
        with pytest.raises(Refused):
            source.start()
    assert [c["fetch.queue.backoff.ms"] for c in configs] == [10, 500]


@pytest.mark.parametrize("grouped", [False, True])
def test_read_to_the_end_a_fetch_waits_5_ms_and_all_brokers_connect_unless_told(
        monkeypatch: pytest.MonkeyPatch, grouped: bool) -> None:
    configs = consumer_configs(monkeypatch)
    group = {"group.id": "g"} if grouped else {}
    for given in ({}, {"fetch.wait.max.ms": 100, "enable.sparse.connections": True}):
        source = Stream.from_kafka(["t"], {"bootstrap.servers": "127.0.0.1:9", **group, **given})
        with pytest.raises(Refused):
            source.start()  # no loop: reads to the end
    assert [c["fetch.wait.max.ms"] for c in configs] == [5, 100]
    # Only without a group are the partitions asked for before reading.
    assert [c.get("enable.sparse.connections") for c in configs] == (
        [None, True] if grouped else [False, True])


def test_on_a_loop_a_group_member_stops_commits_and_leaves(kafka_broker: Any) -> None:
    import asyncio

    src = kafka_broker.create_topic("loop-group-in", partitions=2)
    dst = kafka_broker.create_topic("loop-group-out")
    for p in (0, 1):
        kafka_broker.produce(src, [b"%d-%02d" % (p, i) for i in range(30)], partition=p)
    params = kafka_broker.config(**{"group.id": "loop-group", "auto.offset.reset": "earliest",
                                    "session.timeout.ms": 6000})

    async def main() -> Any:
        source = Stream.from_kafka([src], params, asynchronous=True, batch=7)
        seen = 0

        def count(v: bytes) -> bytes:
            nonlocal seen
            seen += 1
            if seen == 60:
                source.stop()
            return v

        source.map(count).to_kafka(dst, kafka_broker.config())
        await source.start()  # leaving the group on close commits, without a loop of its own
        return source

    source = asyncio.run(main())
    assert sorted(kafka_broker.read(dst)) == sorted(
        b"%d-%02d" % (p, i) for p in (0, 1) for i in range(30))
    assert source.offsets == {(src, 0): 30, (src, 1): 30}
    assert committed(kafka_broker, params, src, 2) == [30, 30]


def test_a_partition_is_at_its_end_until_a_message_past_it_is_read() -> None:
    import confluent_kafka as ck

    source = Stream.from_kafka(["t"], {"bootstrap.servers": "127.0.0.1:9"})
    eof = ck.KafkaError(ck.KafkaError._PARTITION_EOF)

    def end(partition: int, at: int) -> Any:
        return ck.Message(topic="t", partition=partition, offset=at, error=eof)

    both = {("t", 0), ("t", 1)}
    got = source._sorted_out([ck.Message(topic="t", partition=0, offset=4, value=b"x"),
                              end(0, 5)])
    assert [m.offset() for m in got] == [4]
    source.offsets[("t", 0)] = 5  # the batch went through: past offset 4
    assert not source._at_end(both)  # partition 1's end not reported yet
    source._sorted_out([end(1, 0)])
    assert source._at_end(both)  # nothing read in partition 1: at its end
    source.offsets[("t", 0)] = 7  # two messages came in partition 0 after its end
    assert not source._at_end(both)
    source._sorted_out([end(0, 7)])
    assert source._at_end(both)


def test_an_empty_partition_ends_while_the_other_is_read_in_small_batches(
        kafka_broker: Any) -> None:
    topic = kafka_broker.create_topic("one-empty", partitions=2)
    kafka_broker.produce(topic, [b"%02d" % i for i in range(50)], partition=0)
    source = Stream.from_kafka([topic], kafka_broker.config(), offset="earliest", batch=7)
    seen = source.sink_to_list()
    source.start()
    assert seen == [b"%02d" % i for i in range(50)]
    assert source.offsets == {(topic, 0): 50}


def test_a_node_connected_inside_a_batch_sees_the_rest_of_that_batch(
        kafka_broker: Any, kafka_topic: str) -> None:
    kafka_broker.produce(kafka_topic, [b"%02d" % i for i in range(20)])
    source = Stream.from_kafka([kafka_topic], kafka_broker.config(), offset="earliest",
                               batch=1000)
    late: list[bytes] = []

    def connect_at_5(v: bytes) -> None:
        if v == b"05":
            source.sink(late.append)

    source.sink(connect_at_5)
    source.start()
    assert late == [b"%02d" % i for i in range(6, 20)]


class Unstartable(Stream[Any]):
    """A sink that buffers output (it has a barrier) and cannot start holding a batch."""

    def _barrier(self) -> None:
        return None

    def _hold_batches(self, on: bool) -> None:
        if on:
            raise ConnectionError("the sink's server is down")


def test_a_sink_failing_to_start_leaves_no_consumer_in_the_group(kafka_broker: Any) -> None:
    src = kafka_broker.create_topic("unstarted", partitions=2)
    for p in (0, 1):
        kafka_broker.produce(src, [b"%d-%d" % (p, i) for i in range(10)], partition=p)
    params = kafka_broker.config(**{"group.id": "unstarted", "auto.offset.reset": "earliest",
                                    "session.timeout.ms": 6000})
    source = Stream.from_kafka([src], params)
    Unstartable(source)
    with pytest.raises(ConnectionError, match="server is down"):
        source.start()
    assert source._consumer is None  # closed: it left the group
    # A member left behind would hold a partition: this one would read the other only.
    again = Stream.from_kafka([src], params)
    out = again.sink_to_list()
    again.start()
    assert sorted(out) == sorted(b"%d-%d" % (p, i) for p in (0, 1) for i in range(10))


def test_on_a_loop_every_failed_delivery_is_routed() -> None:
    import asyncio

    # Nothing listens there: every message times out, after 200 ms.
    config = {"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 200, "log_level": 0}

    async def main() -> list[bytes]:
        source = Stream(asynchronous=True)
        sink = source.to_kafka("t", config).on_error("route")
        routed: list[bytes] = []

        async def record(r: Any) -> None:
            await asyncio.sleep(0)
            routed.append(r.element)

        sink.errors.sink(record)
        for x in (b"a", b"b", b"c"):
            await source.emit(x)
        await source.aclose()  # the barrier: waits for the deliveries to fail
        return routed

    assert asyncio.run(main()) == [b"a", b"b", b"c"]


def test_a_producer_config_librdkafka_refuses_is_refused_at_build_time(
        kafka_broker: Any) -> None:
    with pytest.raises(ValueError, match=r"to_kafka\(\): librdkafka refuses producer_config: "
                                         r".*queue\.buffering\.max\.ms"):
        Stream().to_kafka("t", kafka_broker.config(**{"linger.ms": "soon"}))
    with pytest.raises(ValueError, match=r"No such configuration property: \"lingr\.ms\""):
        Stream().to_kafka("t", kafka_broker.config(**{"lingr.ms": 5}))
    # What depends on where the sink runs is left to it: its files, its token.
    Stream().to_kafka("t", kafka_broker.config(**{"security.protocol": "ssl",
                                                  "ssl.ca.location": "/no/such/ca.pem"}))
    asked: list[str] = []
    Stream().to_kafka("t", kafka_broker.config(**{
        "security.protocol": "sasl_plaintext", "sasl.mechanisms": "OAUTHBEARER",
        "oauth_cb": lambda config: asked.append(config) or ("token", 4e12)}))
    assert not asked


def test_a_producer_that_cannot_open_fails_the_node_under_its_policy(
        kafka_broker: Any, kafka_topic: str, caplog: pytest.LogCaptureFixture) -> None:
    from streams import NodeError

    source = Stream()
    sink = source.to_kafka(kafka_topic, kafka_broker.config(
        **{"security.protocol": "ssl", "ssl.ca.location": "/no/such/ca.pem"}))
    with pytest.raises(NodeError, match=rf"to_kafka\('{kafka_topic}'\) failed on element "
                                        r"b'x': .*ssl\.ca\.location"):
        source.emit(b"x")
    sink.on_error("skip")
    source.emit(b"y")  # logged, not raised
    assert "failed on element b'y'" in caplog.text


@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_a_fenced_transactional_sink_fails_the_node_under_its_policy(
        kafka_broker: Any, kafka_topic: str, policy: str,
        caplog: pytest.LogCaptureFixture) -> None:
    from confluent_kafka import KafkaException

    from streams import NodeError

    config = kafka_broker.config(**{"transactional.id": f"fenced-{policy}"})
    first = Stream()
    sink = first.to_kafka(kafka_topic, config, transactional=True).on_error(policy)
    first.emit(b"first")
    newer = Stream()
    newer.to_kafka(kafka_topic, config, transactional=True)
    newer.emit(b"newer")  # its producer fences the first's
    if policy == "raise":
        # Where the fencing shows depends on when the first producer hears of
        # it: the produce() of the next element refuses it at once (librdkafka's
        # _STATE: its transaction failed), or that element's delivery does.
        with pytest.raises(NodeError, match=r"failed on element b'fenced': "
                           r".*(PRODUCER_FENCED|Erroneous state)"):
            first.emit(b"fenced")
            sink.flush()
        # Its transaction cannot be committed: a KafkaException still, naming the node.
        with pytest.raises(NodeError, match=rf"to_kafka\('{kafka_topic}'\) failed") as e:
            first.close()
        assert isinstance(e.value, KafkaException)
    else:
        first.emit(b"fenced")
        first.close()  # logged, not raised
        assert "failed on element b'fenced'" in caplog.text
        assert f"to_kafka('{kafka_topic}') failed on element None: KafkaException" in caplog.text
    newer.close()
