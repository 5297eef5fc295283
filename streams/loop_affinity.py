"""A synchronous ``emit`` into a node given a loop runs on that loop, as in streamz.

``Stream(loop=loop)`` (or a node built with ``ensure_io_loop=True``) says
where the graph's work belongs. streamz then runs a synchronous ``emit``
called from another thread on that loop, and waits for it: a Tornado
service whose loop runs in one thread can be fed from a worker thread
(a consumer, a callback) without two threads running the graph at once,
and a node's own code may call ``self.loop.call_later`` (not thread-safe
from other threads). Here too, for nodes given a loop that way, and for
the nodes upstream of them without one (streamz gives them the loop):
their class becomes a subclass whose ``emit`` goes to the loop
(:func:`bind`), so nodes without a loop pay nothing on their ``emit``.

An ``emit`` already on the loop's thread, an asynchronous one (it returns
an awaitable, as streamz's), or one into a loop that is not running (it
could never finish) runs in the caller's thread, as before.

Examples
--------
>>> import threading
>>> from tornado.ioloop import IOLoop
>>> from streams import Stream
>>> from streams.loop_thread import io_loop
>>> loop = io_loop()                      # a loop running in another thread
>>> source = Stream(loop=loop)
>>> threads = source.map(lambda x: threading.current_thread().name).sink_to_list()
>>> source.emit(1)                        # returns once the loop has run it
>>> threads
['streams-loop']
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["bind"]

#: Node class -> its subclass whose emit runs on the node's loop.
_BOUND: dict[type, type] = {}


def bind(node: Stream[Any]) -> None:
    """Make ``node``'s synchronous emits, and those of its upstream nodes without a
    loop, run on ``node.loop`` when called from another thread."""
    stack = [node]
    while stack:
        n = stack.pop()
        if not getattr(type(n), "_emits_on_loop", False):
            n.__class__ = _bound_class(type(n))
        for u in n.upstreams:
            if u.loop is None:
                u.loop = node.loop
                stack.append(u)


def _bound_class(cls: type) -> type:
    bound = _BOUND.get(cls)
    if bound is None:
        emit = cls.emit  # type: ignore[attr-defined]

        def emit_on_loop(self: Any, x: Any, asynchronous: bool = False,
                         metadata: Any = None) -> Any:
            __tracebackhide__ = True  # pytest, IPython: show the user's frames
            loop = getattr(self.loop, "asyncio_loop", self.loop)  # an IOLoop, or asyncio's
            if (asynchronous or self.asynchronous or not isinstance(loop, asyncio.AbstractEventLoop)
                    or not loop.is_running() or asyncio._get_running_loop() is loop):
                return emit(self, x, asynchronous, metadata)

            async def run() -> None:
                await emit(self, x, True, metadata)  # waits for every step, as streamz's

            asyncio.run_coroutine_threadsafe(run(), loop).result()
            return None

        emit_on_loop.__doc__ = emit.__doc__
        bound = type(cls)(cls.__name__, (cls,), {
            "__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__, "emit": emit_on_loop, "_emits_on_loop": True})
        _BOUND[cls] = bound
    return bound
