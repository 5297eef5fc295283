# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""Results replayed as their tasks finish, for a synchronous producer that has moved on.

:class:`~streams_dask.runner.Runner` takes results at the producer's calls;
with :meth:`DeliversAsDone.deliver_as_done` they are also replayed from
distributed's callback thread as tasks finish, under the runner's
:class:`~streams_dask.delivery_lock.DeliveryLock` (in order, one thread at
a time), as streamz delivers them.
"""

from __future__ import annotations

from typing import Any

from distributed import Future

from .delivery_lock import DeliveryLock
from .fetching import BatchNotSent, DaskTaskError
from .replay import Replay

__all__ = ["DeliversAsDone"]


class DeliversAsDone:
    """The part of the runner that delivers from distributed's callback thread."""

    # Set by the runner (see its __init__).
    lock: DeliveryLock
    as_done: bool
    closed: bool
    broken: bool
    failed: DaskTaskError | None
    fetched: dict[Any, Any]
    replay: Replay
    background_errors: list[BaseException]

    def _collect(self, block: bool) -> None:
        raise NotImplementedError

    def _take_fetched(self) -> None:
        raise NotImplementedError

    def _tracked(self, future: Future) -> bool:
        raise NotImplementedError

    def pump(self) -> None:
        raise NotImplementedError

    def deliver_as_done(self) -> None:
        """Replay results as their tasks finish, even while the producer is idle.

        For a synchronous producer whose ``emit`` returns before its results
        are back (``buffer(n)``, batching asked for): as in streamz, results
        then reach ``gather()`` as tasks finish, from distributed's callback
        thread, under :attr:`lock` (so in order, one thread at a time), or
        from whoever held the lock when they finished.
        """
        self.as_done = True

    def _arm(self, future: Future) -> None:
        future.add_done_callback(self._done)

    def _done(self, future: Future) -> None:
        # distributed's callback thread: the task is done, its result is
        # being fetched (by the fetcher, on the client's loop). That thread
        # never waits for the lock (see DeliveryLock): a held lock leaves
        # ``future`` to the holder.
        if self.lock.try_acquire(future):
            try:
                self._deliver(future)
            finally:
                self.lock.release()

    def _settle(self, missed: list[Future]) -> list[Future]:
        # Callbacks that found the lock held (see DeliveryLock): deliver what
        # is fetched; the futures whose results are on their way call back.
        if self.closed or self.failed is not None:  # the producer's call raises it
            return []
        self._deliver()
        return [f for f in missed if self._tracked(f) and f.key not in self.fetched]

    def _deliver(self, future: Future | None = None) -> None:
        # Under the lock: wait for ``future``'s result if still to take; replay what is fetched.
        try:
            if future is None:
                self._collect(block=False)
            else:
                while (not self.closed and self._tracked(future)
                       and future.key not in self.fetched):
                    self._collect(block=True)
            unsent = None
            try:
                self._take_fetched()  # may start a stateful stage's next round
                self.pump()
            except BatchNotSent as e:
                # A batch that could not be pickled (see Runner._task) is
                # done with and the runner goes on: the close still waits
                # for the batches in flight. Raised after the results
                # before it.
                unsent = e
            self.replay.run(self.background_errors)
            if unsent is not None:
                self.background_errors.append(unsent)
        except Exception as e:  # for the producer's next call
            self.broken = self.broken or not isinstance(e, DaskTaskError)
            self.background_errors.append(e)
