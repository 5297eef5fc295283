"""Stream URIs: ``Stream.from_uri(uri)`` and ``.to_uri(uri)`` name a source or sink by address.

One way to name a stream whatever holds it, so tools (``python -m streams
relay``...) and configuration need no code per system. Each scheme takes
its options from the URI's query string or as keyword arguments (keyword
arguments win); an option the scheme does not know is refused, naming the
ones it does.

==========================================  ==========================================
URI                                         source / sink and options
==========================================  ==========================================
``kafka://host:port[,host:port]/topic``     ``from_kafka`` / ``to_kafka``; ``group``,
                                            ``offset`` (``earliest``, ``latest``, an
                                            int, or ``time:<seconds since epoch>``),
                                            ``batch``, ``poll_interval``, ``keys``,
                                            ``with_meta``; sink: ``transactional_id``
                                            (makes it transactional); both: ``config``
                                            (a dict of librdkafka settings, keyword only)
``redis://host:port/stream``                ``from_redis`` / ``sink_to_redis``; ``db``,
                                            ``group``, ``consumer``, ``start`` (an id,
                                            ``$``, or ``time:<seconds>``), ``count``,
                                            ``with_id``; sink: ``maxlen``, ``field``
``stdio://``                                ``from_stdin`` / ``sink_to_stdout``;
                                            ``format`` (``json`` or ``text``)
``file:///path``                            ``from_textfile`` / ``sink_to_textfile``;
                                            ``encoding``; sink: ``mode`` (``a`` or ``w``)
``tcp://host:port``                         ``from_tcp`` (a server; source only)
``http://host:port/path``                   ``from_http_server`` (source only)
``mqtt://[user:pw@]host:port/topic``        ``from_mqtt`` / ``to_mqtt`` (the topic may
                                            hold ``/`` and, for a source, the
                                            wildcards ``+`` and ``#``, as they are or
                                            as ``%2B``/``%23``; user and pw are
                                            percent-decoded); ``qos``,
                                            ``keepalive``; source: ``client_id``;
                                            sink: ``retain``
``ws://host:port[/path]``                   ``from_websocket`` (a server on host:port,
                                            of that path only if one is given)
                                            / ``to_websocket`` (a client of the URI);
                                            ``wss://`` for a TLS client
==========================================  ==========================================

Examples
--------
>>> from streams import Stream, describe
>>> source = Stream.from_uri("kafka://localhost:9092/events?group=etl&offset=earliest")
>>> source.topics, source.group, source.offset
(['events'], 'etl', 'earliest')
>>> sink = source.map(len).map(str).to_uri("redis://localhost:6379/sizes?maxlen=1000")
>>> sink.describe().operator, sink.stream, sink.maxlen
('sink_to_redis', 'sizes', 1000)
>>> Stream.from_uri("kafka://localhost:9092/events?colour=red")
Traceback (most recent call last):
...
ValueError: kafka:// source: unknown option 'colour'; it takes: batch, config, group, keys, ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from .core import Stream

__all__ = ["SCHEMES", "from_uri", "parse_uri", "to_uri"]


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if str(v).lower() in ("1", "true", "yes", "on"):
        return True
    if str(v).lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {v!r}")


def _position(v: Any) -> Any:
    """``time:<seconds>`` is a time; digits an offset; anything else as given."""
    if isinstance(v, str):
        if v.startswith("time:"):
            return float(v[5:])
        if v.isdigit():
            return int(v)
    return v


def _same(v: Any) -> Any:
    return v


def _redis_start(v: Any) -> Any:
    return float(v[5:]) if isinstance(v, str) and v.startswith("time:") else v


Options = dict[str, Callable[[Any], Any]]

_KAFKA_SOURCE: Options = {"group": str, "offset": _position, "batch": int, "poll_interval": float,
                 "keys": _bool, "with_meta": _bool, "config": _same}
_KAFKA_SINK: Options = {"transactional_id": str, "config": _same}
_REDIS_SOURCE: Options = {"db": int, "group": str, "consumer": str, "start": _redis_start,
                          "count": int, "with_id": _bool}
_REDIS_SINK: Options = {"db": int, "maxlen": int, "field": str, "batch": int}
_STDIO: Options = {"format": str}
_FILE_SOURCE: Options = {"encoding": str}
_FILE_SINK: Options = {"encoding": str, "mode": str}
_MQTT_SOURCE: Options = {"qos": int, "keepalive": int, "client_id": str}
_MQTT_SINK: Options = {"qos": int, "keepalive": int, "retain": _bool}

#: What each scheme can be: a source, a sink, or both.
SCHEMES = {"kafka": ("source", "sink"), "redis": ("source", "sink"),
           "stdio": ("source", "sink"), "file": ("source", "sink"),
           "tcp": ("source",), "http": ("source",), "mqtt": ("source", "sink"),
           "ws": ("source", "sink"), "wss": ("sink",)}


def parse_uri(uri: str, role: str) -> tuple[Any, str]:
    """Split ``uri``; raise a clear error for a scheme that cannot be a ``role``.

    Examples
    --------
    >>> parse_uri("kafka://h:9092/t", "sink")[1]
    'kafka'
    >>> parse_uri("tcp://127.0.0.1:9000", "sink")
    Traceback (most recent call last):
    ...
    ValueError: tcp:// can only be a source; sinks are: file, kafka, mqtt, redis, stdio, ws, wss
    """
    if not isinstance(uri, str) or "://" not in uri:
        raise ValueError(f"{uri!r} is not a stream URI: write scheme://address, with a scheme "
                         f"among {', '.join(sorted(SCHEMES))} (e.g. kafka://localhost:9092/topic)")
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme == "mqtt":
        # MQTT has no fragments: a '#' is the multi-level wildcard of a topic
        # filter (mqtt://host/sensors/#), which a URL parser would cut off.
        parts = urlsplit(uri, allow_fragments=False)
    if scheme not in SCHEMES:
        raise ValueError(f"{uri!r}: unknown scheme {scheme + '://'!r}; known: "
                         f"{', '.join(s + '://' for s in sorted(SCHEMES))}")
    if role not in SCHEMES[scheme]:
        can = sorted(s for s, roles in SCHEMES.items() if role in roles)
        raise ValueError(f"{scheme}:// can only be a {SCHEMES[scheme][0]}; {role}s are: "
                         f"{', '.join(can)}")
    return parts, scheme


def _options(uri: Any, scheme: str, role: str, spec: Mapping[str, Callable[[Any], Any]],
             given: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = dict(parse_qsl(uri.query, keep_blank_values=True))
    merged.update(given)
    out = {}
    for name, value in merged.items():
        if name not in spec:
            takes = (f"it takes: {', '.join(sorted(spec))}" if spec else
                     f"it takes none: remove ?{name}=...")
            raise ValueError(f"{scheme}:// {role}: unknown option {name!r}; {takes}")
        try:
            out[name] = spec[name](value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{scheme}:// {role}: option {name}={value!r}: {e}") from None
    return out


def _shown(uri: Any) -> str:
    """``uri`` for an error message, its password (if any) masked.

    >>> from urllib.parse import urlsplit
    >>> _shown(urlsplit("redis://me:secret@host:1/s")), _shown(urlsplit("tcp://host:x"))
    ('redis://me:***@host:1/s', 'tcp://host:x')
    """
    if uri.password is None:
        return str(uri.geturl())
    user, _, address = uri.netloc.rpartition("@")
    return str(uri._replace(netloc=f"{user.partition(':')[0]}:***@{address}").geturl())


def _name(uri: Any, scheme: str, what: str) -> str:
    name = unquote(uri.path.lstrip("/"))
    if not name or "/" in name:
        raise ValueError(f"{_shown(uri)!r}: give one {what} after the address, as in "
                         f"{scheme}://host:port/{what}")
    return name


def _host_port(uri: Any, scheme: str, default_port: int | None = None) -> tuple[str, int]:
    host = uri.hostname or "127.0.0.1"
    try:
        port = uri.port
    except ValueError:  # written, but not a port: never the default in its place
        written = uri.netloc.rpartition("@")[2].rpartition(":")[2]
        raise ValueError(f"{_shown(uri)!r}: port {written!r} is not a port (a number "
                         "from 1 to 65535)") from None
    if port is None:
        if default_port is None:
            raise ValueError(f"{_shown(uri)!r}: give a port, as in {scheme}://127.0.0.1:9000")
        port = default_port
    return host, port


def from_uri(uri: str, **options: Any) -> Stream[Any]:
    """The source named by ``uri`` (see the module docs for schemes and options)."""
    parts, scheme = parse_uri(uri, "source")
    if scheme == "kafka":
        opts = _options(parts, scheme, "source", _KAFKA_SOURCE, options)
        config = {"bootstrap.servers": _kafka_servers(parts), **opts.pop("config", {})}
        if "group" in opts:
            config["group.id"] = opts.pop("group")
        topic = _name(parts, scheme, "topic")
        return Stream.from_kafka([topic], config, **opts)
    if scheme == "redis":
        opts = _options(parts, scheme, "source", _REDIS_SOURCE, options)
        url = _redis_url(parts, opts.pop("db", 0))
        return Stream.from_redis(_name(parts, scheme, "stream"), url=url,
                                 **opts)
    if scheme == "stdio":
        return Stream.from_stdin(**_options(parts, scheme, "source", _STDIO, options))
    if scheme == "file":
        opts = _options(parts, scheme, "source", _FILE_SOURCE, options)
        return Stream.from_textfile(_path(parts), **opts)
    if scheme == "tcp":
        host, port = _host_port(parts, scheme)
        _options(parts, scheme, "source", {}, options)
        return Stream.from_tcp(port, address=host)
    if scheme == "mqtt":
        host, port = _host_port(parts, scheme, 1883)
        opts = _options(parts, scheme, "source", _MQTT_SOURCE, options)
        user, pw = _credentials(parts)
        return Stream.from_mqtt(host, port, _topic(parts), user=user, pw=pw, **opts)
    if scheme == "ws":
        host, port = _host_port(parts, scheme)
        _options(parts, scheme, "source", {}, options)
        # ws://host:port/ is the server as ws://host:port is: every path.
        return Stream.from_websocket(
            host, port, path=None if parts.path in ("", "/") else parts.path)
    host, port = _host_port(parts, scheme, 80)
    _options(parts, scheme, "source", {}, options)
    return Stream.from_http_server(port, path=parts.path or "/.*",
                                   address=host)


def to_uri(upstream: Stream[Any], uri: str, **options: Any) -> Stream[Any]:
    """A sink writing ``upstream``'s elements to ``uri`` (see the module docs)."""
    parts, scheme = parse_uri(uri, "sink")
    if scheme == "kafka":
        opts = _options(parts, scheme, "sink", _KAFKA_SINK, options)
        config = {"bootstrap.servers": _kafka_servers(parts), **opts.pop("config", {})}
        transactional = "transactional_id" in opts
        if transactional:
            config["transactional.id"] = opts.pop("transactional_id")
        topic = _name(parts, scheme, "topic")
        return upstream.to_kafka(topic, config, transactional=transactional)
    if scheme == "redis":
        opts = _options(parts, scheme, "sink", _REDIS_SINK, options)
        url = _redis_url(parts, opts.pop("db", 0))
        return upstream.sink_to_redis(_name(parts, scheme, "stream"), url=url, **opts)
    if scheme == "stdio":
        return upstream.sink_to_stdout(**_options(parts, scheme, "sink", _STDIO, options))
    if scheme == "mqtt":
        host, port = _host_port(parts, scheme, 1883)
        opts = _options(parts, scheme, "sink", _MQTT_SINK, options)
        user, pw = _credentials(parts)
        return upstream.to_mqtt(host, port, _topic(parts), user=user, pw=pw, **opts)
    if scheme in ("ws", "wss"):
        _options(parts, scheme, "sink", {}, options)
        return upstream.to_websocket(uri)
    opts = _options(parts, scheme, "sink", _FILE_SINK, options)
    return upstream.sink_to_textfile(_path(parts), **opts)


