"""``Stream.from_periodic``: call a function every ``poll_interval`` seconds."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..clock import get_clock
from ..core import Stream
from ..operators._checks import check_callable
from ..operators.durations import check_interval
from .base import Source

__all__ = ["FromPeriodic"]


@Stream.register_api(staticmethod)
class FromPeriodic(Source[Any]):
    """Emit ``callback()`` every ``poll_interval`` seconds, on the running loop.

    The next call waits until downstream has finished with the previous
    result (backpressure), then for ``poll_interval``; a coroutine function
    is awaited. ``stop()`` ends the calls; the stream stays open until
    ``close()``. A callback that raises goes to the node's error policy.

    Parameters
    ----------
    callback : callable
        Called with no arguments.
    poll_interval : float or str
        Seconds between calls.
    start : bool
        Start right away (needs a running loop).

    Examples
    --------
    >>> import asyncio, itertools
    >>> from streams import Stream, VirtualClock, use_clock
    >>> counter = itertools.count()
    >>> with use_clock(VirtualClock()) as clock:
    ...     source = Stream.from_periodic(lambda: next(counter), poll_interval=1.0)
    >>> L = source.sink_to_list()
    >>> async def main():
    ...     source.start()
    ...     await clock.advance_async(2.5)
    ...     source.stop()
    >>> asyncio.run(main())
    >>> L
    [0, 1, 2]
    """

    __slots__ = ("_clock", "callback", "poll_interval")
    _operator = "from_periodic"
    _params = ("callback", "poll_interval")
    _needs_loop = True

    def __init__(self, callback: Callable[[], Any], poll_interval: float | str = 0.1,
                 start: bool = False, **kwargs: Any) -> None:
        check_callable("from_periodic", callback, "a function of no arguments as its first "
                       "argument", "time.time, poll_interval=1")
        self.callback = callback
        self.poll_interval = check_interval("from_periodic", poll_interval, "poll_interval")
        self._clock = get_clock()
        super().__init__(start=start, **kwargs)

    def _run_sync(self) -> None:
        self.stopped = True
        raise RuntimeError("from_periodic() runs on an event loop: call start() inside a "
                           "running loop (asyncio.run, Tornado, Jupyter)")

    async def _run_async(self) -> None:
        while not self.stopped:
            try:
                x = self.callback()
                if inspect.isawaitable(x):
                    x = await x
            except Exception as e:
                pending = self._fail(None, e)
            else:
                pending = self._push(x)
            if pending is not None:
                await pending
            if not self.stopped:
                await self._clock.sleep(self.poll_interval)
