"""Redis pipelines killed with SIGKILL at random points, then restarted.

Each claim of the README's delivery table for a Redis source has its kill
test here. The child process (``exactly_once_child.py``) reads a Redis
stream through a consumer group into a keyed running count and sum, and
writes one line per element to a durable file or to a Redis stream; the
parent kills it ``KILLS`` times at random progress counts, restarting it
each time, then lets it finish:

* with a Checkpointer, into either sink: the output equals the
  uninterrupted run's, line for line (exactly once: a lost or repeated
  element would shift every later count and sum);
* without one, into the durable file: after every kill, each entry the
  group acknowledged has its line in some run's file (at least once: an
  acknowledgement never runs ahead of the sink's flush).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.redis

CHILD = Path(__file__).with_name("exactly_once_child.py")
WORDS = ["alpha", "beta", "gamma", "délta", "ε", "zeta"]
N = 1200
KILLS = 20
# The child imports the streams package next to these tests, installed or not.
CHILD_ENV = {**os.environ, "PYTHONHASHSEED": "0",
             "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                         os.environ.get("PYTHONPATH")]))}


def records(seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(rng.choice(WORDS), rng.randrange(1000)) for _ in range(N)]


def expected_lines(recs: list[tuple[str, int]]) -> list[str]:
    state: dict[str, tuple[int, int]] = {}
    lines = []
    for word, n in recs:
        c, s = state.get(word, (0, 0))
        state[word] = (c + 1, s + n)
        lines.append(f"{word} {c + 1} {s + n}")
    return lines


def run_child(args: list[str], kill_at: int | None) -> bool:
    """Run the child; SIGKILL it once it reports ``kill_at`` elements. True if killed."""
    child = subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE,
                             text=True, env=CHILD_ENV)
    assert child.stdout is not None
    killed = False
    try:
        for line in child.stdout:
            if line == "finished\n":
                break
            if kill_at is not None and int(line) >= kill_at:
                child.send_signal(signal.SIGKILL)
                killed = True
                break
    finally:
        child.stdout.close()
        child.wait(timeout=120)
    if child.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"the child failed with {child.returncode}")
    return killed


def kill_and_restart(args: Callable[[int], list[str]], seed: int,
                     after_kill: Callable[[int], None] = lambda i: None) -> list[int]:
    """Kill the child ``KILLS`` times at random counts (run ``i`` gets ``args(i)``); finish it."""
    rng = random.Random(seed)
    # Counts are of elements done since that start: small enough for every
    # kill to land before the end.
    kills = [rng.randrange(10, N // (KILLS + 1), 10) for _ in range(KILLS)]
    for i, k in enumerate(kills):
        assert run_child(args(i), k), f"seed {seed}: run {i} finished before its kill at {k}"
        after_kill(i)
    assert not run_child(args(KILLS), None)
    return kills


@pytest.fixture
def seed() -> int:
    return random.randrange(2**32)


@pytest.fixture
def events(redis_url: str, seed: int) -> Any:
    """The input stream ``events`` holding ``records(seed)``; yields a client."""
    import redis

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    pipe = r.pipeline(transaction=False)
    for w, n in records(seed):
        pipe.xadd("events", {"word": w, "n": n})
    pipe.execute()
    yield r
    r.close()


def redis_args(redis_url: str, out: str, ckpt: Path, sink: str, every: int) -> list[str]:
    return ["redis", "--input", "events", "--url", redis_url, "--output", out,
            "--checkpoint", str(ckpt), "--every", str(every), "--sink", sink]


@pytest.mark.parametrize("every", [7, 100])
def test_redis_to_redis_with_checkpoint_is_exactly_once(tmp_path: Path, seed: int, events: Any,
                                                        redis_url: str, every: int) -> None:
    kills = kill_and_restart(
        lambda i: redis_args(redis_url, "out", tmp_path / "ckpt", "redis", every), seed)
    got = [fields["data"] for _, fields in events.xrange("out")]
    want = expected_lines(records(seed))
    assert len(got) == len(want), f"seed {seed}, kills at {kills}"
    assert got == want, f"seed {seed}, kills at {kills}"
    assert events.xpending("events", "g")["pending"] == 0


def test_redis_to_durable_file_with_checkpoint_is_exactly_once(tmp_path: Path, seed: int,
                                                               events: Any,
                                                               redis_url: str) -> None:
    out = tmp_path / "out.txt"
    kills = kill_and_restart(
        lambda i: redis_args(redis_url, str(out), tmp_path / "ckpt", "file", 7), seed)
    got = out.read_text(encoding="utf-8").splitlines()
    assert got == expected_lines(records(seed)), f"seed {seed}, kills at {kills}"
    assert events.xpending("events", "g")["pending"] == 0


def test_redis_to_durable_file_without_checkpoint_is_at_least_once(
        tmp_path: Path, seed: int, events: Any, redis_url: str) -> None:
    ids = [i for i, _ in events.xrange("events")]

    def out(i: int) -> Path:
        return tmp_path / f"out-{i}.txt"

    def acknowledged_have_lines(i: int) -> None:
        pending = {p["message_id"] for p in events.xpending_range("events", "g", "-", "+", N)}
        delivered = _key(events.xinfo_groups("events")[0]["last-delivered-id"])
        acked = [e for e in ids if _key(e) <= delivered and e not in pending]
        written = {line for j in range(i + 1) if out(j).exists()
                   for line in out(j).read_text(encoding="utf-8").splitlines()}
        lost = [e for e in acked if e not in written]
        assert not lost, (f"seed {seed}: after kill {i}, {len(lost)} of {len(acked)} "
                          f"acknowledged entries have no line (first {lost[:3]})")

    kill_and_restart(lambda i: redis_args(redis_url, str(out(i)), tmp_path / "ckpt", "file", 0)
                     + ["--ids"], seed, acknowledged_have_lines)
    acknowledged_have_lines(KILLS)
    assert events.xpending("events", "g")["pending"] == 0


def _key(entry_id: str) -> tuple[int, ...]:
    return tuple(map(int, entry_id.split("-")))
