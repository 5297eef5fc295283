"""Checkpoints on disk: when they are taken, what they hold, how pipelines resume."""

from __future__ import annotations

import asyncio
import json
from operator import add
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import Checkpointer, CheckpointError, NodeError, Stream, VirtualClock
from streams._checkpoint_io import BLOCK, MIN_SLOT, _slot, read_record, write_file
from streams.state import FORMAT_VERSION, read_checkpoint, write_checkpoint


def header(directory: Path) -> dict[str, Any]:
    found = read_record(directory)
    assert found is not None
    return json.loads(found[1].split(b"\n", 1)[0])  # type: ignore[no-any-return]


def scan_pipeline(items: Any) -> tuple[Stream[Any], list[Any]]:
    source = Stream.from_iterable(items)
    return source, source.scan(add, start=0).sink_to_list()


def test_checkpoint_every_n_elements_and_at_close(tmp_path: Path,
                                                  record_checkpoints: Any) -> None:
    source, out = scan_pipeline(range(10))
    seen: list[int] = []
    source.sink(lambda x: seen.append(x))
    cp = Checkpointer(source, tmp_path, every=4, fsync=False)
    taken = record_checkpoints(cp, lambda _: (len(seen), source.offset))
    source.start()
    # As each is taken: how many elements were fully processed, and the offset.
    assert taken == [(4, 4), (8, 8), (10, 10)]
    snap = read_checkpoint(tmp_path)
    assert snap is not None
    assert snap.sequence == 2
    assert snap.states[0] == {"offset": 10}
    assert snap.states[1] == {"state": 45}
    assert out[-1] == 45


def test_checkpoints_go_on_after_a_failing_element_and_a_new_start(tmp_path: Path) -> None:
    # On a loop a source tells the checkpointer of each element it begins;
    # one that failed is no longer in flight when the source starts again.
    path = tmp_path / "in.txt"
    path.write_text("".join(f"{i}\n" for i in range(10)))
    failed: list[str] = []

    def once(line: str) -> str:
        if line == "3\n" and not failed:
            failed.append(line)
            raise RuntimeError("once")
        return line

    async def run() -> list[int]:
        source = Stream.from_textfile(str(path), follow=False)
        taken: list[int] = []
        checkpoints = Checkpointer(source, tmp_path / "ckpt", every=1)
        source.map(once).sink(lambda x: taken.append(checkpoints.sequence))
        with pytest.raises(NodeError, match="once"):
            await source.start()
        await source.start()
        return taken

    # Each line after the first three saw one more checkpoint than the one before.
    assert asyncio.run(run()) == list(range(10))


def test_a_restored_offset_of_0_wins_over_from_end(tmp_path: Path) -> None:
    # The log was empty at the first run's checkpoint: lines written before the
    # restart are read, not skipped by seeking to the end.
    path = tmp_path / "in.txt"
    path.write_text("")

    def run() -> tuple[bool, list[str]]:
        source = Stream.from_textfile(str(path), from_end=True)
        out = source.sink_to_list()
        checkpoints = Checkpointer(source, tmp_path / "ckpt", every=1, fsync=False)
        source.start()
        return checkpoints.restored, out

    assert run() == (False, [])
    with path.open("a") as f:
        f.write("x\ny\n")
    assert run() == (True, ["x\n", "y\n"])


def test_restart_resumes_source_and_state(tmp_path: Path) -> None:
    source, out = scan_pipeline([1, 2, 3])
    cp = Checkpointer(source, tmp_path, every=1000, fsync=False)
    source.start()
    assert not cp.restored
    source, out = scan_pipeline([1, 2, 3, 4, 5])
    cp = Checkpointer(source, tmp_path, every=1000, fsync=False)
    assert cp.restored
    source.start()
    assert out == [10, 15]


def test_restore_false_starts_afresh(tmp_path: Path) -> None:
    source, out = scan_pipeline([1, 2])
    Checkpointer(source, tmp_path, fsync=False)
    source.start()
    source, out = scan_pipeline([1, 2])
    cp = Checkpointer(source, tmp_path, restore=False, fsync=False)
    source.start()
    assert not cp.restored
    assert out == [1, 3]


