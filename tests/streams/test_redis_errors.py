"""Redis errors reach the user as themselves, naming the source.

An error reply in the middle of a read (the group deleted: NOGROUP) used to
leave replies unread on the connection, and the next read waited for the
socket's timeout: a bare ``TimeoutError`` five seconds later. A server that
cannot be reached is reported naming the source and its stream.

``sink_to_redis`` refuses an element Redis cannot store as an entry on its
own, and a process that exits without closing the stream writes what the
sink holds, or warns of what it could not write.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from streams import NodeError, Stream
from tests.streams.test_redis import emit_then_close

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


@pytest.mark.parametrize("method", ["script", "pipeline"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_empty_dict_or_a_field_name_redis_cannot_store_fails_alone(
        r: Any, redis_url: str, method: str, asynchronous: bool) -> None:
    # They used to fail the whole batch in the server (its entries before
    # them added all the same), reported under the batch's first element.
    items = [{"a": 1}, {}, {"b": 2}, {None: 3}, {"c": 4, (1, 2): 5}, {"d": 6}]
    source = Stream(asynchronous=asynchronous)
    sink = source.sink_to_redis("out", url=redis_url, batch=100, method=method)
    errors = sink.on_error("route").errors.sink_to_list()
    emit_then_close(source, items)
    assert [e.element for e in errors] == [{}, {None: 3}, {"c": 4, (1, 2): 5}]
    assert "an empty dict" in str(errors[0].exception)
    assert "field name None" in str(errors[1].exception)
    assert "field name (1, 2)" in str(errors[2].exception)
    assert [f for _, f in r.xrange("out")] == [{"a": "1"}, {"b": "2"}, {"d": "6"}]


def test_an_empty_dict_raised_names_itself_and_the_sink(r: Any, redis_url: str) -> None:
    source = Stream()
    source.sink_to_redis("out", url=redis_url, batch=3)
    source.emit({"a": 1})
    source.emit({"b": 2})
    with pytest.raises(NodeError, match=r"sink_to_redis\('out'\) failed on element \{\}.*"
                                        r"empty dict"):
        source.emit({})
    assert [f for _, f in r.xrange("out")] == [{"a": "1"}, {"b": "2"}]


def exit_without_close(body: str, url: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a new interpreter (``url`` is ``sys.argv[1]``) that exits without
    closing its streams."""
    code = "import sys\nfrom streams import Stream\n" + textwrap.dedent(body)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code, url], cwd=root, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("method", ["script", "pipeline"])
def test_a_process_exiting_without_close_writes_what_the_sink_holds(
        r: Any, redis_url: str, method: str) -> None:
    # Fewer elements than a batch: nothing was written before exit, and the
    # buffer used to be lost without a word.
    done = exit_without_close(f"""
        source = Stream()
        source.sink_to_redis("out", url=sys.argv[1], method={method!r})
        for i in range(3):
            source.emit({{"n": i}})
    """, redis_url)
    assert [f for _, f in r.xrange("out")] == [{"n": "0"}, {"n": "1"}, {"n": "2"}]
    assert "Warning" not in done.stderr


def test_a_process_exiting_without_close_warns_of_what_a_loop_sink_holds(
        r: Any, redis_url: str) -> None:
    done = exit_without_close("""
        import asyncio

        source = Stream(asynchronous=True)
        source.sink_to_redis("out", url=sys.argv[1])

        async def main():
            for i in range(3):
                await source.emit(i)

        asyncio.run(main())
    """, redis_url)
    assert r.xlen("out") == 0
    assert "sink_to_redis('out'): 3 element(s) were not written" in done.stderr
    assert "its loop is gone" in done.stderr


def test_a_process_exiting_without_close_warns_when_the_write_fails() -> None:
    done = exit_without_close("""
        source = Stream()
        source.sink_to_redis("out", url=sys.argv[1])
        source.emit(1)
        source.emit(2)
    """, "redis://127.0.0.1:1/0")
    assert "sink_to_redis('out'): 2 element(s) were not written" in done.stderr
    assert "ConnectionError" in done.stderr
