# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""Results of finished tasks, fetched in the background as they finish."""

from __future__ import annotations

import asyncio

from distributed import Future, as_completed

__all__ = ["FetchFailed", "Fetcher"]


class FetchFailed:
    """A finished task whose result could not be brought back (it does not pickle)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Fetcher(as_completed):
    """``as_completed(with_results=True)`` that reports a result it cannot fetch.

    Distributed's own lets the error of fetching a result (a result that
    does not pickle on the worker) end its tracking task: the future is
    never reported and whoever waits for it waits for ever. Here the error
    is reported in place of the result.
    """

    async def _track_future(self, future: Future) -> None:
        try:
            await super()._track_future(future)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            with self.lock:
                if future in self.futures:
                    del self.futures[future]
                    self.queue.put_nowait((future, FetchFailed(e)))
                    async with self.condition:
                        self.condition.notify()
                    with self.thread_condition:
                        self.thread_condition.notify()