def test_checkpoint_every_n_seconds_uses_the_clock(tmp_path: Path, clock: VirtualClock) -> None:
    source = Stream()
    total = source.scan(add, start=0)
    total.sink_to_list()
    cp = Checkpointer(source, tmp_path, interval=5.0, fsync=False, manual=True)
    for i in range(3):
        source.emit(i)
        cp.step()
    cp.wait()
    assert read_checkpoint(tmp_path) is None
    clock.advance(5.0)
    source.emit(10)
    cp.step()
    cp.wait()
    snap = read_checkpoint(tmp_path)
    assert snap is not None and snap.states[1] == {"state": 13}
    clock.advance(4.9)
    source.emit(100)
    cp.step()
    cp.wait()
    assert read_checkpoint(tmp_path).states[1] == {"state": 13}  # type: ignore[union-attr]
    clock.advance(0.1)
    source.emit(1000)
    cp.step()
    cp.wait()
    assert read_checkpoint(tmp_path).states[1] == {"state": 1113}  # type: ignore[union-attr]


def test_format_is_versioned_and_readable(tmp_path: Path) -> None:
    source, _ = scan_pipeline(range(3))
    Checkpointer(source, tmp_path, fsync=True)
    source.start()
    # No temporary file left; .lock is the directory's lock (streams.checkpoint_lock).
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "checkpoint"]
    first = (tmp_path / "checkpoint").read_bytes()[:BLOCK].rstrip(b"\0").split(b"\n")
    assert first[0] == b"STREAMS-CHECKPOINT"
    assert json.loads(first[1]) == {"version": FORMAT_VERSION, "slot_size": MIN_SLOT}
    assert FORMAT_VERSION == 2
    h = header(tmp_path)
    assert h["sequence"] == 0
    assert [(n["index"], n["operator"], n["state"]) for n in h["nodes"]] == [
        (0, "from_iterable", ["offset"]), (1, "accumulate", ["state"]),
        (2, "sink_to_list", [])]


def test_other_version_and_damage_are_refused(tmp_path: Path) -> None:
    source, _ = scan_pipeline(range(3))
    path = write_checkpoint(tmp_path, source, fsync=False)
    data = path.read_bytes()
    end = BLOCK + len(_slot(0, read_record(tmp_path)[1]))  # type: ignore[index]
    path.write_bytes(data[:end - 1] + bytes([data[end - 1] ^ 1]) + data[end:])
    with pytest.raises(CheckpointError, match="damaged"):
        read_checkpoint(tmp_path)
    path.write_bytes(data.replace(b'"version": 2', b'"version": 99'))
    with pytest.raises(CheckpointError, match="version 99; this version of streams reads "
                                              "version 2"):
        read_checkpoint(tmp_path)
    path.write_bytes(b"hello")
    with pytest.raises(CheckpointError, match="not a streams checkpoint"):
        read_checkpoint(tmp_path)
    path.unlink()
    (tmp_path / "checkpoint-000000000003").write_bytes(b"STREAMS-CHECKPOINT\n")
    with pytest.raises(CheckpointError, match=r"checkpoint-000000000003 has checkpoint format "
                                              r"version 1.*remove it to start afresh"):
        Checkpointer(source, tmp_path)


def test_changed_pipeline_is_refused_naming_the_node(tmp_path: Path) -> None:
    source, _ = scan_pipeline(range(3))
    Checkpointer(source, tmp_path, fsync=False)
    source.start()
    source = Stream.from_iterable(range(3))
    source.scan(add, start=0).partition(2).sink_to_list()
    with pytest.raises(CheckpointError, match=r"node 2: the graph has partition\(2\), the "
                                              r"checkpoint has sink_to_list"):
        Checkpointer(source, tmp_path)


