"""``python -m streams``: a live demo that prints as it goes, and its other demos."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from streams import VirtualClock, use_clock
from streams.__main__ import main
from streams.demo import run_events

ROOT = Path(__file__).resolve().parents[2]


def python_m_streams(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_events_demo_prints_each_second_as_it_comes() -> None:
    out = io.StringIO()

    def lines() -> list[str]:
        return out.getvalue().splitlines()

    with use_clock(VirtualClock()) as clock:
        async def drive() -> int:
            run = asyncio.ensure_future(
                run_events(seconds=3.0, rate=400.0, out=out, progress=False, clock=clock))
            await clock.advance_async(1.5)
            assert [line[:9] for line in lines()] == ["second  1"]  # while events still come
            assert not run.done()
            await clock.advance_async(1.0)
            assert [line[:9] for line in lines()] == ["second  1", "second  2"]
            await clock.advance_async(2.0)
            return await run

        n = asyncio.run(drive())
    *seconds, last = lines()
    assert [line[:9] for line in seconds] == ["second  1", "second  2", "second  3", "second  4"]
    assert all("p95" in line and "top: /home" in line for line in seconds)
    assert last.startswith(f"{n:,} page views in 3 s; views per page: /home")
    # The keyed scan's counts add up to every view.
    assert sum(int(part.rsplit(" ", 1)[1].replace(",", ""))
               for part in last.split(": ", 1)[1].split(", ")) == n


def test_help_names_the_other_demos() -> None:
    result = python_m_streams("--help")
    assert result.returncode == 0
    for demo in ("events", "dask", "spark", "redis", "words"):
        assert demo in result.stdout


def test_the_default_demo_runs_from_the_command_line() -> None:
    result = python_m_streams("--seconds", "1", "--rate", "300", "--no-progress")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("second  1:") and "page views in 1 s" in lines[-1]


def test_a_missing_file_is_one_line() -> None:
    result = python_m_streams("nope.txt")
    assert result.returncode == 2
    assert result.stderr == "python -m streams: no such file: nope.txt\n"


def test_a_misspelled_demo_is_named() -> None:
    result = python_m_streams("evnts")
    assert result.returncode == 2
    assert result.stderr == "python -m streams: no such file: evnts (the demo 'events'?)\n"


def test_the_redis_demo_without_a_server_is_one_line() -> None:
    import socket

    with socket.socket() as s:  # a free port, nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = python_m_streams("redis", f"redis://127.0.0.1:{port}/0", "--seconds", "1")
    assert result.returncode == 1
    assert result.stderr.startswith(f"python -m streams: redis demo: redis://127.0.0.1:{port}/0")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_interrupting_a_followed_word_count_ends_it_quietly(tmp_path: Path) -> None:
    import signal

    text = tmp_path / "in.txt"
    text.write_text("streams streams words\n")
    proc = subprocess.Popen([sys.executable, "-m", "streams", "words", str(text), "--follow",
                             "--window", "2"], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    assert proc.stdout.readline() == "streams=2\n"  # following now
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


@pytest.mark.parametrize(("args", "message"), [
    (["redis", "notaurl"], "argument url: 'notaurl' is not a Redis URL"),
    (["--seconds", "-1"], "argument --seconds: '-1' is not a number above 0"),
    (["spark", "--rate", "0"], "argument --rate: '0' is not a number above 0"),
    (["words", "x.txt", "--window", "0"], "argument --window: '0' is not a whole number above 0"),
])
def test_bad_demo_arguments_are_one_usage_error(args: list[str], message: str) -> None:
    result = python_m_streams(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_the_command_line_tools_are_dispatched_when_installed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    cli = types.ModuleType("streams.cli")
    cli.__spec__ = types.SimpleNamespace(name="streams.cli")  # type: ignore[assignment]
    cli.main = lambda argv: calls.append(argv) or 7  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "streams.cli", cli)
    import streams

    monkeypatch.setattr(streams, "cli", cli, raising=False)
    assert main(["tap", "redis://x"]) == 7
    assert calls == [["tap", "redis://x"]]


@pytest.mark.redis
def test_the_redis_demo_reads_back_every_event(redis_url: str) -> None:
    from streams.demo import run_redis

    out = io.StringIO()
    n = asyncio.run(run_redis(redis_url, seconds=1.0, rate=200.0, out=out, progress=False))
    last = out.getvalue().splitlines()[-1]
    assert last.startswith(f"{n:,} page views through Redis stream")
    assert sum(int(part.rsplit(" ", 1)[1].replace(",", ""))
               for part in last.split("views per page: ", 1)[1].split(", ")) == n
