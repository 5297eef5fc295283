"""The command line tools, run as real processes against a real broker and redis-server."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.processes import stop_process

ROOT = Path(__file__).parents[2]  # the checkout under test, imported first by the tools
GUARD = 60.0  # seconds: only ever reached when the behaviour under test is broken


def _env(cwd: Path | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(cwd or "")]))}


def streams_cli(*args: str, stdin: str = "",
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=120, env=_env(cwd))


def following(*args: str) -> subprocess.Popen[str]:
    """``streams ARGS --follow`` running, its output and errors read as they come."""
    return subprocess.Popen([sys.executable, "-m", "streams.cli", *args, "--follow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())


def listening_port(proc: subprocess.Popen[str]) -> int:
    """The port a following server says (on stderr) it listens on: its readiness."""
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"listening on port (\d+)", line)
    assert found, line + proc.stderr.read()
    return int(found.group(1))


def interrupted(proc: subprocess.Popen[str], sig: int) -> tuple[int, str, str]:
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=GUARD)
    return proc.returncode, out, err


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
    (["clock", "stdio://", "--count", "-3"], "'-3' is not a positive whole number"),
    (["tap", "tcp://127.0.0.1:0"], "a tcp:// source is a server and never ends: add --follow"),
    (["tap", "http://127.0.0.1:0/in"], "a http:// source is a server"),
    (["tap", "ws://127.0.0.1:0"], "a ws:// source is a server"),
    (["tap", "mqtt://127.0.0.1:9/t"], "a mqtt:// source is a subscription and never ends"),
    (["relay", "--input", "tcp://127.0.0.1:0", "--output", "stdio://"], "add --follow"),
    # A port that is not one was taken as none: the scheme's default server was used.
    (["tap", "redis://127.0.0.1:99999/events"], "port '99999' is not a port"),
    (["relay", "--input", "stdio://", "--output", "mqtt://127.0.0.1:1883x/t"],
     "port '1883x' is not a port"),
    (["tap", "redis://me:secret@127.0.0.1:x/events"], "'redis://me:***@127.0.0.1:x/events'"),
    (["tap", "http://127.0.0.1:0/events/[", "--follow"], "is not a regular expression"),
    (["tap", "http://127.0.0.1:0/in?foo=1", "--follow"], "it takes none: remove ?foo=..."),
])
def test_bad_uris_and_options_get_one_clear_line(args: list[str], message: str) -> None:
    done = streams_cli(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("uri", "path"), [
    ("file://{d}/in.txt", "{d}/in.txt"), ("file://localhost{d}/in.txt", "{d}/in.txt"),
    ("file://LOCALHOST{d}/a%20b.txt", "{d}/a b.txt"), ("file://in.txt", "in.txt")])
def test_a_file_uri_names_the_path_rfc_8089_does(tmp_path: Path, monkeypatch: Any,
                                                  uri: str, path: str) -> None:
    # file://localhost/tmp/in.txt was read as the relative path localhost/tmp/in.txt.
    from streams import Stream

    monkeypatch.chdir(tmp_path)  # the sink makes its file when built
    uri, path = uri.format(d=tmp_path), path.format(d=tmp_path)
    assert Stream.from_uri(uri).file == path
    assert Stream().to_uri(uri).file == path
    assert (tmp_path / Path(path).name).exists()


def test_a_redis_user_without_a_password_is_kept() -> None:
    from streams import Stream

    assert Stream.from_uri("redis://reader@127.0.0.1:7000/s").url == (
        "redis://reader@127.0.0.1:7000/0")


def test_relay_file_to_stdout_with_a_map(tmp_path: Path) -> None:
    (tmp_path / "shout.py").write_text("def shout(line):\n    return line.upper()\n")
    data = tmp_path / "in.txt"
    data.write_text("alpha\nbeta\n")
    done = streams_cli("relay", "--input", f"file://{data}", "--output", "stdio://",
                       "--map", "shout:shout", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ALPHA\nBETA\n"


def test_a_local_map_module_is_found_by_the_installed_script_too(tmp_path: Path) -> None:
    # The console script's path starts at its own directory, not the current one.
    (tmp_path / "shout.py").write_text("def shout(line):\n    return line.upper()\n")
    data = tmp_path / "in.txt"
    data.write_text("alpha\n")
    script = ("import sys; sys.path.remove(''); from streams.cli import main; "
              "raise SystemExit(main())")
    done = subprocess.run(
        [sys.executable, "-c", script, "relay", "--input", f"file://{data}",
         "--output", "stdio://", "--map", "shout:shout"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ALPHA\n"


def test_a_json_relay_writes_each_document_once() -> None:
    lines = ['{"a": 1}', "[2, 3]", '"text"']
    done = streams_cli("relay", "--input", "stdio://?format=json",
                       "--output", "stdio://?format=json", stdin="".join(f"{x}\n" for x in lines))
    assert done.returncode == 0, done.stderr
    assert [json.loads(x) for x in done.stdout.splitlines()] == [{"a": 1}, [2, 3], "text"]


def test_a_map_to_a_json_output_gets_each_line_and_its_result_is_written(
        tmp_path: Path) -> None:
    # The usual --map of a JSON relay: a CSV line made a record.
    (tmp_path / "csv_row.py").write_text(
        "def record(line):\n"
        "    name, n = line.split(',')\n"
        "    return {'name': name, 'n': int(n)}\n")
    done = streams_cli("relay", "--input", "stdio://", "--output", "stdio://?format=json",
                       "--map", "csv_row:record", stdin="a,1\nb,2\n", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [json.loads(x) for x in done.stdout.splitlines()] == [{"name": "a", "n": 1},
                                                                 {"name": "b", "n": 2}]


def test_bad_data_is_one_line_with_status_one() -> None:
    # Status 2 is a bad URI or option; a line that does not parse is a failure at run time.
    done = streams_cli("tap", "stdio://?format=json", stdin='{"a": 1}\nnot json\n')
    assert done.returncode == 1
    assert done.stdout == '{"a": 1}\n'
    assert "not json" in done.stderr and "JSONDecodeError" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_failing_map_says_where_with_traceback(tmp_path: Path) -> None:
    (tmp_path / "ratio.py").write_text("def ratio(line):\n    return 1 / int(line)\n")
    args = ["relay", "--input", "stdio://", "--output", "stdio://", "--map", "ratio:ratio"]
    short = streams_cli(*args, stdin="1\n0\n", cwd=tmp_path)
    assert short.returncode == 1 and short.stdout == "1.0\n"
    assert short.stderr.splitlines() == [
        "streams relay: error: map(ratio) failed on element '0': ZeroDivisionError: "
        "division by zero (--traceback shows where)"]
    full = streams_cli(*args, "--traceback", stdin="1\n0\n", cwd=tmp_path)
    assert full.returncode == 1 and full.stdout == "1.0\n"
    assert "Traceback" in full.stderr and "return 1 / int(line)" in full.stderr
    assert full.stderr.splitlines()[-1] == short.stderr.splitlines()[0].replace(
        " (--traceback shows where)", "")


def test_a_redis_server_that_is_not_there_is_one_line() -> None:
    with socket.socket() as s:  # a free port, nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = streams_cli("tap", f"redis://127.0.0.1:{port}/x")
    assert done.returncode == 1
    assert "ConnectionError" in done.stderr and str(port) in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


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


@pytest.mark.redis
def test_a_redis_tap_starts_where_offset_says(redis_url: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = f"ids-{uuid.uuid4().hex}"
    for i in range(3):
        r.xadd(stream, {"data": f"e{i}"}, id=f"{1000 + i}-0")
    r.close()
    uri = f"redis://{redis_url.split('//')[1].split('/')[0]}/{stream}"

    def tap(*args: str) -> list[str]:
        done = streams_cli("tap", uri, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert tap("--offset", "earliest") == ["e0", "e1", "e2"]
    assert tap("--offset", "1001") == tap("--offset", "1001-0") == ["e1", "e2"]
    assert tap("--offset", "latest") == tap("--offset", "$") == []
    assert tap("--since", "1970-01-01T00:00:01.001+00:00") == ["e1", "e2"]
    bad = streams_cli("tap", uri, "--offset", "soon")
    assert bad.returncode == 2 and "entry id" in bad.stderr
    assert streams_cli("tap", uri, "--since", "1001").returncode == 2


def test_a_missing_file_or_a_directory_is_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent.txt"
    done = streams_cli("tap", f"file://{missing}")
    assert done.returncode == 1
    assert done.stderr.startswith("streams tap: error: ") and str(missing) in done.stderr
    assert "No such file" in done.stderr and "Traceback" not in done.stderr
    for args in (["--input", f"file://{tmp_path}/", "--output", "stdio://"],
                 ["--input", "stdio://", "--output", f"file://{tmp_path}/"]):
        done = streams_cli("relay", *args, stdin="x\n")
        assert done.returncode == 1, done.stderr
        assert "Is a directory" in done.stderr and str(tmp_path) in done.stderr
        assert len(done.stderr.splitlines()) == 1


@pytest.mark.timeout(120)  # the hang guard of the blocking reads below
def test_a_tcp_tap_serves_until_interrupted() -> None:
    proc = following("tap", "tcp://127.0.0.1:0")
    try:
        port = listening_port(proc)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"hello\nlast without a newline")
        assert proc.stdout is not None
        # Followed, each line is written as it comes: it is read here before the signal.
        assert [proc.stdout.readline(), proc.stdout.readline()] == [
            "hello\n", "last without a newline\n"]
        returncode, out, err = interrupted(proc, signal.SIGINT)
        assert (returncode, out) == (0, ""), err
        assert "Traceback" not in err
    finally:
        stop_process(proc)


@pytest.mark.timeout(120)
def test_an_http_tap_serves_until_terminated() -> None:
    proc = following("tap", "http://127.0.0.1:0/in")
    try:
        port = listening_port(proc)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/in", data=b"posted")
        with urllib.request.urlopen(request, timeout=GUARD) as response:
            assert response.status == 200  # answered once the body was through the pipeline
        assert proc.stdout is not None
        assert proc.stdout.readline() == "posted\n"
        returncode, out, err = interrupted(proc, signal.SIGTERM)
        assert (returncode, out) == (0, ""), err
    finally:
        stop_process(proc)


@pytest.mark.timeout(120)
def test_an_mqtt_tap_prints_the_payloads(mqtt_broker: Any) -> None:
    import paho.mqtt.publish as publish

    topic = f"cli/{uuid.uuid4().hex}"
    # Retained: the broker delivers it when the tap subscribes, whenever that is.
    publish.single(topic, "21.5", retain=True, hostname=mqtt_broker.host,
                   port=mqtt_broker.port)
    proc = following("tap", f"mqtt://{mqtt_broker.host}:{mqtt_broker.port}/{topic}")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "21.5\n"
        returncode, out, err = interrupted(proc, signal.SIGINT)
        assert (returncode, out) == (0, ""), err
    finally:
        stop_process(proc)
        publish.single(topic, "", retain=True, hostname=mqtt_broker.host,
                       port=mqtt_broker.port)  # the retained message is cleared
