"""Checkpoint files on disk, written in the background: the disk side of :mod:`streams.state`.

A checkpoint is serialised by :class:`streams.state.Checkpointer` in the
pipeline's thread; this module puts its bytes on disk atomically
(:func:`write_file`, :class:`SlotFile`), off the pipeline's thread when
asked (:class:`Writer`), and reads the newest one back (:func:`read_record`).

File format, version 2: one file, ``<directory>/checkpoint``, holding two
*slots*, each with room for one checkpoint. A checkpoint is written into
the slot that does not hold the newest one, with one ``pwrite`` and one
``fdatasync``; a reader takes the slot with the highest sequence whose
checksum holds. A crash in the middle of a write damages only the slot
being written, so the file always holds the previous checkpoint or the new
one. (Writing a new file and renaming it, as version 1 did, costs a file
creation, a rename and two flushes per checkpoint: ~1.2 ms against ~0.2 ms
here, which a pipeline checkpointing every thousand elements pays a hundred
times a second.) A checkpoint larger than a slot is written into a new,
larger file, renamed over the old one::

    block 0 (4096 bytes): STREAMS-CHECKPOINT\\n{"version": 2, "slot_size": N}\\n, zero-padded
    slot 0 at 4096, slot 1 at 4096 + N, each:
        "STRMSLOT", sequence (u64 LE), length (u64 LE),
        SHA-256 of sequence, length and record (32 bytes),
        then the record (``length`` bytes: see :mod:`streams.state`)

With a key (``Checkpointer(key=...)``) the header says ``"keyed": true`` and
each slot's digest is an HMAC-SHA-256 under that key: a file written or
changed by anyone without the key is refused before a byte of its pickle is
loaded. Without a key the checksum only detects damage: a record is a
pickle, and loading a crafted one runs code, so a checkpoint directory must
be as trusted as the code itself.

Examples
--------
>>> import tempfile
>>> directory = Path(tempfile.mkdtemp())
>>> writer = Writer(directory, fsync=False, durable=-1)
>>> for sequence in range(3):
...     job = Job(sequence, b"record %d" % sequence, fds=[], confirms=[])
...     writer.submit(job)
...     job.futures[0].result()           # on disk once this returns
>>> writer.durable, read_record(directory)
(2, (2, b'record 2'))
>>> [p.name for p in directory.iterdir()]
['checkpoint']
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

__all__ = ["FORMAT_VERSION", "WRITERS", "CheckpointError", "Job", "SlotFile", "Writer", "afresh",
           "as_key", "close_fds", "read_record", "remove_stale", "write_file"]

logger = logging.getLogger("streams")

#: The version written in the file's first block; readers refuse any other.
FORMAT_VERSION = 2
FILENAME = "checkpoint"
#: The file, next to the checkpoint, naming the writers of sinks that number
#: their writes (``sink_to_redis``) for a start without a checkpoint: see
#: :mod:`streams.writer_names`.
WRITERS = "writers.json"
MAGIC = b"STREAMS-CHECKPOINT\n"
BLOCK = 4096
_SLOT = struct.Struct("<8sQQ32s")
_SLOT_MAGIC = b"STRMSLOT"
_COVERED = struct.Struct("<QQ")
#: The smallest slot; a new file's slots have room for 1.5 times the checkpoint.
MIN_SLOT = 64 * 1024
_OLD_NAME = re.compile(rf"{FILENAME}-\d+")
_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be taken, read, or applied to this graph."""


def afresh(directory: Path) -> str:
    """What a refusal says to do to start afresh: all the directory holds goes, not one file."""
    return (f"to start afresh, remove the directory {directory}, both its {FILENAME} and its "
            f"{WRITERS}, or pass Checkpointer(restore=False)")


