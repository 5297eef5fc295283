"""Exactly once, end to end: a real process killed with SIGKILL, restarted from its checkpoint.

The pipeline (tests/streams/exactly_once_child.py) reads a replayable source
through a keyed scan into a durable file sink, checkpointing every few
elements. The parent kills it with SIGKILL at random progress counts several
times, restarting it each time against the same checkpoint directory, then
lets it finish: the output file must equal an uninterrupted run's, line for
line (a lost or repeated element would shift every later count and sum).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHILD = Path(__file__).with_name("exactly_once_child.py")
WORDS = ["alpha", "beta", "gamma", "délta", "ε", "zeta", "ηta", "theta"]
N = 1500
KILLS = 4


def records(seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(rng.choice(WORDS), rng.randrange(1000)) for _ in range(N)]


def expected_output(recs: list[tuple[str, int]]) -> str:
    state: dict[str, tuple[int, int]] = {}
    lines = []
    for word, n in recs:
        c, s = state.get(word, (0, 0))
        state[word] = (c + 1, s + n)
        lines.append(f"{word} {c + 1} {s + n}\n")
    return "".join(lines)


def start_child(args: list[str]) -> subprocess.Popen[str]:
    # The child imports the streams package next to these tests, installed or not.
    path = os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                         os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONHASHSEED": "0",
                                            "PYTHONPATH": path})


def run_killed_at(args: list[str], count: int) -> bool:
    """Run the child until it reports ``count`` elements, then SIGKILL it.

    Returns False if it finished first.
    """
    child = start_child(args)
    assert child.stdout is not None
    try:
        for line in child.stdout:
            if line == "finished\n":
                return False
            if int(line) >= count:
                child.send_signal(signal.SIGKILL)
                return True
        return False
    finally:
        child.wait(timeout=120)
        child.stdout.close()
        if child.returncode not in (0, -signal.SIGKILL):
            raise AssertionError(f"the child failed with {child.returncode}")


def run_to_end(args: list[str]) -> None:
    child = start_child(args)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0, out
    assert out.endswith("finished\n")


def crash_and_restart(args_for: Any, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    # The uninterrupted run.
    clean = tmp_path / "clean.txt"
    run_to_end(args_for(clean, tmp_path / "clean-ckpt", reference=True))
    # The same, killed KILLS times at random progress counts, restarted each
    # time (a count is of elements done since that start, so they stay small
    # enough for every kill to land before the end).
    out = tmp_path / "out.txt"
    ckpt = tmp_path / "ckpt"
    kills = [rng.randrange(10, N // (KILLS + 1), 10) for _ in range(KILLS)]
    killed = [run_killed_at(args_for(out, ckpt), k) for k in kills]
    run_to_end(args_for(out, ckpt))
    assert all(killed), f"seed {seed}: the child finished before being killed: {killed}"
    assert out.read_text(encoding="utf-8") == clean.read_text(encoding="utf-8"), (
        f"seed {seed}, kills at {kills}")


@pytest.fixture
def seed() -> int:
    return random.randrange(2**32)


def test_textfile_keyed_scan_file_sink_survives_sigkill(tmp_path: Path, seed: int) -> None:
    recs = records(seed)
    data = tmp_path / "in.txt"
    data.write_text("".join(f"{w} {n}\n" for w, n in recs), encoding="utf-8")

    def args_for(out: Path, ckpt: Path, reference: bool = False) -> list[str]:
        return ["textfile", "--input", str(data), "--output", str(out),
                "--checkpoint", str(ckpt), "--every", "7"]

    crash_and_restart(args_for, tmp_path, seed)
    assert (tmp_path / "clean.txt").read_text(encoding="utf-8") == expected_output(recs)


@pytest.mark.redis
def test_redis_keyed_scan_file_sink_survives_sigkill(tmp_path: Path, seed: int,
                                                     redis_url: str) -> None:
    import redis

    recs = records(seed)
    r = redis.Redis.from_url(redis_url)
    pipe = r.pipeline(transaction=False)
    for key in ("events", "events-reference"):
        for w, n in recs:
            pipe.xadd(key, {"word": w, "n": n})
    pipe.execute()

    def args_for(out: Path, ckpt: Path, reference: bool = False) -> list[str]:
        key = "events-reference" if reference else "events"
        return ["redis", "--input", key, "--url", redis_url, "--output", str(out),
                "--checkpoint", str(ckpt), "--every", "7"]

    crash_and_restart(args_for, tmp_path, seed)
    assert (tmp_path / "clean.txt").read_text(encoding="utf-8") == expected_output(recs)
    assert r.xpending("events", "g")["pending"] == 0
    r.close()
