"""streamz's protocol for custom sources: a subclass overrides ``_run`` or ``run``.

streams' own sources define ``_run_sync``/``_run_async``; a source written for
streamz overrides ``async def _run(self)`` (one step, called until
``self.stopped``) or ``async def run(self)``, and runs on a loop. See
:class:`streams.Source` for what such a source does here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from ..pending import done

__all__ = ["NO_RUN", "adopt"]

#: The error of a source that defines no run, formatted with its label.
NO_RUN = ("{} does not run: a Source subclass overrides async def _run(self) (one step, "
          "called until self.stopped) or async def run(self), as in streamz")


def adopt(cls: Any, base: Any, in_run: ContextVar[Any]) -> None:
    """Run ``cls``, a subclass of ``base`` (:class:`streams.Source`), as streamz would.

    Only a class written to streamz's protocol changes (it overrides ``run``
    or ``_run``, not streams' ``_run_sync``/``_run_async``): it needs a loop
    (with none running, ``start()`` runs it on the loop thread, as streamz
    does), and its ``emit`` returns an awaitable during a run (``in_run`` is
    set), so ``await self.emit(x)`` works as well as ``self.emit(x)``.
    """
    if (cls._run_async is not base._run_async or cls._run_sync is not base._run_sync
            or (cls.run is base.run and cls._run is base._run)):
        return  # streams' own protocol, or a base class that does not run yet
    if "_needs_loop" not in vars(cls):
        cls._needs_loop = True
    if not getattr(cls.emit, "_awaitable_in_run", False):
        cls.emit = _awaitable_in_run(cls.emit, in_run)


def _awaitable_in_run(emit: Callable[..., Any], in_run: ContextVar[Any]) -> Callable[..., Any]:
    """``emit``, returning an awaitable where it returned None, within a run.

    A synchronous ``emit`` on a running loop returns None once the element
    is through (else a Future of the work left); streamz code awaits it in
    ``_run``. The element has gone through the same way either way.
    """

    @functools.wraps(emit)
    def emit_awaitable_in_run(self: Any, x: Any, asynchronous: bool = False,
                              metadata: Any = None) -> Any:
        __tracebackhide__ = True  # pytest, IPython: show the user's frames
        result = emit(self, x, asynchronous, metadata)
        if result is None and in_run.get() is not None:
            return done()
        return result

    emit_awaitable_in_run._awaitable_in_run = True  # type: ignore[attr-defined]
    return emit_awaitable_in_run
