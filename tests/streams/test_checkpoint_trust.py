"""A checkpoint directory is trusted input: what a key protects, and what is cleaned up.

A checkpoint holds pickles. With ``key=`` every slot is signed (HMAC) and a
file changed by anyone without the key is refused before anything in it is
unpickled; an unkeyed file offered to a keyed Checkpointer is refused too
(it could have been put there to bypass the check). A temporary file left by
a write cut short is removed at the next start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from streams import Checkpointer, CheckpointError, Stream
from streams.state import read_checkpoint, write_checkpoint

MARK = "STREAMS_TEST_CHECKPOINT_CODE_RAN"


class Payload:
    """Unpickling this runs code: what an attacker would put in a checkpoint."""

    def __reduce__(self) -> Any:
        return (exec, (f"import os; os.environ[{MARK!r}] = '1'",))

    def __deepcopy__(self, memo: Any) -> Payload:
        return self  # a snapshot copies node state: the forged file must still hold this


def code_ran() -> bool:
    return os.environ.pop(MARK, None) == "1"


def run(items: list[int], directory: Path, key: Any = None) -> list[int]:
    source = Stream.from_iterable(items)
    out = source.scan(lambda s, x: s + x, start=0).sink_to_list()
    Checkpointer(source, directory, every=1, fsync=False, key=key)
    source.start()
    return out


def forge(directory: Path, key: Any = None) -> None:
    """Overwrite the checkpoint with one whose state unpickles ``Payload``."""
    source = Stream.from_iterable([1])
    scan = source.scan(lambda s, x: s + x, start=0)
    scan.state = Payload()
    write_checkpoint(directory, source, sequence=99, fsync=False, key=key)


def flip_a_byte_of_each_record(directory: Path) -> None:
    """Change each slot's record (its header line), leaving the slot's digest as it was."""
    path = directory / "checkpoint"
    data = bytearray(path.read_bytes())
    at = data.find(b"STRMSLOT")
    while at != -1:
        data[at + 8 + 16 + 32 + 2] ^= 1  # past magic, sequence, length and digest
        at = data.find(b"STRMSLOT", at + 1)
    path.write_bytes(bytes(data))


def test_a_keyed_checkpoint_resumes_under_the_same_key(tmp_path: Path) -> None:
    assert run([1, 2], tmp_path, key="s3cret") == [1, 3]
    assert run([1, 2, 3], tmp_path, key=b"s3cret") == [6]


def test_a_forged_checkpoint_is_refused_before_it_is_unpickled(tmp_path: Path) -> None:
    run([1, 2], tmp_path, key="s3cret")
    forge(tmp_path, key="another key")
    with pytest.raises(CheckpointError, match="fails its keyed check"):
        run([1, 2, 3], tmp_path, key="s3cret")
    forge(tmp_path)  # unkeyed: the check must not be skipped
    with pytest.raises(CheckpointError, match="not signed with a key"):
        run([1, 2, 3], tmp_path, key="s3cret")
    assert not code_ran()
    # Without a key, the same file runs its code as it is read: why the
    # directory must be trusted.
    read_checkpoint(tmp_path)
    assert code_ran()


def test_a_tampered_record_is_refused_under_a_key(tmp_path: Path) -> None:
    run([1, 2], tmp_path, key="s3cret")
    flip_a_byte_of_each_record(tmp_path)
    with pytest.raises(CheckpointError, match="fails its keyed check"):
        read_checkpoint(tmp_path, key="s3cret")


def test_a_keyed_checkpoint_needs_its_key(tmp_path: Path) -> None:
    run([1, 2], tmp_path, key="s3cret")
    with pytest.raises(CheckpointError, match="written with a key"):
        run([1, 2, 3], tmp_path)


def test_a_stale_temporary_file_is_removed_at_the_next_start(tmp_path: Path) -> None:
    run([1, 2], tmp_path)
    stale = tmp_path / ".checkpoint.tmp"
    stale.write_bytes(b"\0" * 4096)  # a write killed before its rename
    assert run([1, 2, 3], tmp_path) == [6]
    assert sorted(os.listdir(tmp_path)) == [".lock", "checkpoint"]
