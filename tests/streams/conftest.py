"""A real redis-server on a free loopback port, for the connector tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process, without persistence, on 127.0.0.1."""

    def __init__(self, directory: Path) -> None:
        assert REDIS_SERVER is not None
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(directory),
             "--loglevel", "notice"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # Readiness is an event the server logs, not a delay to guess.
        assert self.process.stdout is not None
        log = []
        for line in self.process.stdout:
            log.append(line)
            if "Ready to accept connections" in line:
                break
        else:
            raise RuntimeError("redis-server did not start:\n" + "".join(log))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The session's redis-server (tests skip if it is not installed)."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    pytest.importorskip("redis")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The URL of an emptied database on the session's redis-server."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


@pytest.fixture
def r(redis_url: str) -> Iterator[Any]:
    """A client of the emptied database, answers decoded."""
    import redis

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()
