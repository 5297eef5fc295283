"""The event loop thread streamz code expects where no loop runs.

streamz starts an event loop in a daemon thread whenever a node wants one
and none is running, so ``Stream.from_tcp(9999).start()``,
``from_periodic``, ``partition(timeout=)``, ``delay`` and ``timed_window``
work in a plain script. streams does the same, and only there: the thread is
started lazily, by the first timer armed or server started with no loop
running in the calling thread, logged once on the ``streams`` logger, and
shared by everything after. Synchronous operators never start it, nor does
code already running on a loop (that loop is used).

Callbacks then run on that thread while the script's own thread emits: as
in streamz, a node fed from both must be fed with care (emit from one
thread, or run the script on a loop).

Examples
--------
>>> import threading
>>> from streams.loop_thread import call_soon, loop_thread
>>> done = threading.Event()
>>> _ = call_soon(done.set)
>>> done.wait(10)
True
>>> loop_thread().is_running()
True
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["asyncio_loop_running", "call_in_loop_thread", "call_soon", "io_loop", "loop_thread",
           "node_loop", "running_io_loop", "stop_loop_thread"]

logger = logging.getLogger("streams")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_io_loop: Any = None
_ready = threading.Event()  # set once the thread has made its IOLoop
_logged = False


def loop_thread() -> asyncio.AbstractEventLoop:
    """The loop of the shared daemon thread, started on first use."""
    global _loop, _thread, _logged
    with _lock:
        if _loop is None or _loop.is_closed() or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            _ready.clear()

            def run() -> None:
                global _io_loop
                # Imported by the thread: the caller, who may have just started a
                # window's timeout, must not wait for it.
                from tornado.ioloop import IOLoop

                asyncio.set_event_loop(loop)
                _io_loop = IOLoop.current()  # Tornado's view of this loop (node.loop)
                _ready.set()
                loop.run_forever()

            thread = threading.Thread(target=run, name="streams-loop", daemon=True)
            thread.start()
            # No waiting for the thread: call_soon_threadsafe queues until it runs.
            _loop, _thread = loop, thread
            if not _logged:
                _logged = True
                logger.info("started an event loop in a daemon thread (streams-loop): a timer "
                            "or a source needed one and none was running")
        return _loop


def io_loop() -> Any:
    """The Tornado ``IOLoop`` of the loop thread (streamz's ``node.loop``)."""
    loop_thread()
    _ready.wait()
    return _io_loop


def running_io_loop() -> Any:
    """The Tornado ``IOLoop`` of the loop running in this thread, or None."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return None
    from tornado.ioloop import IOLoop

    return IOLoop.current()


def asyncio_loop_running() -> bool:
    """Whether an asyncio loop runs in the calling thread (work must then not block it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def node_loop(ensure_io_loop: bool) -> Any:
    """The loop of a new node that keeps time (has a clock) or was asked to ensure one.

    As streamz: the running loop; with none running, ``ensure_io_loop=True``
    starts the shared loop thread's, else there is none (None).
    """
    loop = running_io_loop()
    if loop is None and ensure_io_loop:
        loop = io_loop()
    return loop


def in_loop_thread() -> bool:
    """Whether the caller runs on the loop thread."""
    return _thread is not None and threading.current_thread() is _thread


def call_soon(callback: Callable[..., Any], *args: Any) -> asyncio.Handle:
    """Run ``callback(*args)`` on the loop thread, soon (from any thread)."""
    return loop_thread().call_soon_threadsafe(callback, *args)


def call_in_loop_thread(func: Callable[[], Any]) -> Any:
    """Run ``func()`` on the loop thread and return its result (waits for it)."""
    if in_loop_thread():
        return func()

    async def call() -> Any:
        return func()

    return asyncio.run_coroutine_threadsafe(call(), loop_thread()).result()


def start_task(coro: Coroutine[Any, Any, Any],
               loop: Any = None) -> concurrent.futures.Future[Any]:
    """Run ``coro`` as a task of ``loop`` (a Tornado IOLoop), else of the loop thread.

    Returns a concurrent future.
    """
    target = loop.asyncio_loop if loop is not None else loop_thread()
    return asyncio.run_coroutine_threadsafe(coro, target)


def stop_loop_thread() -> None:
    """Stop the loop thread if it runs (the next timer starts a new one)."""
    global _loop, _thread, _io_loop
    with _lock:
        loop, thread = _loop, _thread
        _loop = _thread = _io_loop = None
    if loop is not None and thread is not None and thread.is_alive():
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():
            loop.close()
