"""Checkpoints of pipelines with a Dask segment: in flight means not done.

A checkpoint records a source's offset as done, so it must wait for the
elements still on the cluster, and it must hold the state the segment's
stateful nodes keep between batches (on the runner, not in the local nodes).
"""

from __future__ import annotations

import asyncio
from operator import add
from pathlib import Path
from typing import Any

import pytest
from distributed import Client
from hypothesis import given, settings
from hypothesis import strategies as st

import streams_dask  # noqa: F401
from streams import Checkpointer, Stream
from streams.state import read_checkpoint


def build(client: Client, items: list[int], out: Path, ckpt: Path, every: int,
          tap: Any = None) -> tuple[Stream[Any], Checkpointer, Any]:
    source = Stream.from_iterable(items)
    totals = source.scatter(client=client, batch_size=3).map(lambda x: 2 * x).scan(
        add, start=0).gather()
    sink = totals.map(str).sink_to_durable_textfile(out, fsync=False)
    if tap is not None:
        totals.sink(tap)
    return source, Checkpointer(source, ckpt, every=every, fsync=False), sink


@pytest.mark.dask
def test_a_checkpoint_waits_for_the_cluster_and_holds_the_segments_state(
        client: Client, tmp_path: Path, record_checkpoints: Any) -> None:
    source = Stream.from_iterable(range(10))
    out = source.scatter(client=client, batch_size=2).scan(add, start=0).gather().sink_to_list()
    cp = Checkpointer(source, tmp_path, every=4, fsync=False)
    taken = record_checkpoints(
        cp, lambda nodes: (source.offset, len(out), nodes[1].segment_states))
    source.start()
    # At each checkpoint every element up to the offset has come back, and
    # the scan's running total (kept by the runner, between batches) is saved.
    assert taken == [(4, 4, {0: {"state": 6}}), (8, 8, {0: {"state": 28}}),
                     (10, 10, {0: {"state": 45}})]
    snap = read_checkpoint(tmp_path)
    assert snap is not None and snap.states[1] == {"segment_states": {0: {"state": 45}}}


@pytest.mark.dask
def test_a_restart_resumes_the_segments_state(client: Client, tmp_path: Path) -> None:
    first, _, _ = build(client, [1, 2, 3], tmp_path / "out.txt", tmp_path / "ckpt", every=2)
    first.start()
    second, cp, _ = build(client, [1, 2, 3, 4, 5], tmp_path / "out.txt", tmp_path / "ckpt",
                       every=2)
    assert cp.restored
    second.start()
    assert (tmp_path / "out.txt").read_text().split() == ["2", "6", "12", "20", "30"]


@pytest.mark.dask
@pytest.mark.parametrize("make", [
    lambda s: s.timed_window(5, time=lambda x: x, lateness=30),
    lambda s: s.session_window(3, time=lambda x: x, key=lambda x: x % 2),
], ids=["window", "keyed sessions"])
def test_restored_windows_flush_at_a_close_with_no_new_element(
        client: Client, tmp_path: Path, make: Any) -> None:
    # The pipeline died after its last element's checkpoint: restarted, it
    # has nothing more to emit, and its close still ends the windows it held.
    def build() -> tuple[Stream[Any], list[Any]]:
        source = Stream()
        return source, make(source.scatter(client=client, batch_size=4)).gather().sink_to_list()

    first, out = build()
    checkpoints = Checkpointer(first, tmp_path, fsync=False)
    for x in [0, 1]:
        first.emit(x)
    checkpoints.save_sync()
    assert out == []
    second, out = build()
    assert Checkpointer(second, tmp_path, fsync=False).restored
    second.close()
    assert sorted(map(str, out)) == sorted(map(str, make_in_process(make, [0, 1])))


def make_in_process(make: Any, xs: list[int]) -> list[Any]:
    source = Stream()
    out = make(source).sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return out  # type: ignore[no-any-return]


@pytest.mark.dask
@settings(max_examples=8, deadline=None)
@given(items=st.lists(st.integers(0, 99), min_size=1, max_size=25),
       every=st.integers(1, 5), crashes=st.lists(st.integers(1, 20), max_size=3))
def test_crashes_and_restarts_give_the_uninterrupted_output(
        client: Client, tmp_path_factory: pytest.TempPathFactory, crash_and_restart: Any,
        items: list[int], every: int, crashes: list[int]) -> None:
    """Property: a run with a Dask segment that dies (its writes handed to the
    kernel) and restarts from its checkpoint gives the uninterrupted output."""
    crash_and_restart(lambda out, ckpt, tap: build(client, items, out, ckpt, every, tap),
                      tmp_path_factory.mktemp("dask-crash"), crashes)


@pytest.mark.dask
def test_an_asynchronous_checkpoint_waits_for_the_cluster(
        cluster: Any, tmp_path: Path, record_checkpoints: Any) -> None:
    async def main() -> tuple[list[int], list[tuple[int, int]]]:
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as client:
            source = Stream.from_iterable(range(7), asynchronous=True)
            out = source.scatter(client=client, batch_size=2).scan(
                add, start=0).gather().sink_to_list()
            cp = Checkpointer(source, tmp_path, every=3, fsync=False)
            taken = record_checkpoints(cp, lambda _: (source.offset, len(out)))
            await source.start()
            return out, taken

    out, taken = asyncio.run(main())
    assert out == [0, 1, 3, 6, 10, 15, 21]
    assert taken == [(3, 3), (6, 6), (7, 7)]
    snap = read_checkpoint(tmp_path)
    assert snap is not None and snap.states[1] == {"segment_states": {0: {"state": 21}}}
