"""The Redis connectors' arguments are checked when the graph is built.

Each used to be taken and to fail later: at ``start()`` (a start id Redis
does not read; ``claim_idle="10s"`` multiplied into a 3000-character string;
``block="1s"`` a bare TypeError), or, for the sink's ``url``, only when its
first batch was written, the buffered elements dropped. None of these needs
a server.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from streams import Stream

pytest.importorskip("redis")


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"claim_idle": -5}, ValueError, r"from_redis\(\): claim_idle must be >= 0 seconds"),
    ({"claim_idle": True}, TypeError, r"from_redis\(\): claim_idle must be a number of seconds"),
    ({"claim_idle": "ten"}, ValueError, r"from_redis\(\): cannot read claim_idle 'ten'"),
    ({"claim_idle": float("inf")}, ValueError, r"from_redis\(\): claim_idle must be >= 0"),
    ({"block": [1]}, TypeError, r"from_redis\(\): block must be a number of seconds"),
    ({"block": False}, TypeError, r"from_redis\(\): block must be a number of seconds"),
    ({"block": 0}, ValueError, r"from_redis\(\): block must be > 0 seconds"),
    ({"block": 0.0001}, ValueError, r"from_redis\(\): block must be at least 0.001 seconds"),
    ({"start": "yesterday"}, ValueError, r"from_redis\(\): start 'yesterday' is not an entry "
                                         r"id Redis reads; give '0'"),
    ({"start": ">"}, ValueError, r"from_redis\(\): start '>' is not an entry id"),
    ({"start": "5-"}, ValueError, r"from_redis\(\): start '5-' is not an entry id"),
    ({"start": f"{2**64}-0"}, ValueError, r"from_redis\(\): start '18446744073709551616-0'"),
    ({"start": float("nan")}, ValueError, r"from_redis\(\): start must be a finite time"),
    ({"url": "http://x"}, ValueError, r"from_redis\(\): url 'http://x' is not a Redis URL.*"
                                      r"give 'redis://host:port/db'"),
    ({"url": "redis://h:port/0"}, ValueError, r"from_redis\(\): url .* is not a Redis URL"),
    ({"url": None}, TypeError, r"from_redis\(\): url must be a str"),
])
def test_from_redis_refuses_bad_arguments_when_built(kwargs: dict[str, Any],
                                                     error: type[Exception],
                                                     message: str) -> None:
    with pytest.raises(error, match=message):
        Stream.from_redis("events", group="g", consumer="c", **kwargs)


def test_from_redis_reads_durations_and_ids_redis_takes() -> None:
    # Durations as every timed operator reads them; ids as XREAD and XGROUP CREATE do.
    source = Stream.from_redis("events", block="500ms", claim_idle="10s")
    assert (source.block, source.claim_idle) == (0.5, 10.0)
    assert Stream.from_redis("events", claim_idle=0).claim_idle == 0.0
    top = f"{2**64 - 1}-{2**64 - 1}"
    at_time = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)  # 1700000000 s
    for start, at in [("$", "$"), ("0", "0"), ("0-0", "0-0"), (top, top),
                      (b"1700000000000-3", "1700000000000-3"),
                      (at_time, "1699999999999-18446744073709551615")]:
        assert Stream.from_redis("events", start=start).start_at == at


def test_a_url_in_an_error_does_not_show_its_password() -> None:
    with pytest.raises(ValueError, match=r"url 'http://user:\*\*\*@x' ") as info:
        Stream.from_redis("events", url="http://user:secret@x")
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(("url", "error", "message"), [
    ("http://x", ValueError, r"sink_to_redis\(\): url 'http://x' is not a Redis URL"),
    ("localhost:6379", ValueError, r"sink_to_redis\(\): url 'localhost:6379' is not a Redis"),
    (b"redis://x", TypeError, r"sink_to_redis\(\): url must be a str"),
])
def test_sink_to_redis_refuses_a_url_that_is_not_redis_when_built(
        url: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Stream().sink_to_redis("out", url=url)


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "rediss://u:p@h:6380/2",
                                 "unix:///tmp/redis.sock?db=1", "REDIS://h"])
def test_redis_urls_are_taken(url: str) -> None:
    assert Stream().sink_to_redis("out", url=url).url == url
    assert Stream.from_redis("events", url=url).url == url
