"""The end of a node: ``close()`` travelling down the graph, and ``destroy()``.

``close()`` flushes what each node holds (windows, partitions, buffers),
waits for the work of elements emitted into it without ``await`` (see
:class:`streams.in_flight.InFlight`), then tells every downstream that no
more elements will come. A node closes once all its upstreams have, and
after any upstream still draining on the loop has finished. ``destroy()``
cuts a node out of the graph for good.

The methods of :class:`~streams.core.Stream` call these functions; they are
kept here so that the node's module holds the node's protocol only.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from .errors import StreamClosedError
from .fusion import invalidate
from .in_flight import CLOSED_FROM, InFlight, in_flight
from .pending import DONE, emit_each, failing_after, settle

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["aclose", "close", "close_downstreams", "destroy", "on_close", "remove_upstream"]

logger = logging.getLogger("streams")

#: The close of a node running on a loop, started by ``close()`` or
#: ``aclose()``, until it ends well or an ``aclose()`` has seen it fail. Its
#: steps mark nodes closed before their held elements are flushed:
#: interrupted half-way, it would leave them closed and unflushed, so it runs
#: as a task of its own that a cancelled caller does not stop, and a later
#: close waits for it.
_closing: weakref.WeakKeyDictionary[Stream[Any], asyncio.Future[Any]] = (
    weakref.WeakKeyDictionary())


def _begin(node: Stream[Any], queued: bool) -> Any:
    """Start closing ``node``: its close task on a running loop, else what is pending.

    ``queued``: a synchronous stream's ``close()``, which synchronous emits
    after it must queue behind (see :mod:`streams.backlog`).
    """
    from .backlog import Backlog

    backlog = Backlog.of(node)
    if backlog is not None:
        # Elements emitted earlier are still running on the loop: close
        # after them, or windows would flush before those elements arrive.
        task = backlog.defer(lambda: node._on_close(None))
    else:
        pending = node._on_close(None)
        if pending is None:
            return None
        if queued:
            task = settle(pending, node)  # run here if no loop is running
            if not isinstance(task, asyncio.Future):
                return None
        else:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop running here: the caller runs it
                return pending
            task = asyncio.ensure_future(pending, loop=loop)
            CLOSED_FROM[task] = asyncio.current_task(loop)  # see InFlight.drained
    _closing[node] = task
    task.add_done_callback(lambda t: _ended(node, t))
    return task


def _ended(node: Stream[Any], task: asyncio.Future[Any]) -> None:
    # A failed close stays, for the next aclose() to raise.
    if (task.cancelled() or task.exception() is None) and _closing.get(node) is task:
        del _closing[node]


def close(node: Stream[Any]) -> Any:
    """``node.close()``: end the stream at ``node``, after the work it has queued.

    On a running loop, what is still to do runs as a task, and a Future is
    returned (as ``emit`` does): the stream is closed even if nobody awaits it.
    That includes waiting for the work of elements emitted without ``await``;
    a failure of it that nobody read from ``emit``'s result is raised by the
    close, once every node has closed (see :class:`~streams.in_flight.InFlight`).
    """
    __tracebackhide__ = True  # pytest, IPython: show the user's frames
    task = _closing.get(node)
    if task is None:
        task = _begin(node, queued=not node.asynchronous)
        if task is None:
            return DONE if node.asynchronous else None
    if isinstance(task, asyncio.Future) and node.asynchronous:
        return asyncio.shield(task)  # cancelling the result does not stop the close
    # The synchronous API on a running loop: the task, as streams.backlog
    # returns it (it logs the failure); an asynchronous stream with no loop
    # running: what is pending, for the caller to run.
    return task


async def aclose(node: Stream[Any]) -> None:
    """``await node.aclose()``: close, and wait for all work in flight to finish.

    Work in flight includes elements emitted without ``await``: they go
    through before the nodes below close, and the first failure of theirs
    nobody read from ``emit``'s result is raised here, once all have closed
    (a synchronous emit's on a running loop too). Cancelled (a timeout), it
    leaves the close running: a later ``aclose()`` waits for that close to
    finish and raises what it raised.
    """
    task = _closing.get(node)
    if task is None:
        task = _begin(node, queued=False)
        if task is None:
            return
        if not isinstance(task, asyncio.Future):
            await task
            return
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            task.add_done_callback(lambda t: _log_unheard(node, t))
        raise
    finally:
        if task.done() and _closing.get(node) is task:
            del _closing[node]


def _log_unheard(node: Stream[Any], task: asyncio.Future[Any]) -> None:
    # Its aclose() was cancelled: until another aclose() raises it, the
    # failure is told here.
    if not task.cancelled() and (exc := task.exception()) is not None:
        logger.error("%s: closing failed after its aclose() was cancelled", node._label(),
                     exc_info=exc)


def on_close(node: Stream[Any], who: Stream[Any] | None) -> Any:
    """``node._on_close(who)``: end-of-stream from ``who``; close once every upstream has."""
    if node._closed:
        return None
    # An upstream still flushing (a buffer draining on the loop) is not
    # done: it closes this node once it is (see _close_after).
    if who is not None and any(_open(u) for u in node.upstreams if u is not who):
        return None
    node._closed = True
    invalidate(node)  # compiled code upstream must stop at this node
    try:
        flushed = node._flush()
    except Exception as e:
        node._push = node._push_closed
        return _closed_after_failure(node, e)  # the other branches still end
    if flushed is None:
        node._push = node._push_closed
        return node._close_downstreams()
    return _close_after(node, flushed)


def _open(node: Stream[Any]) -> bool:
    """Whether ``node`` has yet to send its end of stream on (not closed, or flushing).

    A closed node whose downstreams' closing work runs on the loop (the
    synchronous API on a running loop: a :class:`~streams.backlog.Backlog`
    holds its push until that work is done) has sent it: it is not waited for.
    One still waiting for its un-awaited emits' work has not.
    """
    from .backlog import Backlog

    if not node._closed:
        return True
    backlog = Backlog.of(node)
    push = backlog.saved if backlog is not None else node._push
    if push != node._push_closed:
        return True
    work = in_flight(node)
    return work is not None and work.closing


async def _close_after(node: Stream[Any], flushed: Awaitable[Any]) -> None:
    try:
        await flushed
    except Exception as e:  # the node still ends, and what is below it
        node._push = node._push_closed
        await _closed_after_failure(node, e)  # raises e once they have closed
        return
    node._push = node._push_closed
    pending = node._close_downstreams()
    if pending is not None:
        await pending


def _closed_after_failure(node: Stream[Any], error: Exception) -> Any:
    """Close ``node``'s downstreams after its flush failed with ``error``.

    ``error`` is raised once their closing work is done (at once if none is
    pending): left unawaited, that work would never run.
    """
    try:
        pending = node._close_downstreams()
    except Exception as e:
        logger.error("%s: closing what is below it failed too", node._label(), exc_info=e)
        pending = None
    return failing_after([pending], error)


def close_downstreams(node: Stream[Any]) -> Any:
    """Close every downstream of ``node`` (and its error stream).

    First, the work of elements emitted into ``node`` without ``await`` (its
    :class:`~streams.in_flight.InFlight`) is waited for: closed before it
    ends, the nodes below would refuse the rest of those elements. A
    failure in one branch does not leave the others open: the first error
    (one of that work nobody read first) is re-raised once all have been closed.
    """
    targets = list(node.downstreams)
    if node._errors is not None:
        targets.append(node._errors)
    work = in_flight(node)
    if work is None:  # nothing was emitted into it without finishing at once
        return emit_each(lambda d: d._on_close(node), targets)
    if work.tasks:
        return _close_after_work(node, work, targets)
    return emit_each(lambda d: d._on_close(node), targets, work.unread())


async def _close_after_work(node: Stream[Any], work: InFlight, targets: list[Stream[Any]]
                            ) -> None:
    await work.drained()
    pending = emit_each(lambda d: d._on_close(node), targets, work.unread())
    if pending is not None:
        await pending


def remove_upstream(node: Stream[Any], upstream: Stream[Any]) -> None:
    """``node._remove_upstream(upstream)``: forget it; end the stream if it was the open one."""
    node.upstreams.remove(upstream)
    if node.upstreams and not node._closed and all(u._closed for u in node.upstreams):
        # The open upstream it waited for is gone: the stream has ended here.
        pending = node._on_close(None)
        if pending is not None:
            settle(pending, node)


def destroy(node: Stream[Any], streams: list[Stream[Any]] | None = None) -> None:
    """``node.destroy(streams)``: cut ``node`` from its upstreams and downstreams.

    With ``streams``, only disconnect it from those upstreams (as streamz).

    What the node holds (a ``delay``'s elements, a partial ``partition`` or
    window) is dropped, as streamz drops it: ``close()`` is the way to send
    it on. Its timer (any node's ``_timer``) is cancelled, so nothing fires
    into a node cut from the graph.
    """
    segments = [node._segment, *(u._segment for u in node.upstreams)]
    for segment in {id(s): s for s in segments if s is not None}.values():
        segment.check_destroy(node)
    if streams is not None:
        for u in list(streams):
            u.disconnect(node)
        return
    invalidate(node)
    # A timed node's lock (see streams.operators.pacing): its timer may be
    # sending on the loop thread right now, into what is being cut.
    lock: Any = getattr(node, "_lock", None)
    held = lock is not None and _hold(lock)
    try:
        for u in list(node.upstreams):
            u.downstreams.remove(node)
        node.upstreams.clear()
        for d in list(node.downstreams):
            # As in disconnect(): nodes with per-upstream state (zip's buffers, a
            # Jupyter live view that must stop) learn that this upstream is gone.
            d._remove_upstream(node)
        node.downstreams.clear()
        node._closed = True  # a timer that fires now sends nothing, and arms no other
        _cancel_timer(node)
        # A function, not a bound method: a destroyed node is in no reference
        # cycle, so it is freed as soon as the user drops it (streamz's test).
        message = f"{node._label()} was destroyed; create a new stream to emit into"

        def push_destroyed(x: Any) -> Any:
            raise StreamClosedError(message)

        node._push = push_destroyed
    finally:
        if held:
            lock.release()


def _hold(lock: Any) -> bool:
    """Take ``lock``; False, without waiting, if a loop runs here and another thread has it.

    A thread running a loop must not wait (the holder may be waiting for
    that loop). Destroyed without it, the node is still closed before the
    timer next looks at it; only an emission already under way may fail.
    """
    if lock.acquire(False):
        return True
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return bool(lock.acquire())
    return False


def _cancel_timer(node: Stream[Any]) -> None:
    """Cancel ``node``'s timer, if it keeps one in ``_timer`` (the timed operators do).

    Left armed, it would fire into a node cut from the graph: its emission
    fails and is logged as an error, for elements nobody can receive. The
    cancelled handle stays in ``_timer``: a closed node arms no other.
    """
    cancel = getattr(getattr(node, "_timer", None), "cancel", None)
    if cancel is not None:
        cancel()
