"""Exactly once through the ``streams_kafka`` data source, across SIGKILLs.

A real process (``datasource_kill_child.py``) runs a Spark query from a Kafka
topic, through a Python UDF, into Spark's JSON file sink. It is killed with
SIGKILL (its whole process group: driver, JVM and Python workers) in the
middle of a micro-batch at a random offset, and restarted against the same
checkpoint, then let finish. The files Spark committed must hold
every message exactly once: the source's offsets live in Spark's checkpoint,
and a micro-batch run again reads the same offsets.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

CHILD = Path(__file__).with_name("datasource_kill_child.py")
ROOT = CHILD.parents[2]  # the checkout under test, imported first by the child
# Three micro-batches of ten; one kill (each run starts a JVM: a second kill
# cost a minute of the suite and tested the same restart again).
N = 30
KILLS = 1


def run_child(bootstrap: str, topic: str, out: Path, checkpoint: Path, kill_at: int) -> int:
    proc = subprocess.run(
        [sys.executable, str(CHILD), bootstrap, topic, str(out), str(checkpoint), str(kill_at)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
        capture_output=True, text=True, timeout=600)
    if proc.returncode not in (0, -9):
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode


def committed_rows(spark: Any, out: Path) -> list[tuple[int, int]]:
    """The rows Spark's file sink committed (its metadata log, not every file)."""
    rows = spark.read.schema("offset long, doubled long").json(str(out)).collect()
    return sorted((r["offset"], r["doubled"]) for r in rows)


@pytest.mark.slow
def test_kafka_to_files_through_the_data_source_survives_sigkill(
        spark: Any, kafka_broker: Any, tmp_path: Path) -> None:
    seed = random.randrange(10**6)
    rng = random.Random(seed)
    topic = kafka_broker.create_topic(f"spark-kills-{seed}")
    values = [rng.randrange(1000) for _ in range(N)]
    # One record a batch: the test broker's high watermark is right only then.
    kafka_broker.produce(topic, [b"%d" % v for v in values], record_batches=False)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    kills = sorted(rng.sample(range(1, N), KILLS))
    codes = [run_child(kafka_broker.bootstrap, topic, out, checkpoint, k) for k in kills]
    assert codes == [-9] * KILLS, f"seed {seed}: a run was not killed ({codes})"
    assert run_child(kafka_broker.bootstrap, topic, out, checkpoint, -1) == 0
    # Files of the killed batches are on disk, but not committed: the reader skips them.
    written = [json.loads(line) for f in out.glob("part-*") for line in f.read_text().split()]
    assert len(written) >= N, f"seed {seed}: the restarts wrote too little"
    assert committed_rows(spark, out) == [(i, 2 * v) for i, v in enumerate(values)], \
        f"seed {seed}, kills at offsets {kills}"