def _topic(parts: Any) -> str:
    topic = unquote(parts.path[1:])
    if not topic:
        raise ValueError(f"{_shown(parts)!r}: give a topic after the address, as in "
                         "mqtt://localhost:1883/sensors/temperature")
    return topic


def _credentials(parts: Any) -> tuple[str | None, str | None]:
    """The user and password of the URI, percent-decoded (``p%40ss`` is ``p@ss``)."""
    user, pw = parts.username, parts.password
    return (None if user is None else unquote(user), None if pw is None else unquote(pw))


def _kafka_servers(parts: Any) -> str:
    if not parts.netloc:
        raise ValueError(f"{_shown(parts)!r}: give the brokers, as in "
                         "kafka://localhost:9092/topic")
    return str(parts.netloc)


def _redis_url(parts: Any, db: int) -> str:
    host, port = _host_port(parts, "redis", 6379)
    auth = (f"{parts.username or ''}:{parts.password}@" if parts.password else
            f"{parts.username}@" if parts.username else "")
    return f"redis://{auth}{host}:{port}/{db}"


def _path(parts: Any) -> str:
    # file://localhost/p is the local /p (RFC 8089); file://data.txt, a relative path.
    host = "" if parts.netloc.lower() == "localhost" and parts.path else parts.netloc
    path = unquote(host + parts.path)
    if not path:
        raise ValueError(f"{_shown(parts)!r}: give a path, as in file:///tmp/data.txt")
    return path


