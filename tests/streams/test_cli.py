"""The command line tools, run as real processes against a real broker and redis-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]  # the checkout under test, imported first by the tools


def streams_cli(*args: str, stdin: str = "",
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(cwd or "")]))}
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("command", ["relay", "tap", "clock"])
def test_each_command_has_help(command: str) -> None:
    done = streams_cli(command, "--help")
    assert done.returncode == 0
    assert f"usage: streams {command}" in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["relay", "--input", "localhost:9092", "--output", "stdio://"], "is not a stream URI"),
    (["relay", "--input", "amqp://h/t", "--output", "stdio://"], "unknown scheme 'amqp://'"),
    (["relay", "--input", "stdio://", "--output", "tcp://127.0.0.1:9"], "can only be a source"),
    (["tap", "kafka://127.0.0.1:9/"], "give one topic"),
    (["tap", "kafka://127.0.0.1:9/t?colour=red"], "unknown option 'colour'"),
    (["clock", "stdio://", "--interval", "soon"], "not a positive interval"),
])
def test_bad_uris_and_options_get_one_clear_line(args: list[str], message: str) -> None:
    done = streams_cli(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_relay_file_to_stdout_with_a_map(tmp_path: Path) -> None:
    (tmp_path / "shout.py").write_text("def shout(line):\n    return line.upper()\n")
    data = tmp_path / "in.txt"
    data.write_text("alpha\nbeta\n")
    done = streams_cli("relay", "--input", f"file://{data}", "--output", "stdio://",
                       "--map", "shout:shout", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ALPHA\nBETA\n"


@pytest.mark.kafka
def test_stdin_to_kafka_then_tap(kafka_broker: Any, kafka_topic: str) -> None:
    uri = f"kafka://{kafka_broker.bootstrap}/{kafka_topic}"
    lines = [f"line {i}" for i in range(25)]
    done = streams_cli("relay", "--input", "stdio://", "--output", uri,
                       stdin="".join(f"{x}\n" for x in lines))
    assert done.returncode == 0, done.stderr
    assert kafka_broker.read(kafka_topic) == [x.encode() for x in lines]
    tapped = streams_cli("tap", uri)
    assert tapped.returncode == 0, tapped.stderr
    assert tapped.stdout.splitlines() == lines
    from_ten = streams_cli("tap", uri, "--offset", "10")
    assert from_ten.stdout.splitlines() == lines[10:]
    assert streams_cli("tap", uri, "--since", "2000-01-01T00:00:00").stdout.splitlines() == lines
    assert streams_cli("tap", uri, "--since", "2999-01-01T00:00:00").stdout == ""


@pytest.mark.kafka
@pytest.mark.redis
def test_redis_to_kafka_relay_and_a_clock(kafka_broker: Any, kafka_topic: str,
                                          redis_url: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    for i in range(5):
        r.xadd("events", {"n": i})
    r.close()
    host_port = redis_url.split("//")[1].split("/")[0]
    kafka = f"kafka://{kafka_broker.bootstrap}/{kafka_topic}"
    done = streams_cli("relay", "--input", f"redis://{host_port}/events", "--output", kafka)
    assert done.returncode == 0, done.stderr
    assert [json.loads(v) for v in kafka_broker.read(kafka_topic)] == [
        {"n": str(i)} for i in range(5)]
    ticks = streams_cli("clock", kafka, "--interval", "1ms", "--count", "3")
    assert ticks.returncode == 0, ticks.stderr
    written = [json.loads(v) for v in kafka_broker.read(kafka_topic)[5:]]
    assert [t["tick"] for t in written] == [0, 1, 2]
    # Back to Redis: a relay between brokers in the other direction.
    back = streams_cli("relay", "--input", kafka, "--output", f"redis://{host_port}/copy",
                       "--offset", "earliest")
    assert back.returncode == 0, back.stderr
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    assert len(r.xrange("copy")) == 8
    r.close()
