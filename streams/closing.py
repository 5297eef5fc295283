"""The end of a node: ``close()`` travelling down the graph, and ``destroy()``.

``close()`` flushes what each node holds (windows, partitions, buffers),
then tells every downstream that no more elements will come. A node closes
once all its upstreams have, and after any upstream still draining on the
loop has finished. ``destroy()`` cuts a node out of the graph for good.

The methods of :class:`~streams.core.Stream` call these functions; they are
kept here so that the node's module holds the node's protocol only.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from .errors import StreamClosedError
from .fusion import invalidate
from .pending import DONE, emit_each, settle

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["aclose", "close", "close_downstreams", "destroy", "on_close", "remove_upstream"]


def close(node: Stream[Any]) -> Any:
    """``node.close()``: end the stream at ``node``, after the work it has queued."""
    __tracebackhide__ = True  # pytest, IPython: show the user's frames
    from .backlog import Backlog

    backlog = Backlog.of(node)
    if backlog is not None:
        # Elements emitted earlier are still running on the loop: close
        # after them, or windows would flush before those elements arrive.
        return backlog.defer(lambda: node._on_close(None))
    pending = node._on_close(None)
    if pending is None:
        return DONE if node.asynchronous else None
    if node.asynchronous:
        return pending
    return settle(pending, node)


async def aclose(node: Stream[Any]) -> None:
    """``await node.aclose()``: close, and wait for all work in flight to finish."""
    from .backlog import Backlog

    backlog = Backlog.of(node)
    if backlog is not None:
        await backlog.defer(lambda: node._on_close(None))
        return
    pending = node._on_close(None)
    if pending is not None:
        await pending


def on_close(node: Stream[Any], who: Stream[Any] | None) -> Any:
    """``node._on_close(who)``: end-of-stream from ``who``; close once every upstream has."""
    if node._closed:
        return None
    # An upstream still flushing (a buffer draining on the loop) is not
    # done: it closes this node once it is (see _close_after).
    if who is not None and any(
        not u._closed or u._push != u._push_closed for u in node.upstreams if u is not who
    ):
        return None
    node._closed = True
    invalidate(node)  # compiled code upstream must stop at this node
    try:
        flushed = node._flush()
    except Exception:
        node._push = node._push_closed
        node._close_downstreams()  # the other branches still end
        raise
    if flushed is None:
        node._push = node._push_closed
        return node._close_downstreams()
    return _close_after(node, flushed)


async def _close_after(node: Stream[Any], flushed: Awaitable[Any]) -> None:
    await flushed
    node._push = node._push_closed
    pending = node._close_downstreams()
    if pending is not None:
        await pending


def close_downstreams(node: Stream[Any]) -> Any:
    """Close every downstream of ``node`` (and its error stream).

    A failure in one branch does not leave the others open: the first error
    is re-raised once all have been closed.
    """
    targets = list(node.downstreams)
    if node._errors is not None:
        targets.append(node._errors)
    return emit_each(lambda d: d._on_close(node), targets)


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
    """
    if streams is not None:
        for u in list(streams):
            u.disconnect(node)
        return
    invalidate(node)
    for u in list(node.upstreams):
        u.downstreams.remove(node)
    node.upstreams.clear()
    for d in list(node.downstreams):
        # As in disconnect(): nodes with per-upstream state (zip's buffers, a
        # Jupyter live view that must stop) learn that this upstream is gone.
        d._remove_upstream(node)
    node.downstreams.clear()
    node._closed = True
    # A function, not a bound method: a destroyed node is in no reference
    # cycle, so it is freed as soon as the user drops it (streamz's test).
    message = f"{node._label()} was destroyed; create a new stream to emit into"

    def push_destroyed(x: Any) -> Any:
        raise StreamClosedError(message)

    node._push = push_destroyed
