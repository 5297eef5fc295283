"""The ``streams_kafka`` Spark data source: a Kafka topic read and written by Spark executors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

__all__ = ["KafkaDataSource"]


def _client_config(options: dict[str, str]) -> dict[str, str]:
    """librdkafka settings given as ``kafka.<setting>`` options (as Spark's own Kafka source)."""
    return {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}


def _options(options: dict[str, str]) -> tuple[str, str]:
    servers = options.get("bootstrap.servers")
    topic = options.get("topic")
    if not servers or not topic:
        raise ValueError("streams_kafka: give .option('bootstrap.servers', 'host:port') and "
                         ".option('topic', 'name')")
    return servers, topic


class _Range(InputPartition):
    def __init__(self, partition: int, low: int, high: int) -> None:
        self.partition = partition
        self.low = low
        self.high = high  # exclusive


class _Reader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.servers, self.topic = _options(options)
        self.starting = options.get("startingOffsets", "earliest")
        if self.starting not in ("earliest", "latest"):
            raise ValueError("streams_kafka: startingOffsets must be 'earliest' or 'latest', "
                             f"got {self.starting!r}")
        limit = options.get("maxOffsetsPerTrigger")
        try:
            self.max_per_trigger = None if limit is None else int(limit)
        except ValueError:
            self.max_per_trigger = 0
        if self.max_per_trigger is not None and self.max_per_trigger < 1:
            raise ValueError("streams_kafka: maxOffsetsPerTrigger must be a positive "
                             f"number of messages, got {limit!r}")

    def _watermarks(self) -> dict[str, tuple[int, int]]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.servers, "group.id": "streams-spark"})
        try:
            meta = c.list_topics(self.topic, timeout=30).topics[self.topic]
            return {str(p): c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)
                    for p in sorted(meta.partitions)}
        finally:
            c.close()

    def initialOffset(self) -> dict[str, int]:
        marks = self._watermarks()
        pick = 1 if self.starting == "latest" else 0
        return {p: m[pick] for p, m in marks.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        # As Spark's own Kafka source: the option bounds each micro-batch.
        if self.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.max_per_trigger)

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        high = {p: m[1] for p, m in self._watermarks().items()}
        if not isinstance(limit, ReadMaxRows) or start is None:
            return high
        # Up to ``limit.max_rows`` more messages, partition after partition
        # (deterministic, so a replayed batch reads the same range).
        left = limit.max_rows
        end = {}
        for p in sorted(high, key=int):
            low = start.get(p, 0)
            take = max(0, min(high[p] - low, left))
            end[p] = low + take
            left -= take
        return end

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [_Range(int(p), start.get(p, 0), high) for p, high in end.items()
                if high > start.get(p, 0)]

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        c = Consumer({"bootstrap.servers": self.servers, "group.id": "streams-spark",
                      "enable.auto.commit": False})
        at = TopicPartition(self.topic, partition.partition, partition.low)
        c.assign([at])
        expected = partition.low  # the offset the consumer delivers next
        try:
            while expected < partition.high:
                # Never more than the range's offsets left: consume() waits its
                # whole timeout for a count it cannot fill, as a range that ends
                # in a transaction's commit marker does (below): so the wait is
                # short (with 1 s, each such range took a second).
                msgs = c.consume(min(partition.high - expected, 1000), timeout=0.01)
                for m in msgs:
                    if m.error() is not None:
                        raise KafkaException(m.error())
                    off = m.offset() or 0
                    if off >= partition.high:
                        return
                    yield (m.topic(), m.partition(), off, m.timestamp()[1], m.key(), m.value())
                    expected = off + 1
                # Offsets that hold no message (a transaction's commit or abort
                # marker, an aborted transaction's records) are never delivered:
                # the consumer's position passes them.
                expected = max(expected, c.position([at])[0].offset)
        finally:
            c.close()

    def commit(self, end: dict[str, int]) -> None:
        pass  # the offsets live in Spark's checkpoint


class _Written(WriterCommitMessage):
    def __init__(self, count: int) -> None:
        self.count = count


class _Writer(DataSourceStreamWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.servers, self.topic = _options(options)
        self.config = _client_config(options)

    def write(self, iterator: Iterator[Any]) -> _Written:
        from confluent_kafka import Producer

        p = Producer({**self.config, "bootstrap.servers": self.servers})
        errors: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)

        n = 0
        for row in iterator:
            d = row.asDict()
            value = d["value"]
            if isinstance(value, str):
                value = value.encode()
            p.produce(self.topic, value, d.get("key"), on_delivery=delivered)
            n += 1
            if n % 1000 == 0:
                p.poll(0)
        p.flush()  # delivered before the task reports success
        if errors:
            raise RuntimeError(f"streams_kafka: {len(errors)} messages not delivered: {errors[0]}")
        return _Written(n)

    def commit(self, messages: list[Any], batchId: int) -> None:
        pass

    def abort(self, messages: list[Any], batchId: int) -> None:
        pass


class KafkaDataSource(DataSource):
    """``spark.readStream.format("streams_kafka").option("topic", ...)``; see the package docs."""

    @classmethod
    def name(cls) -> str:
        return "streams_kafka"

    def schema(self) -> str:
        return ("topic string, partition int, offset long, timestamp long, key binary, "
                "value binary")

    def streamReader(self, schema: Any) -> _Reader:
        return _Reader(self.options)

    def streamWriter(self, schema: Any, overwrite: bool) -> _Writer:
        return _Writer(self.options)
