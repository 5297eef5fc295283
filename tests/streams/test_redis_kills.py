"""Redis pipelines killed with SIGKILL at random points, then restarted.

Each claim of the README's delivery table for a Redis source has its kill
test here. The child process (``exactly_once_child.py``) reads a Redis
stream through a consumer group into a keyed running count and sum, and
writes one line per element to a durable file or to a Redis stream; the
parent pauses it at a random point and kills it there, ``KILLS`` times,
restarting it each time, then lets it finish. A point is a count of
elements done in that run and where after it (see
:meth:`~tests.kills.SteppedChild.pause_at`): at the count, or at the next
checkpoint, before or after its file is written. The child waits there for
the parent, so each kill lands where it was drawn however loaded the machine.

* with a Checkpointer, into either sink: the output equals the
  uninterrupted run's, line for line (exactly once: a lost or repeated
  element would shift every later count and sum);
* without one, into the durable file: after every kill, each entry the
  group acknowledged has its line in some run's file (at least once: an
  acknowledgement never runs ahead of the sink's flush).
"""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.kills import PAUSES, SteppedChild, random_records, run_child, running_totals

pytestmark = pytest.mark.redis

CHILD = Path(__file__).with_name("exactly_once_child.py")
WORDS = ["alpha", "beta", "gamma", "délta", "ε", "zeta"]
#: Kills per test: each of the three pauses (:data:`~tests.kills.PAUSES`) three
#: times, at random counts (each run is a process that imports the library).
KILLS = 9
#: Entries the child reads from Redis a round trip (``--count``).
READ = 50
#: Input entries. A run is killed at a count within its first three batches,
#: or at the first checkpoint after that count (with ``--every 100``, up to
#: 100 elements and a batch later): each run covers fewer than 6 batches,
#: so the input outlasts them all and every kill lands.
N = (KILLS + 1) * 6 * READ


def records(seed: int, n: int = N) -> list[tuple[str, int]]:
    return random_records(seed, n, WORDS)


def kill_points(seed: int, pauses: tuple[str, ...] = PAUSES) -> list[tuple[int, str]]:
    """``KILLS`` points to kill a run at: a random count within its first three batches,
    and where after it (each of ``pauses`` in turn, see :meth:`SteppedChild.pause_at`)."""
    rng = random.Random(seed)
    return [(rng.randrange(10, 3 * READ, 10), pauses[i % len(pauses)]) for i in range(KILLS)]


def kill_and_restart(args: Callable[[int], list[str]], seed: int,
                     after_kill: Callable[[int], None] = lambda i: None,
                     pauses: tuple[str, ...] = PAUSES) -> list[tuple[int, str]]:
    """Kill the child ``KILLS`` times at random points (run ``i`` gets ``args(i)``); finish it."""
    kills = kill_points(seed, pauses)
    for i, (count, at) in enumerate(kills):
        with SteppedChild(CHILD, args(i)) as child:
            assert child.pause_at(count, at), \
                f"seed {seed}: run {i} finished before its kill at {count}, {at}"
            child.kill()
        after_kill(i)
    run_child(CHILD, args(KILLS))
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
            "--checkpoint", str(ckpt), "--every", str(every), "--sink", sink,
            "--count", str(READ)]


@pytest.mark.parametrize("every", [7, 100])
def test_redis_to_redis_with_checkpoint_is_exactly_once(tmp_path: Path, seed: int, events: Any,
                                                        redis_url: str, every: int) -> None:
    kills = kill_and_restart(
        lambda i: redis_args(redis_url, "out", tmp_path / "ckpt", "redis", every), seed)
    got = [fields["data"] for _, fields in events.xrange("out")]
    want = running_totals(records(seed))
    assert len(got) == len(want), f"seed {seed}, kills at {kills}"
    assert got == want, f"seed {seed}, kills at {kills}"
    assert events.xpending("events", "g")["pending"] == 0


