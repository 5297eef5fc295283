"""One process at a time in a checkpoint directory (``streams.checkpoint_lock``).

A real second process holds the directory; this one is refused, naming it,
and its checkpoint is left as it was. Once the holder is killed (SIGKILL: no
clean-up of its own) the kernel has released the lock and the directory
restores here.
"""

from __future__ import annotations

import gc
import operator
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
    from streams import checkpoint_lock

    first_source, _ = _graph([1, 2])
    first = Checkpointer(first_source, tmp_path, every=1)
    first_source.start()
    source, totals = _graph([1, 2, 3])
    second = Checkpointer(source, tmp_path, every=1)  # a graph built again: allowed
    source.start()
    assert second.restored and totals == [6]
    key = str(tmp_path.resolve())
    assert checkpoint_lock._HELD[key][1] == 2
    del first, second, first_source, source
    gc.collect()  # the sources' graphs refer to their Checkpointers
    assert key not in checkpoint_lock._HELD


def test_a_checkpointer_refused_lets_the_directory_go_at_once(tmp_path: Path) -> None:
    # Its traceback keeps it alive (in a notebook, until the next error): the
    # lock must not wait for it to be collected.
    from streams import checkpoint_lock

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
    assert str(tmp_path.resolve()) not in checkpoint_lock._HELD
    assert other._checkpointer is None
