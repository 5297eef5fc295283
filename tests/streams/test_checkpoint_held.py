"""Checkpoints of pipelines that hold elements: flow operators, timers, a refused restore.

A checkpoint covers an element once its source counted it done: every
output it leads to must then be out (or in a node's saved state), or a
crash right after the checkpoint loses it. ``buffer`` and ``map_async``
let ``await emit`` return while they still hold the element; the
checkpoint waits for them to deliver it. Elements a restored node holds
(a buffer's queue, a delay's elements, a partition's open group) go on as
they would have.
"""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from streams import Checkpointer, CheckpointError, Stream, VirtualClock, use_clock
from streams.loop_thread import loop_thread
from streams.snapshot import GraphSnapshot, restore_graph, snapshot_graph
from streams.state import read_checkpoint


def _offset(directory: Path) -> int:
    snap = read_checkpoint(directory)
    if snap is None:  # none taken yet
        return 0
    return next(s["offset"] for s in snap.states if s and "offset" in s)


async def slow_str(x: int) -> str:
    for _ in range(3):
        await asyncio.sleep(0)
    return str(x)


@pytest.mark.parametrize("held_by", ["map_async", "buffer"])
def test_no_checkpoint_covers_an_element_whose_output_is_not_out(tmp_path: Path,
                                                                  held_by: str) -> None:
    out: list[str] = []
    covered_ahead: list[tuple[int, int]] = []  # (checkpoint offset, outputs) where it ran ahead

    def write(x: str) -> None:
        out.append(x)
        offset = _offset(tmp_path)
        if offset > len(out):
            covered_ahead.append((offset, len(out)))

    async def main() -> None:
        source = Stream.from_iterable(range(40))
        if held_by == "map_async":
            mid = source.map_async(slow_str, parallelism=4)
        else:
            mid = source.buffer(4).map_async(slow_str)
        mid.sink(write)
        Checkpointer(source, tmp_path, every=1, fsync=False)
        await source.start()

    asyncio.run(main())
    assert out == [str(i) for i in range(40)]
    assert covered_ahead == []  # each would be lost by a crash right then
    assert _offset(tmp_path) == 40


@pytest.mark.parametrize("first", ["map_async", "buffer"])
def test_a_checkpoint_waits_for_what_a_node_sends_on_to_another_that_holds(
        tmp_path: Path, first: str) -> None:
    async def main() -> tuple[list[str], list[str]]:
        source = Stream(asynchronous=True)
        held = (source.map_async(slow_str, parallelism=8) if first == "map_async"
                else source.buffer(8))
        out = held.map_async(slow_str, parallelism=8).sink_to_list()
        cp = Checkpointer(source, tmp_path, manual=True, fsync=False)
        for i in range(6):
            await source.emit(i)  # returns once the first node holds it
        await cp.save()
        taken = list(out)  # what was out when the checkpoint was taken
        await source.aclose()
        return taken, out

    taken, out = asyncio.run(main())
    assert taken == out == [str(i) for i in range(6)]


def test_a_barrier_fed_through_an_error_stream_is_asked_after_the_one_feeding_it() -> None:
    from streams.checkpoint_graph import barrier_levels
    from streams.graph import walk

    handler = Stream(stream_name="handler")  # made first: walk() places it first
    handled = handler.map_async(slow_str)
    source = Stream()
    risky = source.map(int).map(int).map(int).buffer(4).map(lambda x: 1 / x,
                                                             stream_name="risky")
    risky.on_error("route")
    risky.errors.connect(handler)
    assert barrier_levels(walk(source)) == [[risky.upstreams[0]], [handled]]


