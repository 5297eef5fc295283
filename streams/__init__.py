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

from typing import Any

from . import jupyter as _jupyter  # noqa: F401 - registers progress(), sink_to_plot()
from . import operators as _operators  # noqa: F401 - registers the operators
from . import uri as _uri  # noqa: F401 - issue 16: Stream.from_uri, .to_uri
from .clock import Clock, LoopClock, VirtualClock, get_clock, use_clock
from .core import NO_DEFAULT, Segment, Stream
from .errors import ErrorRecord, NodeError, SourceError, StreamClosedError
from .graph import GraphSpec, NodeSpec, describe, visualize, walk
from .metadata import RefCounter  # issue 15: streamz's metadata reference counts
from .networkx_graph import build_node_set, create_graph, readable_graph, to_graphviz
from .operators.lookup import Tombstone  # deletes a key from a lookup() table
from .operators.window_bounds import Window  # an event-time window with its bounds
from .plugins import load_plugins
from .sinks.basic import Sink, SinkToList, SinkToTextfile, sink_to_file
from .sinks.durable import SinkToDurableTextfile  # issue 6: exactly-once file output
from .sinks.kafka import ToKafka  # issue 16: Kafka (confluent-kafka imported lazily)
from .sinks.mqtt import ToMqtt  # streamz's MQTT sink (paho-mqtt imported lazily)
from .sinks.redis import SinkToRedis  # issue 6: Redis Streams (redis-py imported lazily)
from .sinks.stdio import SinkToStdout  # issue 6: JSON lines to stdout
from .sinks.websocket import ToWebsocket  # streamz's websocket sink (websockets lazily)
from .sources.base import Source
from .sources.filenames import Filenames  # issue 15: streamz's Stream.filenames
from .sources.http import FromHttpServer  # issue 3: async sources
from .sources.iterable import FromIterable
from .sources.kafka import FromKafka  # issue 16: Kafka (confluent-kafka imported lazily)
from .sources.kafka_batched import (  # issue 16
    FromKafkaBatched,
    from_kafka_batched,
    get_message_batch,
)
from .sources.mqtt import FromMqtt  # streamz's MQTT source (paho-mqtt imported lazily)
from .sources.periodic import FromPeriodic
from .sources.process import FromProcess
from .sources.queue import FromQ  # streamz's from_q: a queue.Queue other threads fill
from .sources.redis import FromRedis  # issue 6: Redis Streams (redis-py imported lazily)
from .sources.stdio import FromStdin  # issue 6: JSON lines from stdin
from .sources.tcp import FromTcp
from .sources.textfile import FromTextfile
from .sources.websocket import FromWebsocket  # streamz's websocket source (websockets lazily)
from .state import Checkpointer, CheckpointError, checkpoint  # issue 6: checkpoints

__version__ = "0.1.0"

#: streamz's name for :data:`NO_DEFAULT` (streamz's is a string, ``'--no-default--'``).
no_default = NO_DEFAULT


def identity(x: Any) -> Any:
    """Return ``x`` (streamz's ``identity``, a default key function).

    >>> identity(3)
    3
    """
    return x


def convert_interval(interval: Any) -> Any:
    """Seconds from a duration string such as ``"500ms"``; other values as they are.

    streamz's ``convert_interval``. Strings are read as the operators read
    them (:mod:`streams.operators.durations`): ``"2s"``, ``"500ms"``,
    ``"1min"`` without pandas, and with pandas any string
    ``pandas.Timedelta`` reads. Unlike streamz, a bare number in a string
    (``"5"``) is seconds, not nanoseconds.

    Examples
    --------
    >>> convert_interval("500ms"), convert_interval("1min"), convert_interval(3)
    (0.5, 60.0, 3)
    """
    if not isinstance(interval, str):
        return interval
    from .operators.durations import _read

    return _read("convert_interval", "interval", interval)


def __getattr__(name: str) -> Any:
    """streamz's operator classes by their method names: ``streams.zip(a, b)``.

    They are not in ``__all__``: ``from streams import *`` would shadow
    builtins (``map``, ``filter``, ``zip``).

    >>> import streams
    >>> a, b = streams.Stream(), streams.Stream()
    >>> L = streams.zip(a, b).sink_to_list()
    >>> a.emit(1); b.emit(2)
    >>> L
    [(1, 2)]
    """
    method = getattr(Stream, name, None) if not name.startswith("_") else None
    klass = getattr(method, "__wrapped__", None)
    if isinstance(klass, type) and issubclass(klass, Stream):
        return klass
    raise AttributeError(f"module 'streams' has no attribute {name!r}")

__all__ = [
    "NO_DEFAULT",
    "CheckpointError",
    "Checkpointer",
    "Clock",
    "ErrorRecord",
    "Filenames",
    "FromHttpServer",
    "FromIterable",
    "FromKafka",
    "FromKafkaBatched",
    "FromMqtt",
    "FromPeriodic",
    "FromProcess",
    "FromQ",
    "FromRedis",
    "FromStdin",
    "FromTcp",
    "FromTextfile",
    "FromWebsocket",
    "GraphSpec",
    "LoopClock",
    "NodeError",
    "SourceError",
    "NodeSpec",
    "RefCounter",
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
    "ToMqtt",
    "ToWebsocket",
    "Tombstone",
    "VirtualClock",
    "Window",
    "build_node_set",
    "checkpoint",
    "convert_interval",
    "create_graph",
    "describe",
    "from_kafka_batched",
    "get_clock",
    "get_message_batch",
    "identity",
    "load_plugins",
    "no_default",
    "readable_graph",
    "sink_to_file",
    "to_graphviz",
    "use_clock",
    "visualize",
    "walk",
]

