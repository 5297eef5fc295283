"""Redis errors reach the user as themselves, naming the source.

An error reply in the middle of a read (the group deleted: NOGROUP) used to
leave replies unread on the connection, and the next read waited for the
socket's timeout: a bare ``TimeoutError`` five seconds later. A server that
cannot be reached is reported naming the source and its stream.
"""

from __future__ import annotations

from typing import Any

import pytest

from streams import Stream

pytestmark = pytest.mark.redis


def test_an_error_reply_mid_read_is_raised_as_itself(redis_url: str) -> None:
    import redis
    from redis.exceptions import ResponseError

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    for i in range(100):
        r.xadd("e", {"n": i})
    source = Stream.from_redis("e", group="g", consumer="c", url=redis_url, count=10)

    def delete_the_group(x: dict[str, Any]) -> None:
        if x["n"] == "15":
            r.xgroup_destroy("e", "g")

    source.sink(delete_the_group)
    with pytest.raises(ResponseError, match=r"from_redis\('e'\) on stream 'e': NOGROUP"):
        source.start()
    r.close()


def test_an_unreachable_server_is_reported_naming_the_source() -> None:
    from redis.exceptions import ConnectionError

    source = Stream.from_redis("events", group="g", consumer="c", url="redis://127.0.0.1:1/0")
    with pytest.raises(ConnectionError, match=r"from_redis\('events'\) on stream 'events': "):
        source.start()


def test_a_wrong_password_is_reported_naming_the_source(redis_url: str) -> None:
    import redis
    from redis.exceptions import AuthenticationError

    admin = redis.Redis.from_url(redis_url)
    admin.acl_setuser("reader", enabled=True, passwords=["+right"], keys=["*"],
                      commands=["+@all"])
    try:
        url = redis_url.replace("redis://", "redis://reader:wrong@", 1)
        source = Stream.from_redis("events", group="g", consumer="c", url=url)
        with pytest.raises(AuthenticationError) as info:
            source.start()
        assert str(info.value).startswith("from_redis('events')")
        assert str(info.value).count("from_redis('events')") == 1
    finally:
        admin.acl_deluser("reader")
        admin.close()
