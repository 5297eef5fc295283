"""One process at a time in a checkpoint directory: an advisory ``flock``.

Two processes checkpointing into one directory (a service restarted while
the old one still runs, a notebook and a script given the same path) would
overwrite each other's checkpoints, and a restart would resume one run's
node states with the other's source offsets. A :class:`~streams.Checkpointer`
takes an exclusive ``flock`` on ``<directory>/.lock`` before it reads or
removes anything there, and holds it while it lives; the kernel releases it
when the process ends, however it ends (a crash, ``kill -9``), so a restart
is never refused by a dead run. The Checkpointers of one process share the
lock: building the pipeline again in a notebook, or a test restoring into a
second graph, uses the directory as before.

The lock is kept by the directory itself (its device and inode), not its
path: a directory removed and made again is a new one to lock. A forked
child holds the descriptor it inherited, not the lock: its own Checkpointer
on the parent's directory is refused like any other process's. The file
holds the holder's process id, for the refusal's message. Where ``fcntl``
does not exist (Windows) nothing is locked.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCKFILE", "hold"]

#: The lock file's name in a checkpoint directory.
LOCKFILE = ".lock"


class _Held:
    """This process's lock of one directory: its descriptor and how many hold it."""

    __slots__ = ("count", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.count = 0


#: Directory (device, inode) -> its lock, while a Checkpointer of this process holds it.
_HELD: dict[tuple[int, int], _Held] = {}
_guard = threading.Lock()
#: Releases asked for, done under the guard. A release runs from a finalizer,
#: which the cyclic collector may run in the middle of hold() in this very
#: thread: it must neither wait for the guard nor change _HELD there.
_pending: list[tuple[tuple[int, int], _Held]] = []


def _forget_inherited() -> None:
    """In a forked child: the parent's locks are not the child's (its descriptors go)."""
    for held in _HELD.values():
        try:
            os.close(held.fd)  # the parent's descriptor stays open: its lock stays
        except OSError:
            pass
    _HELD.clear()
    _pending.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited)


def hold(directory: Path, owner: object) -> Callable[[], None]:
    """Lock ``directory`` (created if needed) for this process while ``owner`` lives.

    Returns what lets ``owner`` go of it sooner (once; later calls do nothing):
    a Checkpointer refused after taking it (a checkpoint of another graph) is
    kept alive by its traceback, in a notebook until the next error.

    Raises
    ------
    streams.CheckpointError
        Another process holds it; the message names the process.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> class Owner: ...
    >>> directory, first, second = Path(tempfile.mkdtemp()), Owner(), Owner()
    >>> _ = hold(directory, first), hold(directory, second)  # one process: shared
    >>> sorted(p.name for p in directory.iterdir())
    ['.lock']
    >>> found = directory.stat()
    >>> _HELD[found.st_dev, found.st_ino].count
    2
    >>> del first, second  # the lock goes with its last holder
    >>> (found.st_dev, found.st_ino) in _HELD
    False
    """
    if fcntl is None:  # pragma: no cover - Windows
        return lambda: None
    directory.mkdir(parents=True, exist_ok=True)
    found = os.stat(directory)
    key = (found.st_dev, found.st_ino)
    with _guard:
        held = _HELD.get(key)
        if held is None:
            try:
                fd = os.open(os.path.join(directory, LOCKFILE),
                             os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:  # another user's lock file, a read-only directory
                from ._checkpoint_io import CheckpointError

                raise CheckpointError(
                    f"Checkpointer(): cannot open {directory / LOCKFILE} to lock the "
                    f"directory ({type(e).__name__}: {e.strerror}); give this pipeline a "
                    "directory it can write") from e
            try:
                _take(fd, directory)
            except BaseException:
                os.close(fd)  # a lock taken goes with it
                raise
            held = _HELD[key] = _Held(fd)
        held.count += 1
    _drain()  # releases asked for meanwhile
    return weakref.finalize(owner, _release, key, held)


def _take(fd: int, directory: Path) -> None:
    """Lock the open lock file ``fd`` and write this process's id in it, or raise."""
    from ._checkpoint_io import CheckpointError

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        raise CheckpointError(
            f"Checkpointer(): {directory} is in use by another process"
            f"{f' (pid {holder})' if holder else ''}: two pipelines checkpointing "
            "into one directory would overwrite each other's checkpoints; stop "
            "that one first, or give this pipeline a directory of its own") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _release(key: tuple[int, int], held: _Held) -> None:
    _pending.append((key, held))
    _drain()


def _drain() -> None:
    """Do the releases asked for, unless the guard is taken (its holder does them then)."""
    while _pending and _guard.acquire(blocking=False):
        try:
            while _pending:
                key, held = _pending.pop()
                if _HELD.get(key) is not held:
                    continue  # a lock of before a fork, or already let go
                held.count -= 1
                if held.count == 0:
                    del _HELD[key]
                    os.close(held.fd)  # the lock goes with the descriptor
        finally:
            _guard.release()
