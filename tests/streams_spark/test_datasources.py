"""The redis_streams and streams_kafka Spark data sources, with a real local SparkSession."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streams_spark import register_data_sources

pytestmark = [pytest.mark.spark, pytest.mark.redis, pytest.mark.kafka]


@pytest.fixture
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this test's own (the shared one lives in tests/streams)."""
    from tests.streams.conftest import REDIS_SERVER, RedisServer

    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        yield server.url
    finally:
        server.stop()


def run_available(df: Any, fmt: str, options: dict[str, str], checkpoint: Path) -> None:
    """Process what the source holds now, in micro-batches, then stop."""
    writer = df.writeStream.format(fmt).option("checkpointLocation", str(checkpoint))
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.trigger(availableNow=True).start().awaitTermination(300)


@pytest.mark.slow
def test_redis_to_kafka_and_back_exactly_once_through_the_checkpoint(
        spark: Any, redis_url: str, kafka_broker: Any, tmp_path: Path) -> None:
    import redis

    register_data_sources(spark)
    topic = kafka_broker.create_topic("spark-out", partitions=1)
    r = redis.Redis.from_url(redis_url)
    for i in range(20):
        r.xadd("events", {"n": str(i)})
    source = (spark.readStream.format("redis_streams").option("url", redis_url)
              .option("stream", "events").load())
    values = source.selectExpr("fields['n'] AS value")
    # One record a batch: the test broker's high watermark is right only then
    # (see tests/kafka_broker.py).
    kafka = {"bootstrap.servers": kafka_broker.bootstrap, "topic": topic,
             "kafka.batch.num.messages": "1"}
    run_available(values, "streams_kafka", kafka, tmp_path / "to-kafka")
    assert kafka_broker.read(topic) == [b"%d" % i for i in range(20)]
    # A restart against the same checkpoint reads only what came since.
    for i in range(20, 25):
        r.xadd("events", {"n": str(i)})
    run_available(values, "streams_kafka", kafka, tmp_path / "to-kafka")
    assert kafka_broker.read(topic) == [b"%d" % i for i in range(25)]
    # Kafka back to Redis, through the other data source.
    back = (spark.readStream.format("streams_kafka")
            .option("bootstrap.servers", kafka_broker.bootstrap).option("topic", topic).load())
    run_available(back.selectExpr("CAST(value AS STRING) AS value"), "redis_streams",
                  {"url": redis_url, "stream": "copy"}, tmp_path / "to-redis")
    copied = [fields[b"data"] for _, fields in r.xrange("copy")]
    assert copied == [b"%d" % i for i in range(25)]
    r.close()


@pytest.mark.parametrize("per_trigger", [None, 2])
def test_kafka_written_in_transactions_is_read_to_its_end(
        spark: Any, kafka_broker: Any, tmp_path: Path, per_trigger: int | None) -> None:
    """Offsets that hold no message (markers, aborted records) do not stall a micro-batch.

    A transactional topic's high watermark counts each transaction's commit or
    abort marker, which no consumer receives: a range read up to it must end
    where the consumer's position passes it, not wait for a message there.
    Two offsets a micro-batch give ranges that end on a marker, one of aborted
    records only and one of a marker only.
    """
    from confluent_kafka import Producer

    register_data_sources(spark)
    topic = kafka_broker.create_topic(f"spark-transactions-{per_trigger}", partitions=1)
    producer = Producer(kafka_broker.config(**{"transactional.id": f"writer-{topic}"}))
    producer.init_transactions(30)
    for values, commit in (([b"a", b"b", b"c"], True), ([b"x", b"y"], False), ([b"d"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, v, partition=0)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    reader = (spark.readStream.format("streams_kafka")
              .option("bootstrap.servers", kafka_broker.bootstrap).option("topic", topic))
    if per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(per_trigger))
    name = f"transactions_read_{per_trigger}"
    query = (reader.load().selectExpr("CAST(value AS STRING) AS value", "offset").writeStream
             .format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(300), "the micro-batch never ended"
    rows = spark.sql(f"SELECT value, offset FROM {name} ORDER BY offset").collect()
    assert [r["value"] for r in rows] == ["a", "b", "c", "d"]  # committed ones, once each


@pytest.mark.parametrize("stage_above", [None, "3"], ids=["in-the-call", "staged"])
def test_redis_adds_a_micro_batch_run_again_once(spark: Any, redis_url: str, tmp_path: Path,
                                                 stage_above: str | None) -> None:
    """A micro-batch Spark runs again (its commit not logged: a crash after the sink
    wrote it) adds nothing to the stream that its first run added."""
    import redis

    register_data_sources(spark)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    for i in range(10):
        r.xadd("events", {"n": str(i)})
    source = (spark.readStream.format("redis_streams").option("url", redis_url)
              .option("stream", "events").load())
    # Two partitions of the micro-batch, each recorded on its own.
    rows = source.selectExpr("fields").repartition(2)
    options = {"url": redis_url, "stream": "copy"}
    if stage_above is not None:
        options["stageAbove"] = stage_above
    checkpoint = tmp_path / "checkpoint"

    def copied() -> list[int]:
        return sorted(int(f["n"]) for _, f in r.xrange("copy"))

    run_available(rows, "redis_streams", options, checkpoint)
    assert copied() == list(range(10))
    for name in ("0", ".0.crc"):  # as if the query died before logging the commit
        (checkpoint / "commits" / name).unlink()
    run_available(rows, "redis_streams", options, checkpoint)
    assert copied() == list(range(10))
    for i in range(10, 15):
        r.xadd("events", {"n": str(i)})
    run_available(rows, "redis_streams", options, checkpoint)
    assert copied() == list(range(15))
    assert r.keys("copy:staging:*") == []
    r.close()


def test_redis_refuses_rows_without_fields_or_value(spark: Any, redis_url: str,
                                                    tmp_path: Path) -> None:
    register_data_sources(spark)
    rows = spark.readStream.format("rate").load().selectExpr("value AS n")
    with pytest.raises(Exception, match=r"need a column 'fields'.*or 'value'.*\['n'\]"):
        run_available(rows, "redis_streams", {"url": redis_url, "stream": "s"},
                      tmp_path / "checkpoint")
