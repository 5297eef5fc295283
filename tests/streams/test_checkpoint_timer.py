"""Checkpoints every ``interval`` while the sources wait for input (streams.checkpoint_timer).

What waits for a checkpoint (the output a durable sink keeps until one
covers it) must not wait for the next element when the input pauses.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from streams import Stream
from streams.clock import VirtualClock
from streams.state import Checkpointer, read_checkpoint


def test_an_idle_pipeline_s_output_is_written_when_its_checkpoint_falls_due(
        tmp_path: Path, clock: VirtualClock) -> None:
    log, out = tmp_path / "in.log", tmp_path / "out.txt"
    log.write_text("a\nb\nc\n")
    source = Stream.from_textfile(str(log), follow=True, poll_interval=0.25)
    source.map(str.upper).sink_to_durable_textfile(str(out), end="")
    cp = Checkpointer(source, tmp_path / "ckpt", interval=1.0, fsync=False)
    seen: list[str] = []

    async def main() -> None:
        task = source.start()
        await clock.advance_async(0.5)  # the lines are read; no checkpoint is due yet
        seen.append(out.read_text())
        await clock.advance_async(1.0)  # no element comes: the timer takes it
        seen.append(out.read_text())
        source.stop()
        await clock.advance_async(0.25)
        await task

    asyncio.run(main())
    assert seen == ["", "A\nB\nC\n"]
    snap = read_checkpoint(tmp_path / "ckpt")
    assert snap is not None and cp.durable == snap.sequence == 0


def test_no_checkpoint_is_taken_while_nothing_has_finished_since_the_last(
        tmp_path: Path, clock: VirtualClock) -> None:
    log = tmp_path / "in.log"
    log.write_text("")
    source = Stream.from_textfile(str(log), follow=True, poll_interval=0.25)
    source.sink_to_list()
    Checkpointer(source, tmp_path / "ckpt", interval=1.0, fsync=False)

    async def main() -> None:
        task = source.start()
        await clock.advance_async(5.0)
        source.stop()
        await clock.advance_async(0.25)
        await task

    asyncio.run(main())
    assert read_checkpoint(tmp_path / "ckpt") is None


class Refusing(Stream[str]):
    """A node whose hand-over before a checkpoint fails, as a sink's flush to a full disk."""

    def _barrier(self) -> None:
        raise OSError("disk full")


def test_a_failure_of_a_timed_checkpoint_is_raised_by_the_source(
        tmp_path: Path, clock: VirtualClock) -> None:
    log = tmp_path / "in.log"
    log.write_text("a\n")
    source = Stream.from_textfile(str(log), follow=True, poll_interval=0.25)
    Refusing(source).sink_to_list()
    Checkpointer(source, tmp_path / "ckpt", interval=1.0, fsync=False)

    async def main() -> None:
        task = source.start()
        await clock.advance_async(1.5)  # the timed checkpoint fails
        log.write_text("a\nb\n")  # the next element's checkpoint raises it
        await clock.advance_async(0.5)
        await task

    with pytest.raises(OSError, match="disk full"):
        asyncio.run(main())


def test_no_checkpoint_is_written_while_an_element_came_in_during_its_barriers(
        tmp_path: Path) -> None:
    # A timed checkpoint drains the barriers without pausing the sources: an
    # element that came in meanwhile would be in the states, not the offsets.
    source = Stream()
    total = source.scan(lambda a, x: a + x, start=0)
    total.sink_to_list()
    cp = Checkpointer(source, tmp_path / "ckpt", fsync=False, manual=True)
    source.emit(1)
    cp._timed = True  # the timer's checkpoint (DueTimer), its barriers draining...
    cp.begin()  # ...while an element comes in, as an asynchronous source says
    source.emit(2)
    cp.save_sync()
    cp.wait()
    assert read_checkpoint(tmp_path / "ckpt") is None
    cp.step()  # its work done: the next checkpoint holds it whole
    cp.save_sync()
    cp.wait()
    snap = read_checkpoint(tmp_path / "ckpt")
    assert snap is not None and snap.states[1] == {"state": 3}