@pytest.mark.parametrize("sink", ["file", "redis"])
def test_a_group_rewound_after_each_kill_replays_nothing(tmp_path: Path, seed: int, events: Any,
                                                         redis_url: str, sink: str) -> None:
    # XGROUP SETID 0 after a kill: the restart reads its pending entries, then the
    # rewound group delivers every entry again as new. Those the checkpoint covered
    # were skipped only until a read started above its offset, and those the run
    # had just processed again were processed once more: 100-150 lines twice.
    out = str(tmp_path / "out.txt") if sink == "file" else "out"
    kills = kill_and_restart(
        lambda i: redis_args(redis_url, out, tmp_path / "ckpt", sink, 7), seed,
        after_kill=lambda i: events.xgroup_setid("events", "g", "0"))
    got = (Path(out).read_text(encoding="utf-8").splitlines() if sink == "file"
           else [fields["data"] for _, fields in events.xrange("out")])
    assert got == running_totals(records(seed)), f"seed {seed}, kills at {kills}"
    assert events.xpending("events", "g")["pending"] == 0


def test_redis_to_durable_file_with_checkpoint_is_exactly_once(tmp_path: Path, seed: int,
                                                               events: Any,
                                                               redis_url: str) -> None:
    out = tmp_path / "out.txt"
    kills = kill_and_restart(
        lambda i: redis_args(redis_url, str(out), tmp_path / "ckpt", "file", 7), seed)
    got = out.read_text(encoding="utf-8").splitlines()
    assert got == running_totals(records(seed)), f"seed {seed}, kills at {kills}"
    assert events.xpending("events", "g")["pending"] == 0


@pytest.mark.parametrize("sink", ["file", "redis"])
def test_redis_without_checkpoint_is_at_least_once(tmp_path: Path, seed: int, events: Any,
                                                   redis_url: str, sink: str) -> None:
    ids = [i for i, _ in events.xrange("events")]

    def out(i: int) -> str:
        return str(tmp_path / f"out-{i}.txt") if sink == "file" else "out"

    def written(i: int) -> set[str]:
        if sink == "redis":
            return {fields["data"] for _, fields in events.xrange("out")}
        return {line for j in range(i + 1) if Path(out(j)).exists()
                for line in Path(out(j)).read_text(encoding="utf-8").splitlines()}

    def acknowledged_have_lines(i: int) -> None:
        pending = {p["message_id"] for p in events.xpending_range("events", "g", "-", "+", N)}
        delivered = _key(events.xinfo_groups("events")[0]["last-delivered-id"])
        acked = [e for e in ids if _key(e) <= delivered and e not in pending]
        have = written(i)
        lost = [e for e in acked if e not in have]
        assert not lost, (f"seed {seed}: after kill {i}, {len(lost)} of {len(acked)} "
                          f"acknowledged entries have no line (first {lost[:3]})")

    # Without a checkpoint, kills land at counts only.
    kill_and_restart(
        lambda i: [*redis_args(redis_url, out(i), tmp_path / "ckpt", sink, 0), "--ids"],
        seed, acknowledged_have_lines, pauses=("count",))
    acknowledged_have_lines(KILLS)
    assert events.xpending("events", "g")["pending"] == 0
    assert written(KILLS) == set(ids)


@pytest.mark.parametrize("sink", ["file", "redis"])
def test_textfile_with_checkpoint_is_exactly_once(tmp_path: Path, seed: int, redis_url: str,
                                                  sink: str) -> None:
    import redis

    data = tmp_path / "in.txt"
    recs = records(seed)
    data.write_text("".join(f"{w} {n}\n" for w, n in recs), encoding="utf-8")
    out = str(tmp_path / "out.txt") if sink == "file" else "out"
    kills = kill_and_restart(
        lambda i: ["textfile", "--input", str(data), "--url", redis_url, "--output", out,
                   "--checkpoint", str(tmp_path / "ckpt"), "--every", "7", "--sink", sink],
        seed)
    if sink == "file":
        got = Path(out).read_text(encoding="utf-8").splitlines()
    else:
        r = redis.Redis.from_url(redis_url, decode_responses=True)
        got = [fields["data"] for _, fields in r.xrange("out")]
        r.close()
    assert got == running_totals(recs), f"seed {seed}, kills at {kills}"


def _key(entry_id: str) -> tuple[int, ...]:
    return tuple(map(int, entry_id.split("-")))


class PersistentRedis:
    """A redis-server on a fixed loopback port whose data outlives a SIGKILL.

    ``"rdb"``: only the snapshot taken by ``SAVE`` survives (a restart rolls
    the consumer group back); ``"aof"``: every write acknowledged by the
    server survives (``appendfsync always``).
    """

    def __init__(self, directory: Path, persistence: str) -> None:
        server = shutil.which("redis-server")
        if server is None:
            pytest.skip("redis-server is not installed")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.argv = [server, "--port", str(port), "--bind", "127.0.0.1",
                     "--dir", str(directory), "--save", ""]
        self.argv += (["--appendonly", "yes", "--appendfsync", "always"]
                      if persistence == "aof" else ["--appendonly", "no"])
        self.url = f"redis://127.0.0.1:{self.argv[2]}/0"
        self.process: subprocess.Popen[str] | None = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if "Ready to accept connections" in line:
                return
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process.stdout.close()


