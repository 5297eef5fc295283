"""One process at a time in a checkpoint directory (``streams.checkpoint_lock``).

A real second process holds the directory; this one is refused, naming it,
and its checkpoint is left as it was. Once the holder is killed (SIGKILL: no
clean-up of its own) the kernel has released the lock and the directory
restores here.
"""

from __future__ import annotations

import gc
import operator
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from streams import Checkpointer, CheckpointError, Stream

pytest.importorskip("fcntl")

GUARD = 60.0  # seconds: only ever reached when the behaviour under test is broken

#: Checkpoints [1, 2, 3] into the directory, then holds it until killed.
HOLDER = textwrap.dedent("""
    import operator, sys
    from streams import Checkpointer, Stream
    source = Stream.from_iterable([1, 2, 3])
    source.scan(operator.add, start=0).sink_to_list()
    cp = Checkpointer(source, sys.argv[1], every=1)
    source.start()
    print("ready", flush=True)
    sys.stdin.read()  # until killed
""")


def _held(directory: Path) -> int:
    """How many Checkpointers of this process hold ``directory`` (0: not locked here)."""
    from streams import checkpoint_lock

    found = os.stat(directory)
    held = checkpoint_lock._HELD.get((found.st_dev, found.st_ino))
    return 0 if held is None else held.count


def _graph(items: list[int]) -> tuple[Stream[int], list[int]]:
    source = Stream.from_iterable(items)
    return source, source.scan(operator.add, start=0).sink_to_list()


def test_a_directory_held_by_another_process_is_refused_until_it_dies(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "ready\n"
        before = (tmp_path / "checkpoint").read_bytes()
        source, totals = _graph([1, 2, 3, 4])
        with pytest.raises(CheckpointError, match=rf"in use by another process \(pid "
                                                  rf"{holder.pid}\).*a directory of its own"):
            Checkpointer(source, tmp_path, every=1)
        assert (tmp_path / "checkpoint").read_bytes() == before  # nothing read, nothing moved
        assert source._checkpointer is None  # refused: the source is free
        source.start()
        assert totals == [1, 3, 6, 10]  # runs on without checkpoints
        for restore in (True, False):  # removing its checkpoint is refused as well
            with pytest.raises(CheckpointError, match="in use by another process"):
                Checkpointer(_graph([1])[0], tmp_path, restore=restore)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(GUARD)
    assert holder.returncode == -signal.SIGKILL
    source, totals = _graph([1, 2, 3, 4])
    cp = Checkpointer(source, tmp_path, every=1)
    source.start()
    assert cp.restored and totals == [10]  # the killed run's checkpoint, resumed


def test_checkpointers_of_one_process_share_the_directory_and_release_it(
        tmp_path: Path) -> None:
    first_source, _ = _graph([1, 2])
    first = Checkpointer(first_source, tmp_path, every=1)
    first_source.start()
    source, totals = _graph([1, 2, 3])
    second = Checkpointer(source, tmp_path, every=1)  # a graph built again: allowed
    source.start()
    assert second.restored and totals == [6]
    assert _held(tmp_path) == 2
    del first, second, first_source, source
    gc.collect()  # the sources' graphs refer to their Checkpointers
    assert _held(tmp_path) == 0


def test_a_checkpointer_refused_lets_the_directory_go_at_once(tmp_path: Path) -> None:
    # Its traceback keeps it alive (in a notebook, until the next error): the
    # lock must not wait for it to be collected.
    source, _ = _graph([1, 2])
    Checkpointer(source, tmp_path, every=1)
    source.start()
    del source
    gc.collect()
    other = Stream.from_iterable([1])
    other.map(str).sink_to_list()  # not the graph of the checkpoint
    with pytest.raises(CheckpointError, match="does not match the graph") as refused:
        Checkpointer(other, tmp_path, every=1)
    assert refused.value.__traceback__ is not None
    assert _held(tmp_path) == 0
    assert other._checkpointer is None


def test_a_forked_child_is_refused_the_parents_directory(tmp_path: Path) -> None:
    # The child inherits the locked descriptor, not the lock: it used to be let
    # in, and its restore=False removed the parent's checkpoint.
    source, _ = _graph([1, 2])
    parent = Checkpointer(source, tmp_path, every=1)
    source.start()
    before = (tmp_path / "checkpoint").read_bytes()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            try:
                Checkpointer(_graph([1])[0], tmp_path, restore=False)
                os.write(write, b"let in")
            except CheckpointError as e:
                os.write(write, b"refused" if f"(pid {os.getppid()})" in str(e) else
                         str(e).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 4096)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert answer == b"refused"
    assert (tmp_path / "checkpoint").read_bytes() == before
    assert parent.durable >= 0


def test_a_relative_directory_stays_the_one_locked_after_a_chdir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    source, _ = _graph([1, 2])
    Checkpointer(source, "ckpt", every=1)
    monkeypatch.chdir(second)
    source.start()  # used to write into second/ckpt, which nobody had locked
    assert sorted(p.name for p in (first / "ckpt").iterdir()) == [".lock", "checkpoint"]
    assert not (second / "ckpt").exists()


def test_a_directory_removed_and_made_again_is_locked_again(tmp_path: Path) -> None:
    import shutil

    directory = tmp_path / "ckpt"
    old, _ = _graph([1, 2])
    Checkpointer(old, directory, every=1)  # still alive below
    shutil.rmtree(directory)  # "to start afresh, remove the directory"
    source, _ = _graph([1, 2])
    Checkpointer(source, directory, every=1)
    assert (directory / ".lock").exists()  # used to share the removed one's lock
    other = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom streams import Checkpointer, Stream\n"
         "s = Stream.from_iterable([1]); s.sink_to_list()\n"
         "try:\n    Checkpointer(s, sys.argv[1])\nexcept Exception as e:\n"
         "    print(type(e).__name__)\nelse:\n    print('let in')", str(directory)],
        capture_output=True, text=True, timeout=GUARD, check=True)
    assert other.stdout.strip() == "CheckpointError"