def test_a_crash_while_writing_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    source, _ = scan_pipeline(range(3))
    Checkpointer(source, tmp_path, every=1, fsync=False)
    source.start()  # checkpoints 0..3, the last two in slots 0 and 1
    assert read_checkpoint(tmp_path).sequence == 3  # type: ignore[union-attr]
    # The process dies writing checkpoint 4 into the slot holding 2:
    (_, record), slot_size = read_record(tmp_path), MIN_SLOT  # type: ignore[misc]
    with open(tmp_path / "checkpoint", "r+b") as f:
        f.seek(BLOCK)
        f.write(_slot(4, record + b"more")[:80])  # the rest: checkpoint 2's record
    # ...or creating a larger file, before its rename.
    (tmp_path / ".checkpoint.tmp").write_bytes(b"STREAMS-CHECKPOINT\n{half")
    snap = read_checkpoint(tmp_path)
    assert snap is not None and snap.sequence == 3 and snap.states[1] == {"state": 3}
    assert slot_size == MIN_SLOT


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 150_000), min_size=1, max_size=6),
       last=st.integers(0, 60_000), cut=st.floats(0, 1, exclude_max=True))
def test_a_write_cut_short_anywhere_leaves_the_previous_checkpoint(
        tmp_path_factory: pytest.TempPathFactory, sizes: list[int], last: int,
        cut: float) -> None:
    """Property: after any run of writes (the slots growing as records do),
    a write cut short at any byte leaves the newest whole checkpoint readable."""
    directory = tmp_path_factory.mktemp("slots")
    file = None
    for sequence, size in enumerate(sizes):
        record = bytes([sequence]) * size
        file = write_file(directory, sequence, record, False, file)
        assert read_record(directory) == (sequence, record)
        assert file.fits(record)
    assert file is not None
    data = _slot(len(sizes), b"\xff" * min(last, file.slot_size - 100))
    with open(directory / "checkpoint", "r+b") as f:
        f.seek(BLOCK + file.spare * file.slot_size)
        f.write(data[:int(len(data) * cut)])
    assert read_record(directory) == (len(sizes) - 1, bytes([len(sizes) - 1]) * sizes[-1])


def test_unreplayable_source_is_refused(tmp_path: Path) -> None:
    from streams.sources.base import Source

    class Ticks(Source):
        __slots__ = ()

    with pytest.raises(CheckpointError, match="cannot resume from a checkpoint"):
        Checkpointer(Ticks(), tmp_path)


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every must be an int >= 1"):
        Checkpointer(Stream(), tmp_path, every=0)
    with pytest.raises(ValueError, match="interval must be > 0"):
        Checkpointer(Stream(), tmp_path, interval=0)


def test_textfile_offsets_are_bytes_and_resume_exactly(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    lines = ["héllo\n", "wörld ✓\n", "ascii\n", "ünïcode\n"]
    path.write_text("".join(lines[:2]), encoding="utf-8")
    ckpt = tmp_path / "ckpt"

    def run() -> list[str]:
        source = Stream.from_textfile(str(path))
        out = source.sink_to_list()
        Checkpointer(source, ckpt, every=1, fsync=False)
        source.start()
        return out

    assert run() == lines[:2]
    assert read_checkpoint(ckpt).states[0] == {  # type: ignore[union-attr]
        "offset": len("".join(lines[:2]).encode()),
        "_before": "".join(lines[:2]).encode()}  # to know the file again: under 256 bytes
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(lines[2:]))
    assert run() == lines[2:]


def test_durable_file_sink_rolls_back_to_the_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    ckpt = tmp_path / "ckpt"

    def build(items: Any) -> tuple[Stream[Any], Any, Checkpointer]:
        source = Stream.from_iterable(items)
        sink = source.scan(add, start=0).map(str).sink_to_durable_textfile(out, fsync=False)
        return source, sink, Checkpointer(source, ckpt, every=3, fsync=False)

    # A first run dies after 5 elements; its last checkpoint covers 3.
    source, sink, cp = build(range(5))
    for x in range(5):
        source.emit(x)
        source.offset += 1
        cp.step()
    cp.wait()  # the checkpoint at 3 reached the disk before the process died
    sink._fp.flush()  # what the dead process had handed to the kernel
    assert out.read_text() == "0\n1\n3\n6\n10\n"
    source, sink, cp = build(range(7))
    assert cp.restored
    assert out.read_text() == "0\n1\n3\n"
    source.start()
    assert out.read_text() == "0\n1\n3\n6\n10\n15\n21\n"


