"""Snapshots of stateful nodes, and checkpoints of whole pipelines.

A *snapshot* is the state of every node of a graph (scan totals, window
buffers, ``unique``'s memory, zip buffers, source offsets...), taken between
two elements. A *checkpoint* is a snapshot written to a directory
atomically: a pipeline killed at any point finds either the previous
checkpoint or the new one, never half of one (see
:mod:`streams._checkpoint_io` for the file, ``<directory>/checkpoint``, and
how it is written). Restarting a pipeline against its checkpoint restores
every node and resumes each source at its saved offset: with a replayable
source and sinks that take part, every element's effect is seen exactly once.

Here lives the :class:`Checkpointer`; a checkpoint's record lives in
:mod:`streams.checkpoint_record`, snapshots in :mod:`streams.snapshot`, the
file in :mod:`streams._checkpoint_io` (their public names import from here).

Examples
--------
>>> import tempfile
>>> from streams import Stream
>>> def build():
...     source = Stream()
...     totals = source.scan(lambda s, x: s + x, start=0).sink_to_list()
...     return source, totals
>>> source, totals = build()
>>> for i in range(3):
...     source.emit(i)
>>> snap = snapshot_graph(source)
>>> source, totals = build()              # a fresh process, say
>>> restore_graph(source, snap)
>>> source.emit(10)
>>> totals
[13]
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ._checkpoint_io import (
    FILENAME,
    FORMAT_VERSION,
    CheckpointError,
    Job,
    Writer,
    afresh,
    as_key,
    close_fds,
    discard,
    remove_stale,
)
from .checkpoint_graph import barrier_levels, taking_part
from .checkpoint_lock import hold
from .checkpoint_record import _encode, read_checkpoint, write_checkpoint
from .checkpoint_timer import DueTimer
from .clock import get_clock, run_sync
from .core import Stream
from .graph import walk
from .loop_thread import asyncio_loop_running
from .pending import gather_pending as _gather_pending
from .snapshot import GraphSnapshot, _node_state, restore_graph, snapshot_graph
from .writer_names import name_writers

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "Checkpointer",
    "GraphSnapshot",
    "checkpoint",
    "read_checkpoint",
    "restore_graph",
    "snapshot_graph",
    "write_checkpoint",
]

class Checkpointer:
    """Take checkpoints of a running pipeline; resume it from the last one.

    Created before the sources start. If ``directory`` holds a checkpoint, the
    graph is restored from it at once (:attr:`restored` is then True) and the
    sources resume from their saved offsets. Then a checkpoint is taken
    every ``every`` elements and/or every ``interval`` seconds (time from
    :func:`streams.clock.get_clock`, checked as elements complete and, on an
    event loop, by a timer while the sources wait for input: see
    :mod:`streams.checkpoint_timer`), and once more when every source has closed.

    Checkpoints are taken between elements: a source reports an element
    only after all downstream work for it has finished, so no element is
    ever half in a checkpoint. Before taking one, nodes that buffer output
    (``sink_to_redis``, ``sink_to_durable_textfile``) hand it over, and
    ``buffer``, ``latest`` and ``map_async`` deliver what they hold (the
    pipeline pauses while they drain); windows, ``delay`` and ``partition``
    keep what they hold in their state, and re-arm their timers on restore.

    Taking a checkpoint (serialising the node states and source offsets) is
    synchronous, and so, by default, is writing it to disk (one write and,
    with ``fsync``, one flush): the library starts no thread of its own
    unless asked. With ``background=True`` one writer thread writes
    checkpoints while the pipeline goes on; the thread ends once the last
    checkpoint is written (when the sources close, at :meth:`wait`, or a
    second after the last one) and an interpreter exiting waits for the
    checkpoint it is writing. If
    the disk is slower than the checkpoints, a checkpoint still waiting when
    the next is taken is skipped (the newer one covers it). Whatever must
    wait for durability waits for it: a Redis source acknowledges entries
    only once a checkpoint covering them is on disk, a durable file sink's
    data is fsynced before the checkpoint that records its length, writes
    of ``sink_to_redis`` are confirmed by the server before the checkpoint
    covering them is written, and the last checkpoint (when every source
    has closed) is on disk before the sources return. A write that fails
    is raised, as :class:`CheckpointError`, from the next checkpoint or
    :meth:`wait`; no later checkpoint is taken.

    The directory is this process's while the Checkpointer lives, or until
    :meth:`close`: one in another process is refused (see
    :mod:`streams.checkpoint_lock`).

    Every checkpoint holds the whole state: its cost grows with it. The
    file has two slots, each with room for 1.5 times the checkpoint, so it
    takes up to 3 times the state's pickled size (2 times once both slots
    are written; the rest is a hole). Measured on the development machine
    (a 100 MiB state, no fsync): ``save()`` stalled the pipeline 592 ms with
    the default foreground writer, 71 ms (the pickling) with
    ``background=True``; the file was 300 MiB, 100 MiB of it on disk after
    the first checkpoint. Keep large data out of node state (in a store the
    sink writes to), or checkpoint it less often.

    Parameters
    ----------
    node : Stream
        Any node of the pipeline.
    directory : str or path
        Where the checkpoint lives (created if needed).
    every : int, optional
        Elements (counted over all sources) between checkpoints.
    interval : float, optional
        Seconds between checkpoints.
    fsync : bool
        Make each checkpoint durable against power loss (costs a disk
        flush per checkpoint; a killed process loses nothing without it).
    restore : bool
        Resume from an existing checkpoint (False: remove it at once, so that a
        crash before the new run's first checkpoint starts afresh, and draw
        new writer names: see :mod:`streams.writer_names`).
    background : bool
        Write checkpoints in one writer thread, started for the purpose, while
        the pipeline goes on (default False: in the pipeline's own thread,
        which waits for each write).
    key : str or bytes, optional
        Sign every checkpoint with this secret (HMAC-SHA-256) and refuse,
        before loading anything from it, a checkpoint not signed with it.
        A checkpoint holds pickles, and loading a crafted pickle runs code:
        without a key, whoever can write the directory can run code in the
        pipeline's process as soon as it starts, so keep the directory as
        trusted as the code (or pass a key kept elsewhere).
    manual : bool
        The graph has no source (it is fed by ``emit()``): the caller takes
        checkpoints with :meth:`step` or :meth:`save` and restarts emitting
        where the restored state says. Without it, ``every`` or ``interval``
        on such a graph is refused: no checkpoint would ever be taken.

    Examples
    --------
    >>> import tempfile
    >>> from streams import Stream
    >>> directory = tempfile.mkdtemp()
    >>> def run(items):
    ...     source = Stream.from_iterable(items)
    ...     totals = source.scan(lambda s, x: s + x, start=0).sink_to_list()
    ...     cp = Checkpointer(source, directory, every=2)
    ...     source.start()                     # returns with the last checkpoint on disk
    ...     return cp, totals
    >>> cp, totals = run([1, 2, 3])
    >>> cp.restored, totals, cp.durable
    (False, [1, 3, 6], 1)
    >>> cp, totals = run([1, 2, 3, 4, 5])    # the same source, grown: resumes after 3
    >>> cp.restored, totals
    (True, [10, 15])
    """

    def __init__(self, node: Stream[Any], directory: str | os.PathLike[str],
                 every: int | None = None, interval: float | None = None,
                 fsync: bool = True, restore: bool = True, background: bool = False,
                 manual: bool = False, key: str | bytes | None = None) -> None:
        if every is not None and (isinstance(every, bool) or not isinstance(every, int)
                                  or every < 1):
            raise ValueError(f"Checkpointer(): every must be an int >= 1, got {every!r}")
        if interval is not None and not interval > 0:
            raise ValueError(f"Checkpointer(): interval must be > 0 seconds, got {interval!r}")
        self.node = node
        # Absolute: the lock (streams.checkpoint_lock) is taken on the directory
        # now, and the files must go there even after a change of directory.
        self.directory = Path(os.path.abspath(directory))
        self.every = every
        self.interval = interval
        self.fsync = fsync
        self.background = background
        self.manual = manual
        self._key = as_key(key)
        #: The sequence number the next checkpoint gets.
        self.sequence = 0
        #: Whether the graph was restored from an existing checkpoint.
        self.restored = False
        self._count = 0
        self._every: float = float("inf") if every is None else every
        self._clock = get_clock()
        self._due = self._clock.now() + interval if interval is not None else float("inf")
        self._timer = DueTimer(self)
        self._timed = False  # the checkpoint under way is the timer's (see _take)
        self._inflight = 0
        # Of those, the ones the current task began (each async source runs in a task).
        self._begun: contextvars.ContextVar[int] = contextvars.ContextVar("begun", default=0)
        # Checkpoints taken whose buffered writes (sink_to_redis) are not yet
        # confirmed: the newest (taken since the last poll) and older ones.
        self._held: list[Job] = []
        self._held_older: list[Job] = []
        self._last: Job | None = None
        self._sources, self._numbering = taking_part(
            self, node, needs_source=not manual and bool(every or interval))
        self._open = set(map(id, self._sources))
        self._release: Callable[[], None] | None = None
        try:
            self._release = hold(self.directory, self)  # before anything there is read
            self._open_directory(node, restore, fsync)
        except BaseException:
            self.detach()  # refused: the sources are free for another Checkpointer,
            if self._release is not None:  # and the directory for another process
                self._release()
            raise

    def _open_directory(self, node: Stream[Any], restore: bool, fsync: bool) -> None:
        """Restore from the checkpoint there (or remove it), and make ready to write."""
        if restore:
            snap = read_checkpoint(self.directory, self._key)
            if snap is not None:
                where = f"checkpoint {snap.sequence} in {self.directory / FILENAME}"
                restore_graph(node, snap, where=where, copy=False,  # read afresh
                              afresh=afresh(self.directory))
                self.sequence = snap.sequence + 1
                self.restored = True
        else:
            discard(self.directory, fsync)
        if self._numbering and not self.restored:  # names drawn or reused: see writer_names
            name_writers(self.directory, walk(node), self._numbering, restore, fsync)
        remove_stale(self.directory)  # a write cut short leaves a temporary file
        self._writer = Writer(self.directory, fsync, self.sequence - 1, self._key)

    @property
    def durable(self) -> int:
        """The sequence of the newest checkpoint known to be on disk (-1: none yet)."""
        return self._writer.durable

    @property
    def superseded(self) -> int:
        """How many checkpoints were skipped because a newer one was taken first."""
        return self._writer.superseded

    def detach(self) -> None:
        """Stop taking checkpoints of this pipeline (the directory stays this process's)."""
        self._timer.cancel()
        for s in self._sources:
            s._checkpointer = None

    def close(self) -> None:
        """Wait for the checkpoints taken, stop taking more, and let the directory go.

        Another process may then checkpoint there (until then it is refused:
        see :mod:`streams.checkpoint_lock`). Raises :class:`CheckpointError`
        if writing one failed; the directory is let go all the same.
        """
        try:
            self.wait()
        finally:
            self.detach()
            if self._release is not None:
                self._release()

    # -- what sources call -------------------------------------------------

    def begin(self) -> None:
        """An element (or batch) enters the graph (asynchronous sources; see :meth:`step`)."""
        self._inflight += 1
        self._begun.set(self._begun.get() + 1)

    def abandon(self) -> None:
        """The elements the current task began failed, no :meth:`step` to follow: they are
        in flight no more (else no checkpoint would be taken again)."""
        begun = self._begun.get()
        if begun:
            self._inflight = max(0, self._inflight - begun)
            self._begun.set(0)

    def step(self, n: int = 1) -> Any:
        """``n`` elements finished (all downstream work done): checkpoint if due.

        Returns None, or an awaitable when the checkpoint has asynchronous
        work (flushing an asynchronous sink). Asynchronous sources call
        :meth:`begin` before pushing an element (or a batch, then one
        ``step(n)`` after it) so that, with several sources, no checkpoint is
        taken while another source's element is still in flight.
        """
        self._count += n
        if self._timer.failure is not None:  # a checkpoint its timer took failed
            self._raise_failure()
        if self._inflight:
            self._inflight -= 1
            if begun := self._begun.get():
                self._begun.set(begun - 1)
            if self._inflight > 0:
                return None
        if self._count >= self._every:
            return self.save()
        # Reading the clock costs more than the rest of this step: only when timed.
        if self.interval is not None:
            if self._clock.now() >= self._due:
                return self.save()
            self._timer.arm()  # for a pause in the input (on a loop)
        return None

    def source_closed(self, source: Stream[Any]) -> Any:
        """``source`` has closed: once every source has, checkpoint and wait for it.

        Returns None (without a running loop: the checkpoint is then on
        disk) or an awaitable.
        """
        self._open.discard(id(source))
        if self._open:
            return None
        self._timer.cancel()
        pending = self.save()
        if asyncio_loop_running():
            return self._save_then_wait(pending)
        if pending is not None:
            run_sync(pending)
        self.wait()
        return None

    async def _save_then_wait(self, pending: Any) -> None:
        if pending is not None:
            await pending
        await self.wait_async()

    def poll(self) -> int:
        """Hand over checkpoints whose writes are confirmed by now; return :attr:`durable`.

        Called by a source at each read (a round trip later than the
        checkpoint was taken, so the confirmations it reads have arrived).
        Raises the failure of a background write.
        """
        if self._held_older:
            ready, self._held_older = self._held_older, []
            self._submit_confirmed(ready)
        if self._held:
            self._held_older, self._held = self._held, []
        self._raise_failure()
        return self._writer.durable

    def wait(self) -> None:
        """Wait until every checkpoint taken is on disk (or skipped for a newer one).

        Raises :class:`CheckpointError` if writing one failed.
        """
        self._submit_held()
        if self._last is not None:
            try:
                self._last.futures[0].result()
            except CheckpointError:
                pass  # raised below, with every later call
        self._writer.retire()  # the next checkpoint starts another thread
        self._raise_failure()

    async def wait_async(self) -> None:
        """:meth:`wait` on the running loop, without blocking it."""
        self._submit_held()
        if self._last is not None:
            try:
                await asyncio.wrap_future(self._last.futures[0])
            except CheckpointError:
                pass
        self._writer.retire()
        self._raise_failure()

    def _raise_failure(self) -> None:
        timed, self._timer.failure = self._timer.failure, None
        if timed is not None:
            raise timed
        error = self._writer.error
        if error is not None:
            raise CheckpointError(str(error)) from error.__cause__

    # -- taking one ----------------------------------------------------------

    def save(self) -> Any:
        """Take a checkpoint now (between elements); None or an awaitable.

        The checkpoint is serialised before this returns and written to disk
        in the background (see the class description).
        """
        self._raise_failure()
        self._count = 0
        if self.interval is not None:
            self._due = self._clock.now() + self.interval
        self._submit_held()
        nodes = walk(self.node)
        return self._barriers(nodes, barrier_levels(nodes), not asyncio_loop_running(), [])

    def _barriers(self, nodes: list[Stream[Any]], levels: list[list[Any]], sync: bool,
                  confirms: list[tuple[Any, int]]) -> Any:
        """Ask the barriers, a level at a time (see barrier_levels), then take the checkpoint."""
        for i, level in enumerate(levels):
            flushes = []
            for n in level:
                if sync and hasattr(n, "_barrier_send"):
                    # Sent now, confirmed before the checkpoint is written (see poll).
                    confirms.append((n, n._barrier_send()))
                else:
                    flushes.append(n._barrier())
            flushed = _gather_pending(flushes)
            if flushed is not None:
                return self._barriers_after(flushed, nodes, levels[i + 1:], sync, confirms)
        self._take(nodes, confirms)
        return None

    async def _barriers_after(self, flushed: Awaitable[Any], nodes: list[Stream[Any]],
                              levels: list[list[Any]], sync: bool,
                              confirms: list[tuple[Any, int]]) -> None:
        await flushed
        rest = self._barriers(nodes, levels, sync, confirms)
        if rest is not None:
            await rest

    def _take(self, nodes: list[Stream[Any]], confirms: list[tuple[Any, int]]) -> None:
        timed, self._timed = self._timed, False
        if timed and self._inflight:
            # An element came in while the barriers of the timer's checkpoint
            # drained (nothing paused the sources): the states would hold part
            # of its work, the offsets none of it. Its step() takes the next.
            self._count = max(self._count, 1)
            return
        fds: list[int] = []
        try:
            data = _encode(nodes, [_node_state(n, fds) for n in nodes], self.sequence)
        except BaseException:
            close_fds(fds)
            raise
        job = Job(self.sequence, data, fds, confirms)
        self.sequence += 1
        for s in self._sources:
            if hasattr(s, "_checkpoint_taken"):
                s._checkpoint_taken(job.sequence)
        self._last = job
        if confirms:
            # Written once the server confirms the writes it covers: at the
            # source's next read, by when the reply has arrived (see poll).
            self._held.append(job)
        else:
            self._submit_confirmed([job])

    def _submit_held(self) -> None:
        held = self._held_older + self._held
        self._held_older, self._held = [], []
        self._submit_confirmed(held)

    def _submit_confirmed(self, jobs: list[Job]) -> None:
        for i, job in enumerate(jobs):
            try:
                for n, token in job.confirms:
                    n._barrier_confirm(token)
            except BaseException:
                # A write the checkpoint covers failed: it must not be written.
                for dropped in jobs[i:]:
                    close_fds(dropped.fds)
                    for f in dropped.futures:
                        f.set_exception(CheckpointError(
                            f"checkpoint {dropped.sequence} dropped: a write it covers failed"))
                raise
            if self.background:
                self._writer.submit(job)
            else:
                self._writer.write_now(job)
                self._raise_failure()

    def save_sync(self) -> None:
        """:meth:`save`, running any asynchronous part to completion (no loop)."""
        pending = self.save()
        if pending is not None:
            run_sync(pending)


def checkpoint(node: Stream[Any], directory: str | os.PathLike[str], every: int | None = None,
               interval: float | None = None, **kwargs: Any) -> Checkpointer:
    """Checkpoint the pipeline of ``node`` to ``directory``; see :class:`Checkpointer`."""
    return Checkpointer(node, directory, every=every, interval=interval, **kwargs)
