# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""The lock of a synchronous runner, which distributed's callback thread never waits for.

A synchronous runner that delivers results as tasks finish (see
:meth:`~streams_dask.runner.Runner.deliver_as_done`) does so from a done
callback of each task's future. distributed runs those callbacks one after
the other, on one thread for the whole process, and keeps each future
until its callback has run. A callback that waited for the producer's
lock would hold up every callback behind it (other streams' too), and keep
their futures alive, and with them the results the scheduler keeps for
them: a producer that emits without pause seldom lets go of the lock, so
that queue, and the workers' memory, grew for as long as it emitted.

So a callback only *tries* the lock. One that finds it held leaves its
future here, and returns (distributed then drops the future). Whoever
lets go of the lock last settles what was left: it delivers the results
already fetched, and arms a new callback for each future whose result is
still on its way. No finished task is left undelivered, and no thread
waits on distributed's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from distributed import Future

__all__ = ["DeliveryLock"]


class DeliveryLock:
    """A reentrant lock whose last release hands back the deliveries missed meanwhile.

    Parameters
    ----------
    arm : callable
        ``arm(future)``: arms ``future``'s done callback again.
    settle : callable
        ``settle(futures)``, called with the lock held by its last release
        when callbacks found it held: delivers what can be, and returns the
        futures whose callbacks must run again (results still on their way).

    Examples
    --------
    >>> import threading
    >>> armed = []
    >>> lock = DeliveryLock(armed.append, lambda left: [f for f in left if f != "fetched"])
    >>> def callbacks():  # distributed's thread, while the producer holds the lock
    ...     print(lock.try_acquire("running"), lock.try_acquire("fetched"))
    >>> with lock:
    ...     thread = threading.Thread(target=callbacks)
    ...     thread.start()
    ...     thread.join()
    False False
    >>> armed  # once the producer let go: the result still on its way calls back
    ['running']
    """

    __slots__ = ("_arm", "_depth", "_lock", "_missed", "_missed_lock", "_settle", "_work_left",
                 "after_release")

    def __init__(self, arm: Callable[[Future], None],
                 settle: Callable[[list[Future]], list[Future]]) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # changed by the holder only
        self._missed: list[Future] = []
        self._missed_lock = threading.Lock()
        self._arm = arm
        self._settle = settle
        #: Called by the last release, the lock let go, when a thread found it
        #: held in :meth:`acquire_if_free` (a timer's ticks: streams_dask.ticks).
        self.after_release: Callable[[], None] | None = None
        self._work_left = False

    def __enter__(self) -> DeliveryLock:
        self._lock.acquire()
        self._depth += 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def try_acquire(self, future: Future) -> bool:
        """Take the lock for ``future``'s callback, if it is free.

        If not, ``future`` is left to whoever holds it, who arms its callback
        again on letting go. Left *before* trying: a holder looks for what
        was left after it lets go, so nothing slips between the two.
        """
        with self._missed_lock:
            self._missed.append(future)
        if not self._lock.acquire(blocking=False):
            return False
        self._depth += 1
        with self._missed_lock:  # the caller delivers it now: not again on release
            self._missed.remove(future)
        return True

    def acquire_if_free(self) -> bool:
        """Take the lock if no other thread holds it; never wait.

        For a thread that must not wait (a timer on the shared loop thread,
        which the holder may itself be waiting for): whoever holds the lock
        takes over its work instead. Let go with ``release(settle=False)``.
        """
        self._work_left = True  # before trying: the holder looks after it lets go
        if not self._lock.acquire(blocking=False):
            return False  # left to the holder: its last release calls after_release
        self._work_left = False
        self._depth += 1
        return True

    def release(self, settle: bool = True) -> None:
        """Let go of the lock; the last release settles the callbacks missed meanwhile.

        ``settle=False``: arm them again instead (settling delivers results
        downstream on this thread; one that took the lock with
        :meth:`acquire_if_free` leaves that to distributed's callback thread).
        """
        if self._depth > 1:
            self._depth -= 1
            self._lock.release()
            return
        if not settle:
            self._depth = 0
            self._lock.release()
            with self._missed_lock:
                left, self._missed = self._missed, []
            for future in left:
                self._arm(future)
            return
        while True:
            missed: list[Future] = []
            if self._missed:  # read without the lock: a later append is seen below
                with self._missed_lock:
                    missed, self._missed = self._missed, []
            try:
                again = self._settle(missed) if missed else []
            finally:
                self._depth = 0
                self._lock.release()
            for future in again:
                self._arm(future)
            # A callback that found the lock held before this release left
            # its future before trying: it is seen here, or by the next holder.
            if not self._missed or not self._lock.acquire(blocking=False):
                break
            self._depth = 1
        if self._work_left and self.after_release is not None:
            self._work_left = False
            self.after_release()