def test_a_failure_after_the_lock_is_taken_lets_it_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from streams import checkpoint_lock

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_lock.os, "pwrite", full)
    with pytest.raises(OSError, match="No space left"):
        Checkpointer(_graph([1])[0], tmp_path, every=1)
    monkeypatch.undo()
    source, totals = _graph([1, 2])
    Checkpointer(source, tmp_path, every=1)  # used to be refused: a descriptor kept it
    source.start()
    assert totals == [1, 3]


def test_a_lock_file_that_cannot_be_opened_says_so(tmp_path: Path) -> None:
    (tmp_path / ".lock").mkdir()  # as root no permission stops it; a directory does
    source, _ = _graph([1])
    with pytest.raises(CheckpointError, match=r"cannot open .*\.lock to lock the directory "
                                              r"\(IsADirectoryError"):
        Checkpointer(source, tmp_path, every=1)
    assert source._checkpointer is None


def test_a_release_while_the_guard_is_taken_is_done_by_its_holder(tmp_path: Path) -> None:
    # A release runs from a finalizer, which the collector may run inside
    # hold() in the same thread: it must not wait for the guard, nor be lost.
    from streams import checkpoint_lock

    class Owner:
        pass

    owner = Owner()
    checkpoint_lock.hold(tmp_path, owner)
    with checkpoint_lock._guard:  # as hold() holds it
        del owner  # its finalizer runs here, in this thread
        assert _held(tmp_path) == 1  # asked for, not done
    assert _held(tmp_path) == 1
    checkpoint_lock.hold(tmp_path / "other", Owner())  # a holder does what was asked
    assert _held(tmp_path) == 0
    assert not checkpoint_lock._pending


def test_close_lets_another_process_take_the_directory(tmp_path: Path) -> None:
    source, _ = _graph([1, 2])
    cp = Checkpointer(source, tmp_path, every=1)
    source.start()
    probe = ("import operator, sys\nfrom streams import Checkpointer, Stream\n"
             "s = Stream.from_iterable([1, 2, 3]); out = s.scan(operator.add, start=0)"
             ".sink_to_list()\n"
             "try:\n    cp = Checkpointer(s, sys.argv[1], every=1)\nexcept Exception as e:\n"
             "    print(type(e).__name__)\nelse:\n    s.start(); print(cp.restored, out)")

    def other() -> str:
        return subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True,
                              text=True, timeout=GUARD, check=True).stdout.strip()

    assert other() == "CheckpointError"
    cp.close()
    cp.close()  # once is enough; again does nothing
    assert _held(tmp_path) == 0 and source._checkpointer is None
    assert other() == "True [6]"  # resumed after 1, 2 from this process's checkpoint
