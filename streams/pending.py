"""Pending work: what ``update`` and ``_emit`` return when something still runs.

``None`` means every downstream step finished synchronously; anything else
is an awaitable that resolves when it has. These helpers combine and finish
such results without costing the synchronous path anything.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["DONE", "gather_pending", "settle"]




class _Done:
    """An awaitable that is already complete (``await source.emit(x)``)."""

    __slots__ = ()

    def __await__(self) -> Any:
        return None
        yield  # pragma: no cover - makes this a generator


DONE = _Done()


def gather_pending(results: list[Any]) -> Any:
    """Combine the results of several ``update`` calls into one or None."""
    pending = [r for r in results if r is not None]
    if not pending:
        return None
    if len(pending) == 1:
        return pending[0]
    return _all(pending)


async def _all(pending: list[Awaitable[Any]]) -> None:
    for p in pending:
        await p


def settle(pending: Awaitable[Any], node: Stream[Any]) -> Any:
    """Finish the pending work of a synchronous ``emit``/``close``: see ``streams.backlog``."""
    from .backlog import settle as settle_on_loop

    return settle_on_loop(pending, node)
