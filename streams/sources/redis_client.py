"""The Redis client ``from_redis`` reads with: one of its own, for a loop or not.

A client given by the user is checked against where the source runs (a
clear error at ``start()``), and a synchronous one is turned into its
asyncio twin on a loop. The client returned parses stream replies raw
(see ``_redis_ids._raw``).
"""

from __future__ import annotations

from typing import Any

from ._redis_ids import _raw

__all__ = ["check_client", "connect"]

#: Connection settings carried from a synchronous client to its asyncio twin.
_CARRIED = ("host", "port", "db", "username", "password", "socket_timeout",
            "socket_connect_timeout", "socket_keepalive", "encoding", "encoding_errors",
            "decode_responses", "client_name")


def _async_params(client: Any, label: str = "from_redis()") -> dict[str, Any]:
    """``redis.asyncio.Redis`` arguments reaching the server ``client`` (a redis.Redis) uses.

    Plain TCP and Unix-socket connections are carried over; other kinds
    (TLS, Sentinel, cluster) are refused with what to pass instead.
    """
    import redis

    pool = getattr(client, "connection_pool", None)
    kind = getattr(pool, "connection_class", None)
    if not isinstance(client, redis.Redis) or kind not in (
            redis.connection.Connection, redis.connection.UnixDomainSocketConnection):
        raise TypeError(
            f"{label}: the source runs on a loop and cannot turn the "
            f"{type(client).__module__}.{type(client).__name__} client given "
            f"({getattr(kind, '__name__', 'unknown connection')}) into an asyncio one; "
            "pass a redis.asyncio.Redis client, or url=")
    assert pool is not None
    given = pool.connection_kwargs
    params = {k: given[k] for k in _CARRIED if k in given}
    if kind is redis.connection.UnixDomainSocketConnection:
        params["unix_socket_path"] = given["path"]
    return params


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
        _async_params(client, label)  # raises if it cannot be converted


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
            r = klass(**_async_params(client))
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
