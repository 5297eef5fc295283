"""Checkpoints of pipelines with a Spark segment: held in a micro-batch means not done.

A checkpoint records a source's offset as done, so the elements held in the
open micro-batch must run first, and the state a batch-mode segment carries
from one micro-batch to the next must be in the checkpoint. A segment whose
state Spark keeps (keyed scan, event-time window) cannot be saved with the
source offsets: a Checkpointer over it is refused when it is created.
"""

from __future__ import annotations

from operator import add
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401
from streams import Checkpointer, CheckpointError, Stream
from streams.state import read_checkpoint

pytestmark = pytest.mark.spark


def build(items: list[int], out: Path, ckpt: Path, every: int,
          tap: Any = None) -> tuple[Stream[Any], Checkpointer, Any]:
    source = Stream.from_iterable(items)
    totals = source.to_spark(batch_size=4).map(lambda x: 2 * x).scan(add, start=0).gather()
    sink = totals.map(str).sink_to_durable_textfile(out, fsync=False)
    if tap is not None:
        totals.sink(tap)
    return source, Checkpointer(source, ckpt, every=every, fsync=False), sink


def test_a_checkpoint_runs_the_open_micro_batch_and_holds_the_state(
        spark: Any, tmp_path: Path, record_checkpoints: Any) -> None:
    source = Stream.from_iterable(range(10))
    out = source.to_spark(batch_size=4).scan(add, start=0).gather().sink_to_list()
    cp = Checkpointer(source, tmp_path, every=3, fsync=False)
    taken = record_checkpoints(
        cp, lambda nodes: (source.offset, len(out), nodes[1].segment_states))
    source.start()
    # Every element up to the offset came back before each checkpoint, and
    # the scan's running total (kept between micro-batches) is saved.
    assert taken == [(3, 3, {0: {"state": 3}}), (6, 6, {0: {"state": 15}}),
                     (9, 9, {0: {"state": 36}}), (10, 10, {0: {"state": 45}})]
    snap = read_checkpoint(tmp_path)
    assert snap is not None and snap.states[1] == {"segment_states": {0: {"state": 45}}}


def test_a_restart_resumes_the_segments_state(spark: Any, tmp_path: Path) -> None:
    first, _, _ = build([1, 2, 3], tmp_path / "out.txt", tmp_path / "ckpt", every=2)
    first.start()
    second, cp, _ = build([1, 2, 3, 4, 5], tmp_path / "out.txt", tmp_path / "ckpt", every=2)
    assert cp.restored
    second.start()
    assert (tmp_path / "out.txt").read_text().split() == ["2", "6", "12", "20", "30"]


@settings(max_examples=4, deadline=None)
@given(items=st.lists(st.integers(0, 99), min_size=1, max_size=12),
       every=st.integers(2, 5), crashes=st.lists(st.integers(1, 10), max_size=2))
def test_crashes_and_restarts_give_the_uninterrupted_output(
        spark: Any, tmp_path_factory: pytest.TempPathFactory, crash_and_restart: Any,
        items: list[int], every: int, crashes: list[int]) -> None:
    """Property: a run with a Spark segment that dies (its writes handed to
    the kernel) and restarts from its checkpoint gives the uninterrupted output."""
    crash_and_restart(lambda out, ckpt, tap: build(items, out, ckpt, every, tap),
                      tmp_path_factory.mktemp("spark-crash"), crashes)


def test_spark_managed_state_is_refused_by_a_checkpointer(spark: Any, tmp_path: Path) -> None:
    source = Stream.from_iterable([("a", 1)])
    source.to_spark().scan(lambda s, kv: s + kv[1], start=0, key=lambda kv: kv[0]) \
        .gather().sink_to_list()
    with pytest.raises(CheckpointError, match=r"to_spark\(.*keeps its state in Spark.*"
                                              r"from_spark"):
        Checkpointer(source, tmp_path)
