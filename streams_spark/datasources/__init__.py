"""Spark data sources for Redis Streams and Kafka (PySpark 4's Python Data Source API).

``register_data_sources(spark)`` registers two formats, read with
``spark.readStream.format(...)`` and written with ``writeStream.format(...)``:

* ``"redis_streams"`` (options ``url``, ``stream``; reads ``count`` entries a
  round trip): rows ``(id string, fields map<string,string>)``; the offset is
  the last entry id, kept in Spark's checkpoint. Writing adds each row's
  ``fields`` (or its ``value`` column, as field ``data``) with ``XADD``, once:
  each partition of a micro-batch is added by one Lua script that records
  it (hash ``seqKey``, default ``<stream>:written``, a field per query and
  partition), and a micro-batch Spark runs again after a crash, or a task it
  retries, adds nothing already added. A partition of more than
  ``stageAbove`` rows (10,000) is first added to a staging stream that the
  script moves. The rows added are those of the first run: a query whose
  micro-batch gives other rows when run again is written as first run.
* ``"streams_kafka"`` (options ``bootstrap.servers``, ``topic``,
  ``startingOffsets`` = ``earliest`` or ``latest``, ``maxOffsetsPerTrigger``
  to bound the messages of a micro-batch, as Spark's own Kafka source): rows ``(topic string,
  partition int, offset long, timestamp long, key binary, value binary)``; the
  offsets, one per partition, are kept in Spark's checkpoint. Writing
  produces each row's ``value`` (and ``key``, if there is one). Options
  ``kafka.<setting>`` pass librdkafka settings to the producer.

Reading is exactly once through Spark's checkpoint: a restarted query reads
each micro-batch's range again, the same rows; into Spark's file sink, the
output holds each message once even when the query is killed mid-batch
(``tests/streams_spark/test_datasource_kills.py``, SIGKILL of the driver).
Writing to Kafka is at least once: a micro-batch is written by its tasks
and confirmed (flushed) before the batch commits; a batch retried after a
failure writes its rows again. Writing to Redis is exactly once (above).

Examples
--------
>>> from streams_spark.datasources import RedisStreamsDataSource, KafkaDataSource
>>> RedisStreamsDataSource.name(), KafkaDataSource.name()
('redis_streams', 'streams_kafka')
"""

from __future__ import annotations

from typing import Any

from . import kafka, redis
from .kafka import KafkaDataSource
from .redis import RedisStreamsDataSource

__all__ = ["KafkaDataSource", "RedisStreamsDataSource", "register_data_sources"]


def register_data_sources(spark: Any) -> None:
    """Register the ``redis_streams`` and ``streams_kafka`` formats with ``spark``.

    The two modules travel by value, as a user's module does (see
    :mod:`streams_spark.shipping`): they import only PySpark (and, in their
    methods, confluent-kafka or redis-py), so a Python process of Spark's
    that plans or reads a micro-batch need not import this library, whose
    import (pandas, pyarrow, the operators) took 0.9-1.5 s in each.
    """
    from ..shipping import register_by_value

    for module in (kafka, redis):
        register_by_value(module)
    spark.dataSource.register(RedisStreamsDataSource)
    spark.dataSource.register(KafkaDataSource)
