"""Where a file source stands, and whether a checkpoint's offset is into the same file.

A checkpoint of ``from_textfile`` or ``from_stdin`` (a file redirected to it)
keeps the bytes before its offset; a restore checks them against the file
it opens, and refuses another file: a file replaced at the same path, or
another file redirected, whose bytes the offset would cut anywhere.
"""

from __future__ import annotations

import io
import os
import stat
from typing import Any

from .._checkpoint_io import CheckpointError

__all__ = ["bytes_before", "check_before", "size_of"]

#: Bytes before its offset a checkpoint keeps, to know the file again.
BEFORE = 256


def size_of(fp: Any) -> int | None:
    """The size of the regular file ``fp`` reads directly (None: a pipe, a compressed file...)."""
    if not isinstance(fp, (io.BufferedReader, io.FileIO)):
        return None  # gzip's tell() counts its data, not the file's bytes
    try:
        st = os.fstat(fp.fileno())
    except (OSError, ValueError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def bytes_before(fp: Any, offset: int) -> bytes | None:
    """Up to :data:`BEFORE` bytes of ``fp``'s file before ``offset`` (None: not a file on disk)."""
    if size_of(fp) is None:
        return None
    n = min(offset, BEFORE)
    try:
        return os.pread(fp.fileno(), n, offset - n)
    except (OSError, ValueError):
        return None


def check_before(label: str, fp: Any, offset: int, expected: bytes | None) -> None:
    """Refuse ``offset`` into ``fp`` unless the bytes before it are ``expected``.

    Nothing is checked where either side cannot tell (``expected`` None: a
    checkpoint over a pipe, or from before the bytes were kept; ``fp`` not a
    file on disk).
    """
    found = None if expected is None else bytes_before(fp, offset)
    if expected is None or found is None or found == expected:
        return
    raise CheckpointError(
        f"{label}: the file is not the one the checkpoint was taken over: "
        + (f"it holds fewer than the checkpoint's {offset} bytes"
           if len(found) < len(expected) else
           f"the bytes before the checkpoint's offset {offset} differ")
        + " (replaced or rewritten); remove the checkpoint to start afresh")