def test_durable_sink_refuses_a_truncated_file(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    source = Stream()
    sink = source.sink_to_durable_textfile(out, fsync=False)
    source.emit("abc")
    saved = sink.snapshot()
    sink._flush()
    out.write_text("a")
    with pytest.raises(RuntimeError, match=r"has 1 bytes but the checkpoint recorded 4"):
        sink.restore(saved)
    with pytest.raises(TypeError, match="takes a path"):
        Stream().sink_to_durable_textfile(open(out))  # noqa: SIM115


def test_async_source_checkpoints_between_elements(tmp_path: Path,
                                                   record_checkpoints: Any) -> None:
    done: list[int] = []

    async def slow_sink(x: int) -> None:
        await asyncio.sleep(0)
        done.append(x)

    async def main() -> None:
        source = Stream.from_iterable(range(6), asynchronous=True)
        source.scan(add, start=0).sink(slow_sink)
        cp = Checkpointer(source, tmp_path, every=2, fsync=False)
        seen = record_checkpoints(cp, lambda _: (len(done), source.offset))
        await source.start()
        assert seen == [(2, 2), (4, 4), (6, 6), (6, 6)]

    asyncio.run(main())
    assert done == [0, 1, 3, 6, 10, 15]


@settings(max_examples=40, deadline=None)
@given(items=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 9)), max_size=40),
       every=st.integers(1, 6), crashes=st.lists(st.integers(1, 15), max_size=4))
def test_crashes_and_restarts_give_the_uninterrupted_output(
        tmp_path_factory: pytest.TempPathFactory, crash_and_restart: Any,
        items: list[tuple[str, int]], every: int, crashes: list[int]) -> None:
    """Property: however often a run dies (after handing its writes to the
    kernel), restarting from the checkpoint gives the uninterrupted output."""

    def build(out: Path, ckpt: Path, tap: Any) -> tuple[Any, ...]:
        source = Stream.from_iterable(items)
        totals = source.scan(lambda s, x: s + x[1], start=0, key=0)
        sink = totals.map(repr).sink_to_durable_textfile(out, fsync=False)
        totals.sink(tap)
        return source, Checkpointer(source, ckpt, every=every, fsync=False), sink

    crash_and_restart(build, tmp_path_factory.mktemp("crash"), crashes)


def test_a_fresh_start_replaces_an_earlier_runs_checkpoint(tmp_path: Path) -> None:
    source, _ = scan_pipeline(range(4))
    Checkpointer(source, tmp_path, every=1, fsync=False)
    source.start()
    assert read_checkpoint(tmp_path).sequence == 4  # type: ignore[union-attr]
    # Starting afresh (restore=False): the new run's checkpoint 0 replaces
    # the earlier run's 4 (which a slot left over would otherwise outrank).
    source, _ = scan_pipeline(range(2))
    Checkpointer(source, tmp_path, every=1000, restore=False, fsync=False)
    source.start()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "checkpoint"]
    snap = read_checkpoint(tmp_path)
    assert snap is not None and snap.sequence == 0 and snap.states[1] == {"state": 1}


# ----------------------------------------------------------------------
# The background writer


