"""streams_spark: run segments of a stream graph on Apache Spark.

``import streams_spark`` adds ``to_spark()`` to every ``Stream``. The steps
between ``to_spark()`` and ``gather()`` are lowered from the graph's
description to Spark: chains of Python functions fused into one Arrow pass
(``mapInArrow``), keyed scans on Spark-managed state, event-time windows
under a watermark. ``gather()`` brings the results back in input order.
A segment may also start at ``Stream.from_spark(df)`` and end in
``to_dataframe(schema)``: then ``union`` and the interval ``join`` of several
such inputs run on Spark too (a join as Spark's stream-stream join).

>>> import streams_spark
>>> from streams import Stream
>>> source = Stream()
>>> out = source.to_spark().map(str.upper).gather().sink_to_list()
>>> source.emit("a"); source.emit("b"); source.close()
>>> out
['A', 'B']
"""

from __future__ import annotations

from .dataframe import to_dataframe
from .datasources import register_data_sources  # issue 16: redis_streams, streams_kafka
from .nodes import SparkSegment, ToSpark
from .session import default_session
from .source import FromSpark

__all__ = [
    "FromSpark",
    "SparkSegment",
    "ToSpark",
    "default_session",
    "register_data_sources",
    "to_dataframe",
]
