# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""Results of finished tasks, fetched in the background as they finish, and checked."""

from __future__ import annotations

import asyncio
from typing import Any

from distributed import Future, as_completed

from streams.carried_errors import StateNotPickled

__all__ = ["BatchNotSent", "DaskTaskError", "FetchFailed", "Fetcher", "checked"]


class BatchNotSent(TypeError):
    """A batch for the workers that could not be pickled: not sent, its elements not processed.

    The batches before and after it go on (a TypeError, as pickle's own).
    """


class DaskTaskError(RuntimeError):
    """A Dask task itself failed (not a user function: those follow node policies).

    For instance a function that pickles here but cannot be unpickled on the
    workers (its module is not installed there), or a task that killed its
    worker too often. The elements of that task's batch were not processed.
    """


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


def checked(label: str, future: Future, result: Any) -> Any:
    """A fetched result of ``label``'s task, or the :class:`DaskTaskError` it met."""
    if isinstance(result, FetchFailed):
        raise _task_failed(label, result.exc, "its result could not be sent back: it holds "
                           "something that does not pickle (a lock, a file, a "
                           "generator...); map elements to plain data before "
                           "gather()") from result.exc
    if future.status == "error":
        _, exc, tb = result
        raise _task_failed(label, exc) from exc.with_traceback(tb)
    if future.status == "cancelled":
        # The client closed, or someone cancelled the task, under the stream.
        exc = result if isinstance(result, BaseException) else None
        raise _task_failed(label, exc or RuntimeError("cancelled"),
                           "the task was cancelled (was the client closed "
                           "while elements were in flight?)")
    return result


def _task_failed(label: str, exc: BaseException, why: str | None = None) -> DaskTaskError:
    if isinstance(exc, StateNotPickled):
        return DaskTaskError(f"a Dask task of {label} failed: {exc}")
    if why is None:
        why = ("errors of user functions go to their node's error policy; this is the "
               "task itself, e.g. a function that cannot be unpickled on the workers")
    return DaskTaskError(
        f"a Dask task of {label} failed, so the elements of its batch were not "
        f"processed: {type(exc).__name__}: {exc} ({why})")
