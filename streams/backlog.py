"""Pending work of a *synchronous* emit: run it here, or keep it in order on the loop.

``Stream.emit`` returns what ``update`` returned; on the synchronous API that
pending work (a coroutine sink, a ``map_async``...) must still be finished.
With no loop running it is run to completion on a private loop. With a loop
already running in this thread (Jupyter, a Tornado handler using the
synchronous API) blocking would deadlock, so it is scheduled on that loop,
and :class:`Backlog` keeps later emits of the same source behind it.

Examples
--------
>>> import asyncio
>>> from streams import Stream
>>> async def slow_sink(x):
...     await asyncio.sleep(0.001 * (3 - x))  # later elements finish sooner
...     out.append(x)
>>> out = []
>>> source = Stream()                  # the synchronous API...
>>> _ = source.sink(slow_sink)
>>> async def cell():                  # ...inside a running loop, as in Jupyter
...     futures = [source.emit(i) for i in range(3)]
...     await futures[-1]
>>> asyncio.run(cell())
>>> out
[0, 1, 2]
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .in_flight import in_flight, in_flight_of

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["Backlog", "settle"]

logger = logging.getLogger("streams")


def settle(pending: Awaitable[Any], node: Stream[Any]) -> Any:
    """Finish the work a *synchronous* ``emit``/``close`` on ``node`` left pending.

    With no running loop the work runs to completion here, on a private loop
    (:func:`streams.clock.run_sync`), before ``emit`` returns. With a loop
    already running in this thread (Jupyter, a Tornado handler calling the
    synchronous API), blocking would deadlock, so the work is scheduled on
    that loop and its future returned; see :class:`Backlog` for how later
    emits keep their order behind it.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        from .clock import run_sync

        return run_sync(pending)
    backlog = Backlog.of(node)
    if backlog is not None and pending is backlog.handed:
        return pending  # the push was already deferred behind earlier work
    if backlog is None:
        backlog = Backlog(node, loop)
    return backlog.track(pending)


class Backlog:
    """Keeps synchronous emits in order while earlier ones run on the loop.

    Scheduling each element's pending work as an independent task (what a
    plain ``ensure_future`` does) lets element 2's synchronous steps run
    before element 1's coroutine sink has finished: output out of order, no
    backpressure, and errors surfacing only as "Task exception was never
    retrieved". Instead, while work is pending, the node's ``_push`` is
    replaced by :meth:`push`, which chains each new element behind the
    previous one; the original is put back once the backlog drains, so the
    synchronous path pays nothing. Failures are logged at once (naming the
    node) and do not stop the elements queued behind them. An element's
    failure nobody read from the Future its ``emit`` returned is also kept
    and raised when the node closes, as a timer's failure is (see
    :class:`streams.in_flight.InFlight`): a notebook cell that does not keep
    that Future still hears of it.
    """

    __slots__ = ("handed", "loop", "node", "saved", "tail")

    def __init__(self, node: Stream[Any], loop: asyncio.AbstractEventLoop) -> None:
        self.node = node
        self.loop = loop
        self.saved = node._push
        self.tail: asyncio.Future[Any] | None = None  # the last work's Task
        self.handed: asyncio.Future[Any] | None = None  # the Future handed out for it
        node._push = self.push
        node._interrupted = True  # a compiled loop over the node must queue too

    @staticmethod
    def of(node: Stream[Any]) -> Backlog | None:
        owner = getattr(node._push, "__self__", None)
        return owner if isinstance(owner, Backlog) else None

    def push(self, x: Any) -> asyncio.Future[Any]:
        def step() -> Any:
            if self.node._closed:  # a close() queued ahead of this element
                return self.node._push_closed(x)  # raises StreamClosedError
            return self.saved(x)

        return self.defer(step)

    def defer(self, step: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``step()`` (and await what it returns) after the current tail."""
        previous = self.tail

        async def run() -> None:
            if previous is not None and not previous.done():
                await asyncio.wait((previous,))  # its failure is logged, not ours
            pending = step()
            if pending is not None:
                await pending

        return self.track(run())

    def track(self, work: Awaitable[Any]) -> asyncio.Future[Any]:
        """Run ``work`` in a Task on the loop, the new tail; a Future of its outcome.

        The Future is not the Task: a caller that stops waiting for it
        (``asyncio.wait_for`` timing out) cancels the Future, and the
        element's work goes on, as an asynchronous emit's does
        (:func:`streams.pending.as_future`); a failure it meets then is
        logged, and raised at close.
        """
        handed = self.loop.create_future()
        task = self.loop.create_task(self._run(work, handed))
        self.tail, self.handed = task, handed
        task.add_done_callback(self._done)
        return handed

    async def _run(self, work: Awaitable[Any], handed: asyncio.Future[Any]) -> None:
        try:
            await work
        except asyncio.CancelledError:
            if not handed.done():
                handed.cancel()
            raise
        except Exception as e:
            # Logged and kept here, in the Task: read in a done-callback, the
            # failure would count as heard by whoever holds the Future.
            kept = in_flight(self.node)
            if kept is None or e is not kept.raised:  # a close raising a kept one: told
                logger.error("%s: work scheduled by a synchronous emit failed",
                             self.node._label(), exc_info=e)
            if handed.done():  # its caller stopped waiting: the close raises it
                if not self.node._closed:
                    in_flight_of(self.node).failed(e, None, logged=True)
                return
            handed.set_exception(e)
            if self.node._closed:
                handed.exception()  # logged, and no later close raises it: asyncio need not
            else:  # an element's: its close raises it, unless read from ``handed``
                in_flight_of(self.node).failed(e, handed, logged=True)
            return
        except BaseException as e:  # KeyboardInterrupt, SystemExit: the loop's to stop on
            if not handed.done():
                handed.set_exception(e)
            raise
        if not handed.done():
            handed.set_result(None)

    def _done(self, task: asyncio.Future[Any]) -> None:
        if task is self.tail and self.node._push == self.push:
            self.node._push = self.saved