async def _turns(n: int = 200) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.mark.parametrize("saved", ["before the stop", "during the stop"])
def test_a_checkpoint_waits_for_what_a_stop_on_exception_holds(tmp_path: Path,
                                                               saved: str) -> None:
    async def main() -> tuple[list[int], int | None, int]:
        source = Stream.from_iterable(range(20))
        mapped = source.map_async(fails_on_2, parallelism=4, stop_on_exception=True)
        out = mapped.sink_to_list()
        cp = Checkpointer(source, tmp_path, manual=True, fsync=False)
        source.start()
        if saved == "before the stop":
            await asyncio.sleep(0)  # calls in flight, 2's not failed yet
            assert not source.stopped
            saving = asyncio.ensure_future(cp.save())
        await _turns()
        assert source.stopped and mapped._held()  # 3, 4, 5 ran; their results wait
        if saved == "during the stop":
            saving = asyncio.ensure_future(cp.save())
        await _turns()
        written_while_stopped = None if read_checkpoint(tmp_path) is None else \
            _offset(tmp_path)
        mapped.start()  # sends them on, then restarts the source
        await asyncio.wait_for(saving, 10)
        await cp.wait_async()
        source.stop()
        await _turns()
        return out, written_while_stopped, _offset(tmp_path)

    out, written_while_stopped, offset = asyncio.run(main())
    assert written_while_stopped is None  # it would cover 3, 4, 5: lost in a crash
    assert offset > 3
    assert [x for x in range(offset) if x != 2] == out[:offset - 1]  # 2 failed


async def fails_on_2(x: int) -> int:
    await slow_str(x)
    if x == 2:
        raise RuntimeError("fails on 2")
    return x


def test_a_stop_on_exception_resumed_from_another_thread_lets_its_checkpoint_finish(
        tmp_path: Path) -> None:
    # A synchronous pipeline with a timer runs on the shared loop thread, as
    # streamz's does; the user starts it again from their own thread.
    source = Stream.from_iterable(range(10))
    mapped = source.map_async(fails_on_2, parallelism=4, stop_on_exception=True)
    mapped.on_error("skip")
    out = mapped.sink_to_list()
    mapped.timed_window(3600.0).sink(lambda w: None)  # a timer: the loop thread runs it
    Checkpointer(source, tmp_path, every=5, fsync=False)
    first = source.start()

    async def stopped() -> bool:
        await _turns()
        return source.stopped and bool(mapped._held())

    assert asyncio.run_coroutine_threadsafe(stopped(), loop_thread()).result(10)
    mapped.start().result(10)  # here no loop runs: the node resumes on its own
    first.result(10)  # the run it stopped, whose checkpoint waited for the held elements
    assert out == [0, 1, *range(3, 10)]
    assert _offset(tmp_path) == 10


def _buffer_graph() -> tuple[Stream[Any], list[Any]]:
    source = Stream(asynchronous=True)
    return source, source.buffer(2).sink_to_list()


def _with_queue(items: list[Any]) -> GraphSnapshot:
    """A snapshot of the buffer graph holding ``items`` in the buffer's queue."""
    source, _ = _buffer_graph()
    snap = snapshot_graph(source)
    states = list(snap.states)
    states[1] = {"_queue": deque(items)}
    return GraphSnapshot(snap.nodes, tuple(states))


@pytest.mark.parametrize("held", [["a"], ["a", "b"]])
def test_a_buffer_restored_holding_elements_sends_them_first_on_a_loop(held: list[str]) -> None:
    async def main() -> list[Any]:
        source, out = _buffer_graph()
        restore_graph(source, _with_queue(held))
        await asyncio.wait_for(source.emit("c"), 10)  # full with two: waited for ever
        await asyncio.wait_for(source.aclose(), 10)
        return out

    assert asyncio.run(main()) == [*held, "c"]


def test_a_buffer_restored_holding_elements_sends_them_first_without_a_loop() -> None:
    source = Stream()
    out = source.buffer(2).sink_to_list()
    restore_graph(source, _with_queue(["a", "b"]))
    source.emit("c")
    assert out == ["a", "b", "c"]


def test_a_buffer_restored_holding_elements_sends_them_at_close() -> None:
    async def main() -> list[Any]:
        source, out = _buffer_graph()
        restore_graph(source, _with_queue(["a"]))
        await asyncio.wait_for(source.aclose(), 10)
        return out

    assert asyncio.run(main()) == ["a"]