class SlotFile:
    """An open checkpoint file: where the next checkpoint goes, and whether it fits."""

    __slots__ = ("key", "path", "slot_size", "spare")

    def __init__(self, path: Path, slot_size: int, spare: int, key: bytes | None = None) -> None:
        self.path = path
        self.key = key
        self.slot_size = slot_size
        #: The slot not holding the newest checkpoint: the next is written there.
        self.spare = spare

    def fits(self, record: bytes) -> bool:
        return _SLOT.size + len(record) <= self.slot_size

    def write(self, sequence: int, record: bytes, fsync: bool) -> None:
        """Write ``record`` into the spare slot; it then holds the newest checkpoint."""
        data = _slot(sequence, record, self.key)
        offset = BLOCK + self.spare * self.slot_size
        fd = os.open(self.path, os.O_WRONLY)
        try:
            view = memoryview(data)
            while view:  # a regular file takes it all at once, unless interrupted
                n = os.pwrite(fd, view, offset)
                view, offset = view[n:], offset + n
            if fsync:
                _fdatasync(fd)
        finally:
            os.close(fd)
        self.spare ^= 1


def _digest(sequence: int, record: bytes, key: bytes | None = None) -> bytes:
    # The sequence and length are covered too: a write cut short inside the
    # slot's header must not pair a new sequence with the old record.
    covered = _COVERED.pack(sequence, len(record))
    if key is not None:
        mac = hmac.new(key, covered, hashlib.sha256)
        mac.update(record)
        return mac.digest()
    return hashlib.sha256(covered + record).digest()


def _slot(sequence: int, record: bytes, key: bytes | None = None) -> bytes:
    return _SLOT.pack(_SLOT_MAGIC, sequence, len(record), _digest(sequence, record, key)) + record


def as_key(key: str | bytes | None) -> bytes | None:
    """A checkpoint key as bytes (a str is UTF-8 encoded); None stays None."""
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    raise TypeError(f"Checkpointer(): key must be str or bytes, got {type(key).__name__}")


def remove_stale(directory: Path) -> None:
    """Remove what a write cut short left behind (a temporary file never renamed)."""
    if directory.is_dir():
        for name in os.listdir(directory):
            if name.startswith(f".{FILENAME}.tmp") or name.endswith(".json.tmp"):
                (directory / name).unlink(missing_ok=True)


