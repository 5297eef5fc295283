"""A checkpoint every ``interval`` on a pipeline whose sources wait: a timer on its loop.

A :class:`~streams.state.Checkpointer` checks ``interval`` as elements
complete. A pipeline whose sources wait for input (a Redis stream, a
followed file, a Kafka topic) would then hold, until its next element, what
waits for a checkpoint: the output its sinks keep until one covers it
(``sink_to_redis``, ``sink_to_durable_textfile``) and the acknowledgements
of its sources. On an event loop, :class:`DueTimer` takes the checkpoint
when it falls due, if elements finished since the last one and none is in
flight (each asynchronous source tells the checkpointer of the elements it
pushes: between two of them, a checkpoint is consistent). The timer runs on
the library's clock (:func:`streams.clock.get_clock`): a virtual clock
drives it in tests. A pipeline without a loop runs in its sources'
threads, where no timer can come between two elements: there ``interval``
is checked as elements complete only.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .loop_thread import asyncio_loop_running

__all__ = ["DueTimer"]


class DueTimer:
    """The timer of one checkpointer's next due checkpoint; armed while elements come.

    ``failure`` is what a checkpoint it took raised (a sink's flush that
    failed), for the checkpointer to raise from its next call.
    """

    __slots__ = ("_checkpointer", "_handle", "failure")

    def __init__(self, checkpointer: Any) -> None:
        self._checkpointer = checkpointer
        self._handle: Any = None
        self.failure: BaseException | None = None

    def arm(self) -> None:
        """Arm for the checkpointer's due time, unless armed or no loop runs here."""
        if self._handle is None and asyncio_loop_running():
            ckpt = self._checkpointer
            clock = ckpt._clock
            self._handle = clock.call_later(max(0.0, ckpt._due - clock.now()), self._fire)

    def cancel(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()

    def _fire(self) -> None:
        self._handle = None
        ckpt = self._checkpointer
        # Nothing finished since the last checkpoint (the next element arms
        # the timer again), an element in flight (its step() takes the
        # checkpoint, due by then), or every source closed (the last one taken).
        if not ckpt._count or ckpt._inflight or not ckpt._open or self.failure is not None:
            return
        if ckpt._clock.now() < ckpt._due:  # one was taken since this was armed
            self.arm()
            return
        ckpt._timed = True  # not written if an element comes in meanwhile (see its _take)
        try:
            pending = ckpt.save()
        except BaseException as e:  # raised from the checkpointer's next call
            ckpt._timed = False
            self.failure = e
            return
        if pending is not None:
            asyncio.ensure_future(pending).add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.failure = task.exception()
