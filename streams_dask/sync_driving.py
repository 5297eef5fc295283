"""How a synchronous producer drives the runner: accept, wait, drain.

The client's loop (its own thread, for a synchronous client) fetches
results as tasks finish, so the head result is usually here when needed:
the producer waits for no round trip to a worker unless the bound is
reached. (An asynchronous producer's runner is driven on its loop by
:class:`~streams_dask.async_driver.AsyncDriver`.)
"""

from __future__ import annotations

from typing import Any

from .fetching import BatchNotSent, DaskTaskError
from .replay import Replay

__all__ = ["POLL_EVERY", "DrivesSynchronously"]

#: A synchronous producer looks for finished results every this many elements.
POLL_EVERY = 16


class DrivesSynchronously:
    """The part of the :class:`~streams_dask.runner.Runner` a synchronous producer calls."""

    # Set by the runner (see its __init__).
    pending: list[Any]
    accepted: int
    failed: DaskTaskError | None
    replay: Replay

    def hold_refs(self, metadata: Any, index: int = -1) -> None:
        raise NotImplementedError

    def pump(self) -> None:
        raise NotImplementedError

    def full(self) -> bool:
        raise NotImplementedError

    def poll(self) -> None:
        raise NotImplementedError

    def head(self) -> Any:
        raise NotImplementedError

    def head_ready(self) -> bool:
        raise NotImplementedError

    def submit_close(self) -> list[BaseException]:
        raise NotImplementedError

    def _collect(self, block: bool) -> None:
        raise NotImplementedError

    def _take_fetched(self) -> None:
        raise NotImplementedError

    def accept(self, x: Any, metadata: Any = None) -> None:
        """Take ``x`` from a synchronous producer; return once it may go on.

        Finished results are looked for every :data:`POLL_EVERY` elements
        (looking costs about as much as the rest of the way of an element),
        and at every element while the bound is reached.
        """
        self.pending.append(x)
        if metadata is not None:
            self.hold_refs(metadata)
        self.pump()
        self.accepted += 1
        if not self.accepted % POLL_EVERY or self.full():
            self.poll()
            while self.full():
                self.wait_any()
                self.pump()
            self.pump()

    def wait_any(self) -> None:
        """Block until some task is done, then collect what is done.

        Any task, not only the head: a finished task frees a place on the
        cluster even while its result waits for an earlier one.
        """
        if not self.head_ready():
            self._collect(block=True)
        self._take_fetched()

    def wait_one(self) -> None:
        """Block until the head result is in, then collect what is done."""
        while not self.head_ready():
            self._collect(block=True)
        self._take_fetched()

    def drain(self) -> list[BaseException]:
        """Wait for every task and replay everything (end of stream).

        Errors raised downstream do not stop the drain (that would lose the
        results after them): they are returned, in order.
        """
        errors = self.submit_close()
        while self.head() is not None:
            try:
                self.wait_one()
            except DaskTaskError as e:
                # A stateless stage's failed batch left the queue: the others
                # still come. After a stateful stage's, nothing can.
                errors.append(e)
                if self.failed is not None:
                    break
            except BatchNotSent as e:
                # A stateful stage's round that waited could not be sent
                # (see Runner._start_second): the rounds before it still
                # come, and the end of stream still goes.
                errors.append(e)
            self.replay.run(errors)
        self.replay.run(errors)
        return errors
