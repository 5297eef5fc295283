"""Exactly once over Kafka: a real process killed with SIGKILL, restarted from its checkpoint.

The pipeline (tests/streams/kafka_exactly_once_child.py) reads keyed messages
from a two-partition topic through a keyed scan into a durable file, or into
a topic through a transactional ``to_kafka``. The parent kills it with
SIGKILL at random points, restarting it each time against the same
checkpoint directory, then lets it finish: the output must hold the lines of
an uninterrupted run, each exactly once (a lost or repeated message would
change every later count and sum of its word). A point is a count of
messages done in that run and where after it (see
:meth:`~tests.kills.SteppedChild.pause_at`): at the count, or at the next
checkpoint, before its file is written (the output it covers in the file,
or in a committed transaction) or after (before the source reads on).
"""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.kills import (
    kill_at_points,
    kill_points,
    random_records,
    run_child,
    running_totals,
    start_child,
)

pytestmark = pytest.mark.kafka

CHILD = Path(__file__).with_name("kafka_exactly_once_child.py")
WORDS = ["alpha", "beta", "gamma", "délta", "ε", "zeta", "ηta", "theta"]
N = 800
KILLS = 3


def produce_records(broker: Any, topic: str, seed: int) -> list[tuple[str, int]]:
    from confluent_kafka import Producer

    recs = random_records(seed, N, WORDS)
    p = Producer(broker.config())
    for w, n in recs:
        p.produce(topic, f"{w} {n}".encode(), key=w.encode())  # one word, one partition
    p.flush(30)
    return recs


def expected_lines(recs: list[tuple[str, int]]) -> list[str]:
    return sorted(running_totals(recs))


def killed_and_restarted(args: list[str], seed: int,
                         n_kills: int = KILLS) -> list[tuple[int, str]]:
    kills = kill_points(seed, N, n_kills)
    kill_at_points(CHILD, args, kills, f"seed {seed}: ")
    run_child(CHILD, args)
    return kills


@pytest.fixture
def seed() -> int:
    return random.randrange(2**32)


def test_kafka_keyed_scan_durable_file_survives_sigkill(kafka_broker: Any, tmp_path: Path,
                                                        seed: int) -> None:
    topic = kafka_broker.create_topic(f"eo-file-{seed}", partitions=2)
    recs = produce_records(kafka_broker, topic, seed)
    out = tmp_path / "out.txt"
    args = ["--bootstrap", kafka_broker.bootstrap, "--input", topic, "--sink", "file",
            "--output", str(out), "--checkpoint", str(tmp_path / "ckpt")]
    kills = killed_and_restarted(args, seed)
    got = sorted(out.read_text(encoding="utf-8").splitlines())
    assert got == expected_lines(recs), f"seed {seed}, kills at {kills}"


def test_kafka_to_transactional_kafka_survives_sigkill(kafka_broker: Any, tmp_path: Path,
                                                       seed: int) -> None:
    topic = kafka_broker.create_topic(f"eo-in-{seed}", partitions=2)
    out = kafka_broker.create_topic(f"eo-out-{seed}", partitions=2)
    recs = produce_records(kafka_broker, topic, seed)
    args = ["--bootstrap", kafka_broker.bootstrap, "--input", topic, "--group", f"g{seed}",
            "--sink", "kafka", "--output", out, "--txn-id", f"eo-{seed}",
            "--checkpoint", str(tmp_path / "ckpt")]
    # The worst moment: a transaction committed, the checkpoint covering it not
    # yet written. The restarted run must not write those messages again.
    child = start_child(CHILD, [*args, "--die-after-commit", "3"])
    child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL
    # Each restart of a group member waits for the killed one's session to
    # time out (2 s here): two kills more, at points drawn from the seed.
    kills = killed_and_restarted(args, seed, n_kills=2)
    got = sorted(v.decode() for v in kafka_broker.read(out, committed=True))
    assert got == expected_lines(recs), f"seed {seed}, kills at {kills}"
