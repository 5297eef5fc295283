"""The Redis clients of ``from_redis`` and ``sink_to_redis``, and their connection arguments.

A client given by the user is checked against where the source runs (a
clear error at ``start()``); one of the other kind (asyncio or not) than
where it is used is turned into its twin, same server, database and
credentials. The client ``from_redis`` reads with parses stream replies
raw (see ``_redis_ids._raw``). ``url=`` and ``start=`` are checked when
the graph is built.
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import urlsplit

from ._redis_ids import _MAX_SEQ, _raw, start_id

__all__ = ["check_client", "check_start", "check_url", "connect", "stream_entries", "twin"]

#: Connection settings carried from a client to its twin of the other kind.
_CARRIED = ("host", "port", "db", "username", "password", "credential_provider",
            "socket_timeout", "socket_connect_timeout", "socket_keepalive", "encoding",
            "encoding_errors", "decode_responses", "client_name")

#: The start ids both XREAD and XGROUP CREATE accept (Redis refuses '>', '+', '-' there).
_START_ID = re.compile(r"\$|([0-9]+)(?:-([0-9]+))?")


def check_url(op: str, url: Any) -> str:
    """``url`` if redis-py reads it as a Redis server's address, else a clear error.

    >>> check_url("sink_to_redis", "redis://localhost:6379/0")
    'redis://localhost:6379/0'
    >>> check_url("sink_to_redis", "http://user:secret@x")
    Traceback (most recent call last):
    ...
    ValueError: sink_to_redis(): url 'http://user:***@x' is not a Redis URL (...); give
    'redis://host:port/db', 'rediss://...' (TLS) or 'unix:///path/to/redis.sock', or pass client=
    """
    from redis.connection import parse_url

    if not isinstance(url, str):
        raise TypeError(f"{op}(): url must be a str such as 'redis://localhost:6379/0', "
                        f"got {type(url).__name__}")
    try:
        parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as e:
        raise ValueError(f"{op}(): url {_hide_password(url)!r} is not a Redis URL ({e}); "
                         "give 'redis://host:port/db', 'rediss://...' (TLS) or "
                         "'unix:///path/to/redis.sock', or pass client=") from None
    return url


def _hide_password(url: str) -> str:
    """``url`` without its password (it goes into an error message, maybe a log)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return url.split("@")[-1]
    return url.replace(f":{password}@", ":***@", 1) if password else url


def check_start(start: Any) -> str:
    """``from_redis``'s start as the id to read after, checked as Redis reads ids.

    >>> check_start("$"), check_start("1700000000000"), check_start(0)
    ('$', '1700000000000', '0')
    >>> check_start("yesterday")
    Traceback (most recent call last):
    ...
    ValueError: from_redis(): start 'yesterday' is not an entry id Redis reads; give '0' (the
    whole stream), '$' (new entries only), an id '<ms>' or '<ms>-<seq>' (such as
    '1700000000000-0'), a datetime, or seconds since the epoch
    """
    if isinstance(start, float) and not math.isfinite(start):
        raise ValueError(f"from_redis(): start must be a finite time, got {start!r}")
    at = start_id(start)
    m = _START_ID.fullmatch(at)
    if m is None or any(int(n) > _MAX_SEQ for n in m.groups() if n is not None):
        raise ValueError(
            f"from_redis(): start {start!r:.60} is not an entry id Redis reads; give '0' "
            "(the whole stream), '$' (new entries only), an id '<ms>' or '<ms>-<seq>' (such "
            "as '1700000000000-0'), a datetime, or seconds since the epoch")
    return at


