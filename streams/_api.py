"""Typed signatures of the operator methods, for type checkers and editors.

Operators attach themselves to ``Stream`` at import time through
``Stream.register_api``; a type checker cannot see that, so their
signatures are declared here, once. At run time this class is empty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from .core import Stream
    from .errors import ErrorRecord  # noqa: F401
    from .jupyter.plot import LivePlot
    from .sinks.durable import SinkToDurableTextfile
    from .sinks.kafka import ToKafka
    from .sinks.redis import SinkToRedis
    from .sources.filenames import Filenames
    from .sources.http import FromHttpServer
    from .sources.iterable import FromIterable
    from .sources.kafka import FromKafka
    from .sources.kafka_batched import FromKafkaBatched
    from .sources.mqtt import FromMqtt
    from .sources.periodic import FromPeriodic
    from .sources.process import FromProcess
    from .sources.queue import FromQ
    from .sources.redis import FromRedis
    from .sources.stdio import FromStdin
    from .sources.tcp import FromTcp
    from .sources.textfile import FromTextfile
    from .sources.websocket import FromWebsocket

__all__ = ["OperatorAPI"]

T = TypeVar("T")
U = TypeVar("U")


class OperatorAPI(Generic[T]):
    """The operator methods of :class:`streams.Stream` (declarations only)."""

    __slots__ = ()

    if TYPE_CHECKING:
        def map(self, func: Callable[..., U], *args: Any, **kwargs: Any) -> Stream[U]: ...
        def starmap(self, func: Callable[..., U], *args: Any, **kwargs: Any) -> Stream[U]: ...
        def filter(self, predicate: Callable[..., Any] | None, *args: Any,
                   **kwargs: Any) -> Stream[T]: ...
        def remove(self, predicate: Callable[..., Any], *args: Any,
                   **kwargs: Any) -> Stream[T]: ...
        def pluck(self, pick: Any, **kwargs: Any) -> Stream[Any]: ...
        def flatten(self, **kwargs: Any) -> Stream[Any]: ...
        def concat(self, **kwargs: Any) -> Stream[Any]: ...
        def accumulate(self, func: Callable[..., Any], start: Any = ...,
                       returns_state: bool = False, stream_name: str | None = None,
                       with_state: bool = False, key: Any = None,
                       ttl: float | str | None = None, time: Any = None,
                       **kwargs: Any) -> Stream[Any]: ...
        def scan(self, func: Callable[..., Any], start: Any = ...,
                 returns_state: bool = False, stream_name: str | None = None,
                 with_state: bool = False, key: Any = None, ttl: float | str | None = None,
                 time: Any = None, **kwargs: Any) -> Stream[Any]: ...
        def frequencies(self, **kwargs: Any) -> Stream[dict[Any, int]]: ...
        def stateful_map(self, func: Callable[[Any, T], tuple[Any, Iterable[U]]],
                         start: Any = None, key: Any = None, ttl: float | str | None = None,
                         time: Any = None,
                         on_expire: Callable[[Any, Any], Iterable[U]] | None = None,
                         **kwargs: Any) -> Stream[U]: ...
        def slice(self, start: int | None = None, end: int | None = None,
                  step: int | None = None, **kwargs: Any) -> Stream[T]: ...
        def unique(self, maxsize: int | None = None, key: Any = ...,
                   hashable: bool = True, **kwargs: Any) -> Stream[T]: ...
        def collect(self, cache: list[Any] | None = None, metadata_cache: Any = None,
                    **kwargs: Any) -> Stream[tuple[T, ...]]: ...
        def partition(self, n: int, timeout: float | None = None, key: Any = None,
                      **kwargs: Any) -> Stream[tuple[T, ...]]: ...
        def partition_unique(self, n: int, key: Any = ..., keep: str = "first",
                             **kwargs: Any) -> Stream[tuple[T, ...]]: ...
        def sliding_window(self, n: int, return_partial: bool = True,
                           **kwargs: Any) -> Stream[tuple[T, ...]]: ...
        def zip(self, *upstreams: Any, **kwargs: Any) -> Stream[tuple[Any, ...]]: ...
        def combine_latest(self, *upstreams: Stream[Any],
                           **kwargs: Any) -> Stream[tuple[Any, ...]]: ...
        def zip_latest(self, *upstreams: Stream[Any], **kwargs: Any) -> Stream[tuple[Any, ...]]: ...
        def union(self, *upstreams: Stream[Any], **kwargs: Any) -> Stream[Any]: ...
        def join(self, right: Stream[U], key: Any, within: float | str, time: Any,
                 lateness: float | str = 0.0, **kwargs: Any) -> Stream[tuple[T, U]]: ...
        def lookup(self, table: Stream[Any], key: Any, table_key: Any = None,
                   default: Any = ..., **kwargs: Any) -> Stream[tuple[T, Any]]: ...
        def gather(self, **kwargs: Any) -> Stream[T]: ...
        # Dask (streams_dask, a plugin loaded on first use): choose a client, enter a segment.
        def to_dask(self, client: Any = None, **kwargs: Any) -> Stream[T]: ...
        def scatter(self, client: Any = None, batch_size: int | None = None,
                    max_in_flight: int | None = None, ordered: bool = True,
                    progress: bool = False, **kwargs: Any) -> Stream[T]: ...
        def sink(self, func: Callable[..., Any] = ..., *args: Any, **kwargs: Any) -> Stream[T]: ...
        def sink_to_textfile(self, file: Any, end: str = "\n", mode: str = "a",
                             encoding: str | None = None, **kwargs: Any) -> Stream[T]: ...
        # Jupyter (streams.jupyter): a counting pass-through node and a live plot.
        def progress(self, total: int | None = None, desc: str | None = None,
                     unit: str = "it", **kwargs: Any) -> Stream[T]: ...
        def sink_to_plot(self, interval: float = 0.5, keep: int | None = 10_000,
                         title: str | None = None, xlabel: str | None = None,
                         ylabel: str | None = None, figsize: tuple[float, float] = (6.0, 3.0),
                         widget: bool | None = None) -> LivePlot: ...

        def timed_window(self, interval: float | str, time: Callable[[Any], Any] | Any = None,
                         lateness: float | str = 0.0, slide: float | str | None = None,
                         key: Any = None, bounds: bool = False,
                         **kwargs: Any) -> Stream[Any]: ...
        def session_window(self, gap: float | str, time: Callable[[Any], Any] | Any = None,
                           lateness: float | str = 0.0, key: Any = None, bounds: bool = False,
                           **kwargs: Any) -> Stream[Any]: ...
        def timed_window_unique(self, interval: float | str, key: Any = ...,
                                keep: str = "first", **kwargs: Any) -> Stream[tuple[T, ...]]: ...
        def delay(self, interval: float | str, **kwargs: Any) -> Stream[T]: ...
        def rate_limit(self, interval: float | str, **kwargs: Any) -> Stream[T]: ...
        def buffer(self, n: int, **kwargs: Any) -> Stream[T]: ...
        def latest(self, **kwargs: Any) -> Stream[T]: ...
        def map_async(self, func: Callable[..., Any], *args: Any, parallelism: int = 1,
                      stop_on_exception: bool = False, **kwargs: Any) -> Stream[Any]: ...

        def sink_to_list(self) -> list[T]: ...
        def sink_to_redis(self, stream: str, maxlen: int | None = None,
                          approximate: bool = True, url: str = "redis://localhost:6379/0",
                          client: Any = None, batch: int = 1000, field: str = "data",
                          method: str = "script", seq_key: str | None = None,
                          **kwargs: Any) -> SinkToRedis: ...
        def sink_to_stdout(self, format: str = "json", file: Any = None, flush: bool = False,
                           **kwargs: Any) -> Stream[T]: ...
        def sink_to_durable_textfile(self, file: Any, end: str = "\n", encoding: str = "utf-8",
                                     fsync: bool = True,
                                     **kwargs: Any) -> SinkToDurableTextfile: ...

        @staticmethod
        def from_redis(stream: str, group: str | None = None, consumer: str | None = None,
                       start: Any = "0", url: str = "redis://localhost:6379/0",
                       client: Any = None, count: int = 1000, block: float = 1.0,
                       claim_idle: float | None = None, with_id: bool = False,
                       decode: bool = True, **kwargs: Any) -> FromRedis: ...
        @staticmethod
        def from_stdin(format: str = "json", file: Any = None, encoding: str = "utf-8",
                       start: bool = False, **kwargs: Any) -> FromStdin: ...

        def to_spark(self, session: Any = None, batch_size: int = 10_000,
                     interval: float | None = None, checkpoint: str | None = None,
                     streaming: bool = False, progress: bool = False,
                     **kwargs: Any) -> Stream[T]: ...

        @staticmethod
        def from_spark(df: Any, checkpoint: str | None = None, available_now: bool = True,
                       **kwargs: Any) -> Stream[Any]: ...
        def to_dataframe(self, schema: Any = None) -> Any: ...
        @staticmethod
        def from_kafka(topics: Any, consumer_params: dict[str, Any], poll_interval: float = 0.1,
                       start: bool = False, offset: Any = None, batch: int = 1000,
                       keys: bool = False, with_meta: bool = False,
                       **kwargs: Any) -> FromKafka: ...
        @staticmethod
        def from_kafka_batched(topic: str, consumer_params: dict[str, Any],
                               poll_interval: Any = "1s", npartitions: int | None = None,
                               refresh_partitions: bool = False, start: bool = False,
                               dask: bool = False, max_batch_size: int = 10000,
                               keys: bool = False, engine: str | None = None,
                               client: Any = None, **kwargs: Any) -> FromKafkaBatched: ...
        def to_kafka(self, topic: str, producer_config: dict[str, Any],
                     transactional: bool = False, key: Any = None,
                     **kwargs: Any) -> ToKafka: ...
        def to_mqtt(self, host: str, port: int, topic: str, keepalive: int = 60,
                    client_kwargs: dict[str, Any] | None = None, qos: int = 0,
                    retain: bool = False, user: str | None = None, pw: str | None = None,
                    publish_timeout: float = 10.0, **kwargs: Any) -> Stream[Any]: ...
        def to_websocket(self, uri: str, ws_kwargs: dict[str, Any] | None = None,
                         **kwargs: Any) -> Stream[Any]: ...
        @staticmethod
        def from_uri(uri: str, **options: Any) -> Stream[Any]: ...
        def to_uri(self, uri: str, **options: Any) -> Stream[Any]: ...
        @staticmethod
        def from_iterable(iterable: Iterable[U], start: bool = False,
                          **kwargs: Any) -> FromIterable[U]: ...
        @staticmethod
        def filenames(path: str, poll_interval: float | str = 0.1, start: bool = False,
                      **kwargs: Any) -> Filenames: ...
        @staticmethod
        def from_textfile(f: Any, poll_interval: float = 0.1, delimiter: str = "\n",
                          start: bool = False, from_end: bool = False, encoding: str = "utf-8",
                          follow: bool | None = None, **kwargs: Any) -> FromTextfile: ...
        # issue 3: async sources (streams.sources.periodic, tcp, http, process)
        @staticmethod
        def from_periodic(callback: Callable[[], Any], poll_interval: float | str = 0.1,
                          start: bool = False, **kwargs: Any) -> FromPeriodic: ...
        @staticmethod
        def from_q(q: Any, sleep_time: float | str = 0.01, start: bool = False,
                   **kwargs: Any) -> FromQ: ...
        @staticmethod
        def from_tcp(port: int, delimiter: bytes = b"\n",
                     server_kwargs: dict[str, Any] | None = None, *, address: str = "127.0.0.1",
                     start: bool = False, max_message: int = 1_048_576,
                     idle_timeout: float | None = 300.0, max_connections: int = 256,
                     **kwargs: Any) -> FromTcp: ...
        @staticmethod
        def from_http_server(port: int, path: str = "/.*",
                             server_kwargs: dict[str, Any] | None = None, *,
                             address: str = "127.0.0.1", start: bool = False,
                             max_body: int = 8_388_608, idle_timeout: float = 60.0,
                             max_connections: int = 256, max_in_flight: int = 64,
                             **kwargs: Any) -> FromHttpServer: ...
        # streamz's MQTT and websocket connectors (streams.sources.mqtt, websocket)
        @staticmethod
        def from_mqtt(host: str, port: int, topic: str, keepalive: int = 60,
                      client_kwargs: dict[str, Any] | None = None, user: str | None = None,
                      pw: str | None = None, qos: int = 0, max_queue: int = 1000,
                      connect_timeout: float = 10.0, start: bool = False, *,
                      client_id: str | None = None, **kwargs: Any) -> FromMqtt: ...
        @staticmethod
        def from_websocket(host: str, port: int, serve_kwargs: dict[str, Any] | None = None,
                           max_connections: int = 256, start: bool = False,
                           path: str | None = None, **kwargs: Any) -> FromWebsocket: ...
        @staticmethod
        def from_process(cmd: list[str] | str, open_kwargs: dict[str, Any] | None = None,
                         with_stderr: bool = False, with_end: bool = True, start: bool = False,
                         **kwargs: Any) -> FromProcess: ...