class GatedWrites:
    """Stands in for ``write_file``: records each checkpoint written, and can hold the writer.

    The first write blocks (``entered`` set) until ``gate`` opens, so the
    pipeline takes checkpoints while one is still being written.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold: bool = True) -> None:
        import threading

        from streams import _checkpoint_io

        self.real = _checkpoint_io.write_file
        self.written: list[int] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        monkeypatch.setattr(_checkpoint_io, "write_file", self)

    def __call__(self, directory: Path, sequence: int, data: bytes, fsync: bool,
                 file: Any, key: Any = None) -> Any:
        self.entered.set()
        assert self.gate.wait(timeout=60), "the test never opened the gate"
        written = self.real(directory, sequence, data, fsync, file, key)
        self.written.append(sequence)
        return written


def test_a_superseded_checkpoint_is_never_written_after_a_newer_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes = GatedWrites(monkeypatch)

    def hold_then_release(x: int) -> None:
        if x == 1:  # checkpoint 0 is being written, and stays so until x == 8
            assert writes.entered.wait(timeout=60)
        if x == 8:
            writes.gate.set()

    source, _ = scan_pipeline(range(10))
    source.sink(hold_then_release)
    cp = Checkpointer(source, tmp_path, every=1, fsync=False, background=True)
    source.start()  # returns once the last checkpoint (10, at close) is on disk
    # Checkpoints 1..7 were taken while 0 was being written: each replaced
    # the one waiting before it, so at least 1..6 were never written.
    assert writes.written[0] == 0 and writes.written[-1] == 10
    assert writes.written == sorted(set(writes.written))
    assert cp.superseded >= 6
    assert cp.superseded + len(writes.written) == 11
    assert cp.durable == 10
    snap = read_checkpoint(tmp_path)
    assert snap is not None and snap.sequence == 10 and snap.states[1] == {"state": 45}


def test_a_failed_write_is_raised_and_no_later_checkpoint_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streams import _checkpoint_io

    attempts: list[int] = []

    def full_disk(directory: Path, sequence: int, *args: Any) -> Path:
        attempts.append(sequence)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_checkpoint_io, "write_file", full_disk)
    source, out = scan_pipeline(range(10))
    cp = Checkpointer(source, tmp_path, every=2, fsync=False, background=True)
    message = r"writing checkpoint 0 to .* failed: OSError: .*No space left on device"

    def wait_at_3(x: int) -> None:
        if x == 3:  # checkpoint 0 (after 2 elements) was handed to the writer
            with pytest.raises(CheckpointError, match=message):
                cp.wait()

    source.sink(wait_at_3)
    with pytest.raises(CheckpointError, match=message):
        source.start()  # the next checkpoint (after 4 elements) is refused
    assert out == [0, 1, 3, 6]
    assert attempts == [0]  # nothing after the failure
    assert read_checkpoint(tmp_path) is None
    with pytest.raises(CheckpointError, match="No space left"):
        cp.wait()  # and it stays failed
    with pytest.raises(CheckpointError, match="No space left"):
        cp.save()


def test_background_false_writes_in_the_pipeline_thread(tmp_path: Path) -> None:
    source = Stream()
    source.scan(add, start=0).sink_to_list()
    cp = Checkpointer(source, tmp_path, fsync=False, background=False)
    source.emit(5)
    cp.save()
    assert cp.durable == 0  # on disk as save() returns
    assert read_checkpoint(tmp_path).states[1] == {"state": 5}  # type: ignore[union-attr]


def test_the_durable_sink_is_fsynced_before_the_checkpoint_that_records_its_length(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import pickle

    out = tmp_path / "out.txt"
    writes = GatedWrites(monkeypatch, hold=False)
    fsynced = [0]  # the longest length of out.txt known to be on disk
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if out.exists() and os.fstat(fd).st_ino == out.stat().st_ino:
            fsynced[0] = max(fsynced[0], os.fstat(fd).st_size)

    recorded: list[tuple[int, int]] = []

    def check_then_write(directory: Path, sequence: int, data: bytes, *args: Any) -> Any:
        states = pickle.loads(data.split(b"\n", 1)[1])
        (length,) = [state["length"] for state in states if state and "length" in state]
        recorded.append((length, fsynced[0]))
        return writes(directory, sequence, data, *args)

    from streams import _checkpoint_io

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(_checkpoint_io, "write_file", check_then_write)
    source = Stream.from_iterable(range(50))
    source.map(str).sink_to_durable_textfile(out, fsync=True)
    cp = Checkpointer(source, tmp_path / "ckpt", every=7, fsync=True)
    # Waiting for each checkpoint makes every one reach the writer (none superseded).
    source.sink(lambda x: cp.wait() if x % 7 == 0 else None)
    source.start()
    assert out.read_text() == "".join(f"{i}\n" for i in range(50))
    assert len(recorded) == 8 and recorded[-1][0] == out.stat().st_size
    # Each checkpoint written records a length already fsynced.
    assert all(length <= synced for length, synced in recorded), recorded
