"""The work of elements emitted without ``await``, kept per node until it ends.

An asynchronous ``emit`` whose work goes on hands out a Future and runs the
work in a Task of its own (:func:`streams.pending.as_future`). Nothing would
tie that Task to the graph: a close could end the nodes below under it (the
element refused, its failure in a Future nobody reads). Each node's
:class:`InFlight` holds those Tasks until they end, and the failures nobody
read from the Futures; closing the node waits for the Tasks and raises the
first unread failure (:func:`streams.closing.close_downstreams`), as a
timer's failure is raised at close.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import Stream

logger = logging.getLogger("streams")

__all__ = ["CLOSED_FROM", "InFlight", "in_flight", "in_flight_of"]


#: The task each close running as a task of its own was started from
#: (``streams.closing``): :meth:`InFlight.drained` does not wait for it.
CLOSED_FROM: weakref.WeakKeyDictionary[asyncio.Future[Any], asyncio.Future[Any] | None] = (
    weakref.WeakKeyDictionary())

#: Failures an :class:`InFlight` keeps unread once their readers had a turn;
#: past it, all but the first are logged (asyncio would log each when collected).
_MAX_UNREAD = 100


class InFlight:
    """The work un-awaited emits into one node started, and the failures nobody read.

    Closing the node waits for :attr:`tasks` before its downstreams end
    (:func:`streams.closing.close_downstreams`): an element emitted without
    ``await`` is never lost. Its failure reaches the user once: from the
    Future ``emit`` returned, if read (awaited) by the time the close runs,
    else raised by the close, as a timer's failure is; so does the failure
    of a synchronous emit's work on a running loop (``streams.backlog``, which
    logs it at once too). Kept by node, weakly (:func:`in_flight`).
    """

    __slots__ = ("_prune_at", "_pruning", "closing", "failures", "raised", "tasks")

    def __init__(self) -> None:
        #: The Tasks running, by the Future ``emit`` handed out; each leaves when done.
        self.tasks: dict[asyncio.Future[Any], asyncio.Future[Any]] = {}
        #: (failure, the Future a producer may read it from or None, logged already)
        self.failures: list[tuple[BaseException, asyncio.Future[Any] | None, bool]] = []
        #: The last failure :meth:`unread` gave a close to raise (logged already).
        self.raised: BaseException | None = None
        #: The node's close waits for :attr:`tasks` (see ``streams.closing._open``).
        self.closing = False
        self._prune_at, self._pruning = 8, False

    def failed(self, error: BaseException, future: asyncio.Future[Any] | None,
               logged: bool = False) -> None:
        """Keep ``error`` for the close, unless read from ``future`` by then."""
        self.failures.append((error, future, logged))
        if len(self.failures) >= self._prune_at and not self._pruning:
            self._pruning = True  # after the readers woken so far have run:
            asyncio.get_running_loop().call_soon(self._prune, len(self.failures))

    def _prune(self, aged: int) -> None:
        self._pruning = False
        failures = self.failures
        n = len(failures)  # in place: another thread's loop may append meanwhile
        old = [f for f in failures[:aged] if _unread(f[1])]
        if len(old) > _MAX_UNREAD:
            for error, future, logged in old[1:]:
                _read(future)
                if not logged:
                    logger.error("an element's work failed (not raised: an earlier failure "
                                 "is kept for close): %s", error, exc_info=error)
            del old[1:]
        failures[:n] = old + [f for f in failures[aged:n] if _unread(f[1])]
        self._prune_at = 2 * len(failures) + 8  # amortised: a prune per doubling

    async def drained(self) -> None:
        """Wait until every Task here has ended, those started meanwhile too.

        Not the Task the close was started from (a sink closing its source
        awaits the close): it ends after it.
        """
        from .pending import until_done  # (pending imports this module)

        loop = asyncio.get_running_loop()
        caller = CLOSED_FROM.get(asyncio.current_task(loop))  # type: ignore[arg-type]
        self.closing = True
        try:
            while running := [(k, t) for k, t in list(self.tasks.items()) if t is not caller]:
                here = [t for _, t in running if t.get_loop() is loop]
                if here:
                    await asyncio.wait(here)
                for _, t in running:
                    if t.get_loop() is not loop:
                        await until_done(t)  # an emit on another thread's loop
                for k, _ in running:  # a Task cancelled before it ran did not leave
                    self.tasks.pop(k, None)
        finally:
            self.closing = False

    def unread(self) -> BaseException | None:
        """The first failure nobody read, now read (the others are logged); None if none."""
        failures, self.failures, self._prune_at = self.failures, [], 8
        first: BaseException | None = None
        for error, future, logged in failures:
            if not _unread(future):
                continue
            _read(future)
            if first is None:
                first = self.raised = error
            elif not logged:
                logger.error("an element's work failed, after the failure raised at close: "
                             "%s", error, exc_info=error)
        return first


def _unread(future: asyncio.Future[Any] | None) -> bool:
    # asyncio's own flag, cleared by await/result()/exception(): its "exception
    # was never retrieved" report when the Future is collected.
    return future is None or future._log_traceback


def _read(future: asyncio.Future[Any] | None) -> None:
    if future is not None and future.done() and not future.cancelled():
        future.exception()  # read: asyncio reports it no more


#: Each node's :class:`InFlight`, once something was emitted into it without finishing.
_IN_FLIGHT: weakref.WeakKeyDictionary[Stream[Any], InFlight] = weakref.WeakKeyDictionary()
def in_flight(node: Stream[Any]) -> InFlight | None:
    """``node``'s :class:`InFlight`, or None if no emit into it left work."""
    return _IN_FLIGHT.get(node)


def in_flight_of(node: Stream[Any]) -> InFlight:
    """``node``'s :class:`InFlight`, made now if it has none."""
    return _IN_FLIGHT.setdefault(node, InFlight())
