"""Exactly once, end to end: a real process killed with SIGKILL, restarted from its checkpoint.

The pipeline (tests/streams/exactly_once_child.py) reads a replayable source
through a keyed scan into a durable file sink, checkpointing every few
elements. The parent kills it with SIGKILL at random points several times,
restarting it each time against the same checkpoint directory, then lets it
finish: the output file must equal an uninterrupted run's, line for line (a
lost or repeated element would shift every later count and sum). A point is
a count of elements done in that run and where after it (see
:meth:`~tests.kills.SteppedChild.pause_at`): at the count, or at the next
checkpoint, before or after its file is written. The child waits there for
the parent, so each kill lands where it was drawn however loaded the machine.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.kills import kill_at_points, kill_points, random_records, run_child, running_totals

CHILD = Path(__file__).with_name("exactly_once_child.py")
WORDS = ["alpha", "beta", "gamma", "délta", "ε", "zeta", "ηta", "theta"]
N = 1500
KILLS = 4


def records(seed: int) -> list[tuple[str, int]]:
    return random_records(seed, N, WORDS)


def expected_output(recs: list[tuple[str, int]]) -> str:
    return "".join(f"{line}\n" for line in running_totals(recs))


def crash_and_restart(args_for: Any, tmp_path: Path, seed: int) -> None:
    # The uninterrupted run.
    clean = tmp_path / "clean.txt"
    run_child(CHILD, args_for(clean, tmp_path / "clean-ckpt", reference=True))
    # The same, killed at KILLS random points, restarted each time against
    # the same checkpoint.
    out = tmp_path / "out.txt"
    ckpt = tmp_path / "ckpt"
    kills = kill_points(seed, N, KILLS)
    kill_at_points(CHILD, args_for(out, ckpt), kills, f"seed {seed}: ")
    run_child(CHILD, args_for(out, ckpt))
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
