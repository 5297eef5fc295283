# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""Where a stateful stage's parts run, and what frees them when those workers are gone.

Each part of a chained stage is pinned, loosely, to a worker of its own
(``workers=[address], allow_other_workers=True``: see
:meth:`~streams_dask.chain.StateChain._place`). While any worker runs, a
loose restriction to a dead address is harmless: the scheduler takes
another. But a task that becomes ready while *no* worker runs (every
worker died at once, and their nannies restart them at new addresses)
goes to the ``no-worker`` state, and when the new workers join,
distributed moves only the ``no-worker`` tasks whose restricted workers
include one that exists: it does not read ``allow_other_workers`` there
(dask/distributed#7346, #8600). The round would wait for the dead
workers for ever, and so would ``emit``.

:class:`FreesStrandedParts`, a scheduler plugin the runner registers,
drops the restriction of such a task of this library's as it enters
``no-worker``: a loosely restricted task gets there only when no worker
at all can run it, so the preference is worth nothing then, and without it
distributed's own scheduling of new workers picks the task up. If the
scheduler will not take the plugin (it refuses pickled code), the parts
are not pinned at all (:func:`register`, logged once): Dask's data locality
alone places them, which may put two parts on one worker, but strands
nothing.

After an anchor, the runner refreshes the addresses parts are pinned to
(:func:`refresh_places`), in the background: rounds after workers were
replaced go to the new ones rather than wherever the scheduler falls back to.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
from distributed import Client
from distributed.diagnostics.plugin import SchedulerPlugin

from .chain import run_link
from .worker import warm

__all__ = ["PINNED_TASKS", "FreesStrandedParts", "places_of", "refresh_places", "register",
           "register_async"]

#: The key prefixes (function names) of the tasks this library pins to a worker.
PINNED_TASKS = (run_link.__name__, warm.__name__)

logger = logging.getLogger("streams_dask")

# The plugin travels by value: a scheduler started without this library
# (``dask scheduler`` on another machine) can still load it. Only what the
# class refers to is pickled: the rest of this module stays on the client.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FreesStrandedParts(SchedulerPlugin):
    """Drops the worker restriction of this library's loosely pinned tasks that reach
    ``no-worker``, so that any worker that joins later runs them.

    Parameters
    ----------
    prefixes : iterable of str
        The key prefixes (task function names) of the tasks to free; other
        clients' tasks are never touched.
    """

    name = "streams_dask-frees-stranded-parts"
    idempotent = True  # one per scheduler, whichever pipeline registered it first

    def __init__(self, prefixes: Iterable[str]) -> None:
        self.prefixes = frozenset(prefixes)
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def transition(self, key: Any, start: str, finish: str, *args: Any,
                   **kwargs: Any) -> None:
        # Called for every transition of every task: the cheap test first.
        if finish != "no-worker" or self.scheduler is None:
            return
        ts = self.scheduler.tasks.get(key)
        if (ts is None or not ts.loose_restrictions or not ts.worker_restrictions
                or ts.prefix.name not in self.prefixes):
            return
        # Loose, yet no worker could take it: none runs. Its restricted
        # workers may be gone for good (their replacements have other
        # addresses), and distributed would wait for them.
        ts.worker_restrictions = None


_warned = False


def _refused(error: BaseException) -> bool:
    global _warned
    if not _warned:
        _warned = True
        logger.warning(
            "streams_dask: the Dask scheduler refused a plugin (%s: %s); a stateful "
            "stage's parts are not pinned to workers of their own (two may share one), "
            "so that a round never waits for a worker that died.", type(error).__name__, error)
    return False


def register(client: Client, prefixes: Iterable[str]) -> bool:
    """Register :class:`FreesStrandedParts` on ``client``'s scheduler (a synchronous client).

    Returns whether it is there: only then may tasks be pinned to workers.
    """
    try:
        client.register_plugin(FreesStrandedParts(prefixes))
    except Exception as e:  # what the scheduler raised loading it, whatever it was
        return _refused(e)
    return True


async def register_async(client: Client, prefixes: Iterable[str]) -> bool:
    """:func:`register`, for an asynchronous client."""
    try:
        await client.register_plugin(FreesStrandedParts(prefixes))
    except Exception as e:
        return _refused(e)
    return True


def places_of(threads: dict[str, int]) -> list[str]:
    """One worker address per thread: part ``i`` prefers the ``i``-th.

    >>> places_of({"tcp://a:1": 2, "tcp://b:2": 1})
    ['tcp://a:1', 'tcp://a:1', 'tcp://b:2']
    """
    return [a for a, n in threads.items() for _ in range(n)]


async def refresh_places(client: Client, chain: Any) -> None:
    """Pin ``chain``'s next parts to the workers running now, if they are others.

    Run on the client's loop (it awaits the scheduler): the parts meanwhile
    keep their older places, which cost placement only, never a result.
    """
    try:
        threads = await client.scheduler.ncores_running()
    except Exception:  # the client is closing: the chain is done with
        logger.debug("streams_dask: could not refresh the workers of a stateful stage",
                     exc_info=True)
        return
    if threads and set(threads) != set(chain.places):
        chain.places = places_of(threads)
