"""``Stream.from_q``: the items another thread puts into a ``queue.Queue`` (streamz's source)."""

from __future__ import annotations

import asyncio
import queue as queues
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..core import Stream
from ..operators.durations import check_interval
from .base import YIELD_EVERY, Source

__all__ = ["FromQ"]


@Stream.register_api(staticmethod)
class FromQ(Source[Any]):
    """Emit the items put into ``q``, a ``queue.Queue`` other threads fill.

    For code on another thread or event framework (a GUI, a callback
    library) feeding a pipeline. Each item goes through the graph before the
    next is taken (backpressure: a bounded queue makes the producer wait).
    An empty queue is waited on in a thread of the loop's executor, which
    hands over an item as soon as it is put (streamz polls the queue every
    ``sleep_time`` seconds, which here is only how often a stop is seen
    while the queue stays empty). ``stop()`` ends the reading; an item taken
    as it came keeps its place for the next ``start()``. Without a running
    loop, ``start()`` runs it on the shared loop thread, as streamz does.

    Parameters
    ----------
    q : queue.Queue
        Where the items come from (anything with ``get_nowait()`` and
        ``get(block, timeout)``, raising ``queue.Empty``).
    sleep_time : float or str
        At most this many seconds between two looks at ``stop()`` while
        the queue is empty.
    start : bool
        Start right away (needs a running loop).

    Examples
    --------
    >>> import asyncio, queue
    >>> from streams import Stream
    >>> q = queue.Queue()
    >>> source = Stream.from_q(q)
    >>> L = source.sink_to_list()
    >>> async def main():
    ...     for i in range(3):
    ...         q.put(i)
    ...     source.start()
    ...     while len(L) < 3:
    ...         await asyncio.sleep(0)
    ...     source.stop()
    >>> asyncio.run(main())
    >>> L
    [0, 1, 2]
    """

    __slots__ = ("q", "sleep_time")
    _operator = "from_q"
    _params = ("q", "sleep_time")
    _needs_loop = True

    def __init__(self, q: Any, sleep_time: float | str = 0.01, start: bool = False,
                 **kwargs: Any) -> None:
        if not (hasattr(q, "get_nowait") and hasattr(q, "get")):
            raise TypeError(f"from_q() takes a queue.Queue (get and get_nowait), got "
                            f"{type(q).__name__}; for an asyncio.Queue, emit its items "
                            "from a task, or use Stream.from_iterable for a list")
        self.q = q
        self.sleep_time = check_interval("from_q", sleep_time, "sleep_time")
        super().__init__(start=start, **kwargs)

    async def _run_async(self) -> None:
        since_yield = 0
        while not self.stopped:
            if self._unsent is not None:
                (x,), self._unsent = self._unsent, None
            else:
                try:
                    x = self.q.get_nowait()
                except queues.Empty:
                    taken = await self._wait_for_item()
                    if taken is None:
                        continue
                    (x,) = taken
                    if self.stopped:
                        self._unsent = taken  # taken as stop() came: first at the next start
                        return
            pending = self._push(x)
            if pending is not None:
                await pending
                since_yield = 0
            else:
                since_yield += 1
                if since_yield >= YIELD_EVERY:  # a full queue must not hold the loop
                    await asyncio.sleep(0)
                    since_yield = 0

    async def _wait_for_item(self) -> tuple[Any] | None:
        """The next item put, as a 1-tuple, or None after ``sleep_time`` without one.

        The wait runs in an executor thread, which a cancelled run cannot
        stop: an item it takes then is kept for the next ``start()``.
        """
        waiting = _executor().submit(self.q.get, True, self.sleep_time)
        try:
            return (await asyncio.wrap_future(waiting),)
        except queues.Empty:
            return None
        except asyncio.CancelledError:
            waiting.add_done_callback(self._keep_taken)
            raise

    def _keep_taken(self, waiting: Future[Any]) -> None:
        if not waiting.cancelled() and waiting.exception() is None:
            self._unsent = (waiting.result(),)


_waiters: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    """The threads waiting on queues (one per source waiting; made on first use)."""
    global _waiters
    if _waiters is None:
        _waiters = ThreadPoolExecutor(thread_name_prefix="streams-from-q")
    return _waiters