def _create(directory: Path, sequence: int, record: bytes, fsync: bool,
            key: bytes | None = None) -> SlotFile:
    """A new file, holding ``record`` in slot 0, renamed over any previous one."""
    directory.mkdir(parents=True, exist_ok=True)
    need = _SLOT.size + len(record)
    slot_size = -(-max(MIN_SLOT, need * 3 // 2) // BLOCK) * BLOCK
    fields: dict[str, Any] = {"version": FORMAT_VERSION, "slot_size": slot_size}
    if key is not None:
        fields["keyed"] = True
    head = MAGIC + json.dumps(fields).encode()
    head += b"\n"
    path = directory / FILENAME
    tmp = directory / f".{FILENAME}.tmp"
    with open(tmp, "wb") as f:
        f.write(head.ljust(BLOCK, b"\0"))
        f.write(_slot(sequence, record, key))
        # Slot 1 is a hole until written: the file has its full size from the start.
        f.truncate(BLOCK + 2 * slot_size)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        _sync_directory(directory)  # the rename itself must reach the disk
    return SlotFile(path, slot_size, spare=1, key=key)


def _sync_directory(directory: Path) -> None:
    if hasattr(os, "O_DIRECTORY"):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def discard(directory: Path, fsync: bool) -> None:
    """Remove the checkpoint in ``directory``: a new run starts that it does not describe.

    Removed before the new run writes anything: a crash before that run's
    first checkpoint must not resume the old run's state over the new
    run's output.
    """
    path = directory / FILENAME
    if path.exists():
        path.unlink()
        if fsync:
            _sync_directory(directory)


def write_file(directory: Path, sequence: int, record: bytes, fsync: bool,
               file: SlotFile | None, key: bytes | None = None) -> SlotFile:
    """Write checkpoint ``sequence`` (its ``record``) atomically; return the file to write next.

    ``file`` is the file the previous checkpoint of this writer went to
    (None: a new file is created, replacing any earlier run's).
    """
    if file is not None and file.fits(record):
        file.write(sequence, record, fsync)
        return file
    return _create(directory, sequence, record, fsync, key)


def read_record(directory: Path, key: bytes | None = None) -> tuple[int, bytes] | None:
    """The newest checkpoint in ``directory``, as (sequence, record); None if there is none.

    Raises :class:`CheckpointError` for a file that is not a checkpoint, of
    another format version, or with no whole checkpoint in it; with ``key``,
    also for one not written under that key (tampered with, or unkeyed).
    """
    path = directory / FILENAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        old = sorted(n for n in os.listdir(directory) if _OLD_NAME.fullmatch(n)) \
            if directory.is_dir() else []
        if old:
            raise CheckpointError(
                f"{directory / old[-1]} has checkpoint format version 1, written by an earlier "
                f"development version of streams; this version reads version {FORMAT_VERSION} "
                "only: remove it to start afresh, and the other checkpoint-N files with it "
                f"(remove the directory {directory})") from None
        return None
    if not data.startswith(MAGIC):
        raise CheckpointError(f"{path} is not a streams checkpoint")
    try:
        header = json.loads(data[len(MAGIC):data.index(b"\n", len(MAGIC))])
        version, slot_size = header.get("version"), header.get("slot_size")
    except (ValueError, AttributeError) as e:
        raise CheckpointError(f"{path}: unreadable header: {e}") from e
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format version {version!r}; this version "
            f"of streams reads version {FORMAT_VERSION} only")
    if not isinstance(slot_size, int) or isinstance(slot_size, bool) or slot_size < BLOCK:
        raise CheckpointError(f"{path} is damaged: its header's slot size is {slot_size!r}")
    keyed = header.get("keyed") is True
    if keyed and key is None:
        raise CheckpointError(f"{path} was written with a key: pass the same key= to read it")
    if key is not None and not keyed:
        raise CheckpointError(
            f"{path} is not signed with a key but key= was given: refusing it (it may have "
            f"been replaced); if it is yours, {afresh(directory)}")
    best: tuple[int, bytes] | None = None
    failed: list[tuple[int, int | None]] = []  # (slot, the sequence its header gives)
    for slot, offset in enumerate((BLOCK, BLOCK + slot_size)):
        head = data[offset:offset + _SLOT.size]
        if head == bytes(_SLOT.size):
            continue  # never written (a new file's slot 1)
        if len(head) < _SLOT.size:
            failed.append((slot, None))  # the file is shorter than its header says
            continue
        magic, sequence, length, digest = _SLOT.unpack(head)
        record = data[offset + _SLOT.size:offset + _SLOT.size + length]
        if not (magic == _SLOT_MAGIC and len(record) == length
                and hmac.compare_digest(_digest(sequence, record, key), digest)):
            failed.append((slot, sequence if magic == _SLOT_MAGIC else None))
        elif best is None or sequence > best[0]:
            best = (sequence, record)
    if best is None:
        if key is not None:
            raise CheckpointError(
                f"{path} fails its keyed check: it was changed by someone without the key, "
                "written with another key, or damaged; nothing in it was loaded")
        raise CheckpointError(f"{path} is damaged (neither of its slots holds a whole "
                              f"checkpoint); {afresh(directory)}")
    for slot, sequence in failed:
        _warn_failed_slot(path, slot, sequence, best[0], key is not None)
    return best


def _warn_failed_slot(path: Path, slot: int, sequence: int | None, restored: int,
                      keyed: bool) -> None:
    """Tell that one slot failed its check and the other was restored (see read_record).

    A crash in the middle of a write leaves the slot being written so, and
    the checkpoint before it is the right one to restore; but damage done to
    the file later looks the same, and then the lost slot may have held the
    newer checkpoint, after which entries were acknowledged (to Redis, say):
    the user must hear of it.
    """
    claims = "" if sequence is None else f" (its header says checkpoint {sequence})"
    logger.warning(
        "%s: slot %d%s fails its %s; checkpoint %d, in slot %d, is restored instead. A write "
        "cut short by a crash or a power loss does this, and then nothing is lost; but if the "
        "file was damaged or changed after it was written, what the pipeline did and "
        "acknowledged after checkpoint %d (entries acknowledged to a broker, output "
        "committed) may be lost", path, slot, claims, "keyed check" if keyed else "checksum",
        restored, 1 - slot, restored)


class Job:
    """One checkpoint taken and not yet on disk."""

    __slots__ = ("confirms", "data", "fds", "futures", "sequence")

    def __init__(self, sequence: int, data: bytes | Callable[[], bytes], fds: list[int],
                 confirms: list[tuple[Any, int]]) -> None:
        self.sequence = sequence
        #: The checkpoint's record, or what makes it (called by the writer).
        self.data = data
        #: Duplicated descriptors of files to fsync before the checkpoint is written.
        self.fds = fds
        #: (node, token) pairs: writes sent and to be confirmed before the file is written.
        self.confirms = confirms
        #: Resolved when this checkpoint, or one that superseded it, is on disk.
        self.futures: list[Future[None]] = [Future()]


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
    fds.clear()


#: Seconds the writer thread waits for another checkpoint before it exits.
IDLE = 1.0


class Writer:
    """The background writer: one thread, alive while the pipeline takes checkpoints.

    Group commit: a checkpoint handed over while another is being written
    waits in a single slot; a newer one replaces it there (it covers
    everything the older one did), so the disk sees each checkpoint in
    order, never an older one after a newer one, and a slow disk costs
    skipped checkpoints, not a growing queue. The thread stays for the next
    checkpoint (starting one costs more than a checkpoint) and exits once
    told the pipeline is done (:meth:`retire`) or after :data:`IDLE` seconds
    without work. It is not a daemon: an interpreter exiting with a
    checkpoint in flight finishes writing it first.
    """

    def __init__(self, directory: Path, fsync: bool, durable: int,
                 key: bytes | None = None) -> None:
        self.directory = directory
        self.fsync = fsync
        self.key = key
        #: The sequence of the newest checkpoint on disk (-1: none). Written
        #: by the writer thread only; one attribute, read without the lock.
        self.durable = durable
        #: The first failure of a write; every later checkpoint is refused.
        self.error: CheckpointError | None = None
        #: How many checkpoints were replaced by a newer one before being written.
        self.superseded = 0
        self._lock = threading.Condition(threading.Lock())
        self._next: Job | None = None
        self._thread: threading.Thread | None = None
        self._retire = False
        # The file the last checkpoint went to (None: the first write creates
        # one, replacing an earlier run's).
        self._file: SlotFile | None = None

    def submit(self, job: Job) -> None:
        with self._lock:
            if self.error is not None:
                close_fds(job.fds)
                raise self.error
            older = self._next
            if older is not None:
                # The newer checkpoint covers the older one; its files are
                # fsynced too (cheap when nothing changed since).
                job.fds[:0] = older.fds
                job.futures.extend(older.futures)
                self.superseded += 1
            self._next = job
            self._retire = False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="streams-checkpoint-writer")
                self._thread.start()
            else:
                self._lock.notify()

    def retire(self) -> None:
        """Let the thread exit as soon as it has nothing to write."""
        with self._lock:
            self._retire = True
            self._lock.notify()

    def write_now(self, job: Job) -> None:
        """Write ``job`` in the calling thread (``Checkpointer(background=False)``)."""
        if self.error is not None:
            close_fds(job.fds)
            return
        self._write(job)

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._next is None:
                    # (A wait that times out as a checkpoint arrives finds it.)
                    if (self._retire or not self._lock.wait(IDLE)) and self._next is None:
                        self._thread = None
                        return
                job, self._next = self._next, None
            self._write(job)

    def _write(self, job: Job) -> None:
        try:
            if self.fsync:
                for fd in job.fds:
                    os.fsync(fd)
            data = job.data if isinstance(job.data, bytes) else job.data()
            self._file = write_file(self.directory, job.sequence, data, self.fsync, self._file,
                                    self.key)
        except Exception as e:  # handed to the pipeline's thread (see Checkpointer.save)
            error = CheckpointError(
                f"writing checkpoint {job.sequence} to {self.directory} failed: "
                f"{type(e).__name__}: {e}")
            error.__cause__ = e
            with self._lock:
                self.error = error
                rest, self._next = self._next, None
            for failed in (job, rest):
                if failed is not None:
                    close_fds(failed.fds)
                    for f in failed.futures:
                        f.set_exception(error)
            return
        finally:
            close_fds(job.fds)
        self.durable = job.sequence
        for f in job.futures:
            f.set_result(None)
