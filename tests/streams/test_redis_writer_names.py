"""sink_to_redis under a Checkpointer starting without a checkpoint: whose writer names it takes.

A changed pipeline, started afresh after its old checkpoint was removed,
writes all its outputs (it once took the old run's writer names from
``writers.json``, and the server skipped as many of its outputs as the old
run had written); the same pipeline over the same input, restarted without
a checkpoint (a crash before its first one), writes nothing twice.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from streams import Checkpointer, CheckpointError, Stream

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.redis


def run(path: Path, ckpt: Path, url: str, func: Any) -> bool:
    source = Stream.from_textfile(path)
    source.map(int).scan(func, start=0).map(str).sink_to_redis("out", url=url, batch=3)
    checkpointer = Checkpointer(source, ckpt, every=4, fsync=False)
    source.start()
    return checkpointer.restored


def sums(s: int, x: int) -> int:
    return s + x


def hundreds(s: int, x: int) -> int:
    return x * 100


def written(r: Any) -> list[str]:
    return [fields["data"] for _, fields in r.xrange("out")]


def test_a_changed_pipeline_started_afresh_writes_all_its_outputs(
        tmp_path: Path, redis_url: str, r: Any) -> None:
    data, ckpt = tmp_path / "in.txt", tmp_path / "ckpt"
    data.write_text("".join(f"{i}\n" for i in range(1, 11)))
    run(data, ckpt, redis_url, sums)
    v1 = ["1", "3", "6", "10", "15", "21", "28", "36", "45", "55"]
    assert written(r) == v1
    with pytest.raises(CheckpointError) as refused:
        run(data, ckpt, redis_url, hundreds)
    (ckpt / "checkpoint").unlink()  # the file alone, as the message once said
    assert not run(data, ckpt, redis_url, hundreds)
    assert written(r) == v1 + [str(i * 100) for i in range(1, 11)]
    # It says now to remove both files (or to pass restore=False).
    assert re.search(rf"function changed.*to start afresh, remove the directory "
                     rf"{re.escape(str(ckpt))}, both its checkpoint and its writers\.json, or "
                     r"pass Checkpointer\(restore=False\)", str(refused.value))


def test_the_same_pipeline_restarted_without_its_checkpoint_writes_nothing_twice(
        tmp_path: Path, redis_url: str, r: Any) -> None:
    data, ckpt = tmp_path / "in.txt", tmp_path / "ckpt"
    data.write_text("".join(f"{i}\n" for i in range(1, 11)))
    run(data, ckpt, redis_url, sums)
    (ckpt / "checkpoint").unlink()  # as a crash before the first checkpoint leaves it
    assert not run(data, ckpt, redis_url, sums)
    assert written(r) == ["1", "3", "6", "10", "15", "21", "28", "36", "45", "55"]