def _twin_params(client: Any, asynchronous: bool, label: str, where: str) -> dict[str, Any]:
    """Arguments of a client of the other kind reaching the server ``client`` uses.

    ``asynchronous`` says which kind is wanted: a ``redis.asyncio.Redis``
    from a ``redis.Redis``, or the reverse. Plain TCP and Unix-socket
    connections are carried over; other kinds (TLS, Sentinel, cluster) are
    refused with what to pass instead.
    """
    import redis
    import redis.asyncio as aredis

    given: Any
    tcp: Any
    unix: Any
    if asynchronous:
        given, tcp, unix = (redis.Redis, redis.connection.Connection,
                            redis.connection.UnixDomainSocketConnection)
        wanted = "redis.asyncio.Redis"
    else:
        given, tcp, unix = (aredis.Redis, aredis.connection.Connection,
                            aredis.connection.UnixDomainSocketConnection)
        wanted = "redis.Redis"
    pool = getattr(client, "connection_pool", None)
    kind = getattr(pool, "connection_class", None)
    if not isinstance(client, given) or kind not in (tcp, unix):
        raise TypeError(
            f"{label}: {where} and cannot turn the {type(client).__module__}."
            f"{type(client).__name__} client given "
            f"({getattr(kind, '__name__', 'unknown connection')}) into a {wanted} one; "
            f"pass a {wanted} client, or url=")
    assert pool is not None
    settings = pool.connection_kwargs
    params = {k: settings[k] for k in _CARRIED if k in settings}
    if kind is unix:
        params["unix_socket_path"] = settings["path"]
    return params


def twin(client: Any, asynchronous: bool, label: str, where: str) -> Any:
    """``client`` if it is of the kind wanted, else a new one to its server (the caller's).

    ``where`` says, for an error message, where the client is used ("the
    sink writes on a loop").
    """
    import redis.asyncio as aredis

    if isinstance(client, aredis.Redis) == asynchronous:
        return client
    klass: Any = aredis.Redis
    if not asynchronous:
        import redis

        klass = redis.Redis
    return klass(**_twin_params(client, asynchronous, label, where))


def check_client(client: Any, asynchronous: bool, label: str) -> None:
    """Refuse a client the source cannot use where it runs (a clear error at start())."""
    import redis.asyncio as aredis

    is_async = isinstance(client, aredis.Redis)
    if is_async and not asynchronous:
        raise TypeError(
            f"{label}: a redis.asyncio client was given but the source runs "
            "without a loop (start() was called with none running); pass a redis.Redis "
            "client, or url=, or start it inside a loop (asyncio.run, Tornado, Jupyter)")
    if not is_async and asynchronous:
        _twin_params(client, True, label, "the source runs on a loop")  # or raises


def connect(client: Any, url: str, decode: bool, asynchronous: bool, label: str) -> Any:
    """A client of the source's own: over ``client``'s connections, or to ``url``."""
    if asynchronous:
        import redis.asyncio as aredis

        klass: Any = aredis.Redis
    else:
        import redis

        klass = redis.Redis
    if client is not None:
        check_client(client, asynchronous, label)
        if asynchronous and not isinstance(client, klass):
            # A synchronous client on a loop: its asyncio twin, same server.
            r = klass(**_twin_params(client, True, label, "the source runs on a loop"))
        else:
            # A client of our own over the same connections: the reply
            # callbacks changed below must not change the caller's client.
            r = klass(connection_pool=client.connection_pool)
    else:
        r = klass.from_url(url, decode_responses=decode)
    # redis-py turns each entry's fields into a dict through Python
    # callbacks (3 us an entry, more than everything else); the raw reply
    # is parsed here in one pass instead.
    for command in ("XREAD", "XREADGROUP", "XAUTOCLAIM"):
        r.set_response_callback(command, _raw)
    return r


def stream_entries(reply: Any) -> list[Any]:
    """The ``[id, [field, value, ...]]`` entries of a raw XREAD(GROUP) reply.

    >>> stream_entries([[b"s", [[b"1-0", [b"n", b"1"]]]]]), stream_entries(None)
    ([[b'1-0', [b'n', b'1']]], [])
    """
    if not reply:
        return []
    if isinstance(reply, dict):  # RESP3: {stream: entries}
        (entries,) = reply.values()
        return entries  # type: ignore[no-any-return]
    return reply[0][1]  # type: ignore[no-any-return]
