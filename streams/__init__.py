"""streams: push-based reactive stream processing, streamz-compatible.

Build a graph of :class:`Stream` nodes with ``map``, ``filter``, ``scan``,
``sink`` and the rest, and push data in with ``emit``.

>>> from streams import Stream
>>> source = Stream()
>>> totals = source.map(lambda x: x * 2).scan(lambda a, b: a + b).sink_to_list()
>>> for i in range(4):
...     source.emit(i)
>>> totals
[0, 2, 6, 12]
"""

from __future__ import annotations

from . import jupyter as _jupyter  # noqa: F401 - registers progress(), sink_to_plot()
from . import operators as _operators  # noqa: F401 - registers the operators
from . import uri as _uri  # noqa: F401 - issue 16: Stream.from_uri, .to_uri
from .clock import Clock, LoopClock, VirtualClock, get_clock, use_clock
from .core import NO_DEFAULT, Segment, Stream
from .errors import ErrorRecord, NodeError, StreamClosedError
from .graph import GraphSpec, NodeSpec, describe, walk
from .plugins import load_plugins
from .sinks.basic import Sink, SinkToList, SinkToTextfile
from .sinks.durable import SinkToDurableTextfile  # issue 6: exactly-once file output
from .sinks.kafka import ToKafka  # issue 16: Kafka (confluent-kafka imported lazily)
from .sinks.redis import SinkToRedis  # issue 6: Redis Streams (redis-py imported lazily)
from .sinks.stdio import SinkToStdout  # issue 6: JSON lines to stdout
from .sources.base import Source
from .sources.http import FromHttpServer  # issue 3: async sources
from .sources.iterable import FromIterable
from .sources.kafka import FromKafka  # issue 16: Kafka (confluent-kafka imported lazily)
from .sources.kafka_batched import FromKafkaBatched  # issue 16
from .sources.periodic import FromPeriodic
from .sources.process import FromProcess
from .sources.redis import FromRedis  # issue 6: Redis Streams (redis-py imported lazily)
from .sources.stdio import FromStdin  # issue 6: JSON lines from stdin
from .sources.tcp import FromTcp
from .sources.textfile import FromTextfile
from .state import Checkpointer, CheckpointError, checkpoint  # issue 6: checkpoints

__version__ = "0.1.0"

__all__ = [
    "NO_DEFAULT",
    "CheckpointError",
    "Checkpointer",
    "Clock",
    "ErrorRecord",
    "FromHttpServer",
    "FromIterable",
    "FromKafka",
    "FromKafkaBatched",
    "FromPeriodic",
    "FromProcess",
    "FromRedis",
    "FromStdin",
    "FromTcp",
    "FromTextfile",
    "GraphSpec",
    "LoopClock",
    "NodeError",
    "NodeSpec",
    "Segment",
    "Sink",
    "SinkToDurableTextfile",
    "SinkToList",
    "SinkToRedis",
    "SinkToStdout",
    "SinkToTextfile",
    "Source",
    "Stream",
    "StreamClosedError",
    "ToKafka",
    "VirtualClock",
    "checkpoint",
    "describe",
    "get_clock",
    "load_plugins",
    "use_clock",
    "walk",
]