def test_a_partition_restored_with_an_open_group_times_out_as_it_would_have() -> None:
    def run(clock: VirtualClock, restore_from: GraphSnapshot | None) -> tuple[Any, list[Any]]:
        with use_clock(clock):
            source = Stream()
            out = source.partition(3, timeout=1.0).sink_to_list()
        if restore_from is None:
            source.emit("a")
        else:
            restore_graph(source, restore_from)
        snap = snapshot_graph(source)
        clock.advance(5.0)
        source.emit("b")
        clock.advance(5.0)
        return snap, out

    snap, uninterrupted = run(VirtualClock(), None)
    _, restored = run(VirtualClock(), snap)
    assert uninterrupted == [("a",), ("b",)]
    assert restored == uninterrupted


def test_a_delay_restored_holding_elements_sends_them_after_their_delay(tmp_path: Path) -> None:
    clock = VirtualClock()

    async def run(crash: bool) -> list[Any]:
        with use_clock(clock):
            source = Stream(asynchronous=True)
            out = source.delay(1.0).sink_to_list()
        cp = Checkpointer(source, tmp_path, manual=True, fsync=False)
        if crash:
            await source.emit("a")
            cp.save_sync()  # "a" is held: the checkpoint has it
            return out  # the process dies here
        assert cp.restored
        for _ in range(3):
            await clock.advance_async(2.0)
        return out

    assert asyncio.run(run(crash=True)) == []
    assert asyncio.run(run(crash=False)) == ["a"]  # not only once another element comes


def test_a_refused_restore_leaves_the_sources_free_for_another_checkpointer(
        tmp_path: Path) -> None:
    source = Stream.from_iterable([1, 2, 3])
    source.scan(lambda a, x: a + x, start=0).sink_to_list()
    Checkpointer(source, tmp_path, every=1, fsync=False)
    source.start()

    changed = Stream.from_iterable([1, 2, 3])
    out = changed.partition(2).sink_to_list()
    with pytest.raises(CheckpointError):
        Checkpointer(changed, tmp_path, every=1, fsync=False)
    assert changed._checkpointer is None  # type: ignore[attr-defined]
    Checkpointer(changed, tmp_path, every=1, fsync=False, restore=False)  # start afresh
    changed.start()
    assert out == [(1, 2), (3,)]


def test_a_fresh_start_removes_the_old_checkpoint_before_it_writes(tmp_path: Path) -> None:
    first = Stream.from_iterable([1, 2, 3])
    first.scan(lambda a, x: a + x, start=0).sink_to_list()
    Checkpointer(first, tmp_path, every=1, fsync=False)
    first.start()
    assert _offset(tmp_path) == 3

    fresh = Stream.from_iterable([10, 20])
    fresh.scan(lambda a, x: a + x, start=0).sink_to_list()
    Checkpointer(fresh, tmp_path, every=1, fsync=False, restore=False)
    # The process dies before the fresh run's first checkpoint: the next start
    # must not resume the first run's state and offset over the fresh run's output.
    assert read_checkpoint(tmp_path) is None

    again = Stream.from_iterable([10, 20])
    out = again.scan(lambda a, x: a + x, start=0).sink_to_list()
    assert not Checkpointer(again, tmp_path, every=1, fsync=False).restored
    again.start()
    assert out == [10, 30]


@pytest.mark.parametrize("slot_size", ["null", "1.5", "\"big\"", "-4096"])
def test_a_checkpoint_with_a_damaged_header_is_named_damaged(tmp_path: Path,
                                                             slot_size: str) -> None:
    from streams._checkpoint_io import FILENAME, MAGIC

    header = MAGIC + f'{{"version": 2, "slot_size": {slot_size}}}\n'.encode()
    (tmp_path / FILENAME).write_bytes(header.ljust(4096, b"\0"))
    with pytest.raises(CheckpointError, match="damaged: its header's slot size"):
        read_checkpoint(tmp_path)
