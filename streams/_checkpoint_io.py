"""Writing checkpoint files, in the background: the disk side of :mod:`streams.state`.

A checkpoint is serialised by :class:`streams.state.Checkpointer` in the
pipeline's thread; this module puts the bytes on disk atomically
(:func:`write_file`) and does so off the pipeline's thread (:class:`Writer`).

Examples
--------
>>> import tempfile
>>> from pathlib import Path
>>> directory = Path(tempfile.mkdtemp())
>>> writer = Writer(directory, fsync=False, durable=-1)
>>> job = Job(0, b"STREAMS-CHECKPOINT\\n...", fds=[], confirms=[])
>>> writer.submit(job)
>>> job.futures[0].result()               # on disk once this returns
>>> writer.durable, [p.name for p in checkpoint_files(directory)]
(0, ['checkpoint-000000000000'])
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

__all__ = ["CheckpointError", "Job", "Writer", "checkpoint_files", "close_fds", "write_file"]

FILENAME = "checkpoint"
_NAME = re.compile(rf"{FILENAME}-(\d+)")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be taken, read, or applied to this graph."""


def write_file(directory: Path, sequence: int, data: bytes, fsync: bool,
               replaces: list[Path] | None = None) -> Path:
    """Write ``data`` as ``checkpoint-<sequence>`` atomically, then remove older files.

    ``replaces`` lists the older files (None: ``directory`` is created if
    needed and searched for them).
    """
    if replaces is None:
        directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{FILENAME}-{sequence:012d}"
    tmp = directory / f".{FILENAME}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    # Renamed to a new name, not over the previous file: ext4 flushes a file
    # renamed over another (auto_da_alloc), which made each checkpoint cost
    # ~2 ms instead of ~0.3 ms here. The previous files go once this one is in.
    os.replace(tmp, final)
    if fsync and hasattr(os, "O_DIRECTORY"):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)  # the rename itself must reach the disk
        finally:
            os.close(fd)
    for old in checkpoint_files(directory) if replaces is None else replaces:
        if old != final:
            old.unlink(missing_ok=True)
    return final


def checkpoint_files(directory: Path) -> list[Path]:
    """The checkpoint files in ``directory``, newest (highest sequence) first."""
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), directory / name) for name in entries
             if (m := _NAME.fullmatch(name))]
    return [path for _, path in sorted(found, reverse=True)]


class Job:
    """One checkpoint taken and not yet on disk."""

    __slots__ = ("confirms", "data", "fds", "futures", "sequence")

    def __init__(self, sequence: int, data: bytes | Callable[[], bytes], fds: list[int],
                 confirms: list[tuple[Any, int]]) -> None:
        self.sequence = sequence
        #: The file's bytes, or what makes them (called by the writer).
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

    def __init__(self, directory: Path, fsync: bool, durable: int) -> None:
        self.directory = directory
        self.fsync = fsync
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
        # The file written last, removed once the next is in (None: the
        # directory is searched, at the first write, for earlier runs' files).
        self._replaces: list[Path] | None = None

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
            final = write_file(self.directory, job.sequence, data, self.fsync, self._replaces)
            self._replaces = [final]
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