def _register() -> None:
    def from_uri_method(uri: str, **options: Any) -> Stream[Any]:
        return from_uri(uri, **options)

    def to_uri_method(self: Stream[Any], uri: str, **options: Any) -> Stream[Any]:
        return to_uri(self, uri, **options)

    from_uri_method.__doc__ = (
        "The source named by a stream URI (kafka://, redis://, stdio://, file://, tcp://, "
        "http://); see :mod:`streams.uri`.\n\n"
        "Examples\n--------\n"
        ">>> from streams import Stream\n"
        ">>> Stream.from_uri('file:///tmp/data.txt').file\n"
        "'/tmp/data.txt'\n")
    to_uri_method.__doc__ = (
        "Write to the sink named by a stream URI (kafka://, redis://, stdio://, file://); "
        "see :mod:`streams.uri`.\n\n"
        "Examples\n--------\n"
        ">>> from streams import Stream\n"
        ">>> Stream().to_uri('stdio://?format=text').format\n"
        "'text'\n")
    from_uri_method.__name__ = "from_uri"
    to_uri_method.__name__ = "to_uri"
    # Declared in streams/_api.py, for type checkers.
    setattr(Stream, "from_uri", staticmethod(from_uri_method))  # noqa: B010
    setattr(Stream, "to_uri", to_uri_method)  # noqa: B010


_register()