@pytest.mark.parametrize(("persistence", "sink"), [("rdb", "file"), ("aof", "redis")])
def test_redis_server_killed_mid_stream(tmp_path: Path, seed: int, persistence: str,
                                        sink: str) -> None:
    """Kill the pipeline or the server at chosen points; the output is still exact.

    With ``rdb`` each server restart forgets every acknowledgement and
    delivery since the input was written: the restored pipeline must skip
    what its checkpoint covers. With ``aof`` the output stream lives in the
    same server, whose restart must neither lose nor double a write.

    Each run is paused at a point drawn from the seed (``kill_points``)
    and killed there, or the server is killed under it and the run let go
    on to die of the lost connection.
    """
    import redis

    (tmp_path / "redis").mkdir()
    server = PersistentRedis(tmp_path / "redis", persistence)
    # A run whose server is killed goes on to the end of the batch it is
    # in (and checkpoints it); N leaves room for that.
    kills = kill_points(seed)
    # Runs 1-3 and 7-9 are killed, runs 4-6 lose their server: each pause meets each victim.
    victims = [("pipeline", "server")[i // len(PAUSES) % 2] for i in range(KILLS)]
    assert {(at, v) for (_, at), v in zip(kills, victims, strict=True)} == {
        (at, v) for at in PAUSES for v in ("pipeline", "server")}, "a pause misses a victim"
    recs = records(seed)
    r = redis.Redis.from_url(server.url, decode_responses=True)
    pipe = r.pipeline(transaction=False)
    for w, n in recs:
        pipe.xadd("events", {"word": w, "n": n})
    pipe.execute()
    r.save()
    r.close()
    out = str(tmp_path / "out.txt") if sink == "file" else "out"
    args = redis_args(server.url, out, tmp_path / "ckpt", sink, 7)
    try:
        for run, ((count, at), victim) in enumerate(zip(kills, victims, strict=True)):
            with SteppedChild(CHILD, args, stderr=subprocess.PIPE) as child:
                assert child.pause_at(count, at), \
                    f"seed {seed}: run {run} finished before its kill at {count}, {at}"
                if victim == "pipeline":
                    child.kill()
                else:
                    server.kill()
                    code, err = child.end()
                    server.start()
                    # Paused mid-stream, it cannot end without the server.
                    assert code not in (0, -signal.SIGKILL) and "ConnectionError" in err, \
                        f"seed {seed}: run {run} ended with {code}:\n{err}"
        run_child(CHILD, args)
        if sink == "file":
            got = Path(out).read_text(encoding="utf-8").splitlines()
        else:
            r = redis.Redis.from_url(server.url, decode_responses=True)
            got = [fields["data"] for _, fields in r.xrange("out")]
            r.close()
        want = running_totals(recs)
        where = f"seed {seed}, kills {list(zip(kills, victims, strict=True))}"
        assert len(got) == len(want), where
        assert got == want, where
    finally:
        server.kill()


def test_a_rolled_back_group_does_not_replay_what_the_checkpoint_covers(
        tmp_path: Path, redis_url: str) -> None:
    """The group forgets its deliveries and acknowledgements (``XGROUP SETID 0``,
    what a server restored from an older snapshot does): a restored pipeline
    still processes each entry once."""
    import redis

    from streams import Checkpointer, Stream

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    for i in range(30):
        r.xadd("in", {"n": i})

    def run() -> list[int]:
        source = Stream.from_redis("in", group="g", consumer="c", url=redis_url, count=4)
        totals = source.map(lambda f: int(f["n"])).scan(lambda s, x: s + x, start=0)
        seen = totals.sink_to_list()
        Checkpointer(source, tmp_path, every=4, fsync=False)
        source.start()
        return seen

    assert run()[-1] == sum(range(30))
    r.xgroup_setid("in", "g", "0")
    for i in range(30, 35):
        r.xadd("in", {"n": i})
    assert run() == [sum(range(k + 1)) for k in range(30, 35)]
    assert r.xpending("in", "g")["pending"] == 0
    r.close()
