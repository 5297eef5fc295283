"""Pending work: what ``update`` and ``_emit`` return when something still runs.

``None`` means every downstream step finished synchronously; anything else
is an awaitable that resolves when it has. These helpers combine and finish
such results without costing the synchronous path anything.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from .in_flight import InFlight, in_flight_of

if TYPE_CHECKING:
    from .core import Stream

logger = logging.getLogger("streams")

__all__ = ["DONE", "ELEMENT_TASKS", "Failing", "as_future", "asynchronous_of", "done",
           "element_task", "emit_each", "failing_after", "finish_emit", "gather_branches",
           "gather_pending", "settle", "until_done"]


class _Done:
    """An awaitable that is already complete (``await source.emit(x)``)."""

    __slots__ = ()

    def __await__(self) -> Any:
        return None
        yield  # pragma: no cover - makes this a generator


DONE = _Done()

#: The resolved Future :func:`done` hands out, for the loop it was made on.
#: One is enough: a done Future can be awaited any number of times.
_done_future: asyncio.Future[None] | None = None


def done() -> Any:
    """What an asynchronous ``emit`` returns once all its work has finished.

    On a running loop, an already resolved Future of that loop, as streamz's
    ``emit`` returns: Tornado's ``yield`` goes on at once with a done Future,
    where it would wrap any other awaitable in a Task and give the loop a
    turn (workers such as ``buffer``'s would then run between two emits
    that streamz runs back to back). With no loop running, :data:`DONE`.
    """
    global _done_future
    loop = asyncio._get_running_loop()
    if loop is None:
        return DONE
    fut = _done_future
    if fut is None or fut.get_loop() is not loop:
        fut = loop.create_future()
        fut.set_result(None)
        _done_future = fut
    return fut


def gather_pending(results: list[Any], together: bool = False) -> Any:
    """Combine the results of several ``update`` calls into one or None.

    Work of which a part is :class:`Failing` is :class:`Failing` as a whole.
    The parts run one after the other (successive elements' work: ``close()``
    sending what a node held), or ``together`` (see :func:`gather_branches`).
    """
    pending = [r for r in results if r is not None]
    if not pending:
        return None
    if len(pending) == 1:
        return pending[0]
    if any(isinstance(p, Failing) for p in pending):
        return Failing(pending)
    return _all(pending, together=together)


def gather_branches(results: list[Any]) -> Any:
    """As :func:`gather_pending`, for the branches one element went down: run together.

    A node's downstreams get the same element; their pending work (each
    branch's coroutine sink) runs concurrently, as in streamz (whose
    ``emit`` waits for the branches' futures together): ``await emit``
    takes the slowest branch's time, not their sum.
    """
    return gather_pending(results, together=True)


def emit_each(emit: Callable[[Any], Any], items: Iterable[Any],
              error: BaseException | None = None) -> Any:
    """``emit(x)`` for every item, even after one fails downstream; their pending work.

    For ``close()``, which has no later time to send what is left (and the
    outputs of expired keys), and a join's pairs of one element: the first
    failure is raised once every item went (nothing held is lost). Where
    other items' work is still pending then (a coroutine sink's), which
    left unawaited would never run, that work is returned, raising the
    first failure once it is done: the
    caller finishes it as any pending work (an ``await``, or a synchronous
    ``close()`` running it to the end; on a running loop, scheduled, its
    failure logged). ``error``: a failure met before, raised first.

    >>> sent = []
    >>> def emit(x):
    ...     if x == 2:
    ...         raise ValueError("no 2")
    ...     sent.append(x)
    >>> emit_each(emit, [1, 2, 3])
    Traceback (most recent call last):
    ValueError: no 2
    >>> sent
    [1, 3]
    """
    pending = []
    for x in items:
        try:
            pending.append(emit(x))
        except Exception as e:
            error = _kept_first(error, e, "another failure")
    if error is None:
        return gather_pending(pending)
    return failing_after(pending, error)


def failing_after(pending: list[Any], error: BaseException) -> Any:
    """``error``, raised once ``pending``'s work is done; at once if none is pending.

    What a step returns that met ``error`` after other work of the same
    element had started (a coroutine sink's): left unawaited, that work
    would never run. The first failure is raised, after all of it. A
    source counts no element whose work failed (contract 9: a restart
    reads it again). A ``RecursionError`` (the graph loops) is raised at
    once: nothing more can run on that stack.

    >>> import asyncio
    >>> ran = []
    >>> async def sink():
    ...     ran.append(1)
    >>> async def main():
    ...     await failing_after([None, [sink()]], ValueError("first"))
    >>> asyncio.run(main())
    Traceback (most recent call last):
    ValueError: first
    >>> ran
    [1]
    """
    __tracebackhide__ = True  # pytest, IPython: show the user's frames
    waiting: list[Any] = []
    for p in pending:  # a streamz-style update returns a list
        for q in p if isinstance(p, list) else (p,):
            if q is not None and q is not DONE:
                waiting.append(q)
    if not waiting or isinstance(error, RecursionError):
        raise error
    return Failing(waiting, error)


class Failing:
    """Work still to run for an element that failed: awaited, it runs, then raises."""

    __slots__ = ("_work",)

    def __init__(self, pending: list[Awaitable[Any]], error: BaseException | None = None) -> None:
        self._work = _all(pending, error)  # error: met before these ran, else one of theirs

    def __await__(self) -> Any:
        return self._work.__await__()


async def _all(pending: list[Awaitable[Any]], error: BaseException | None = None,
               together: bool = False) -> None:
    # Every one is awaited even after one fails (a coroutine left unawaited
    # would never run: another branch's element lost); the first failure
    # (``error``: one met before these ran) is raised once all are done.
    # ``together``: all started first, each in a Task (branches; see gather_branches).
    if together:
        pending = [element_task(p) for p in pending]
    for i, p in enumerate(pending):
        try:
            await p
        except Exception as e:
            error = _kept_first(error, e, "another failure of the same work")
        except BaseException:  # cancelled (or interrupted): the branches started go too
            for rest in pending[i + 1:] if together else ():
                rest.cancel()  # type: ignore[attr-defined]
            raise
    if error is not None:
        raise error


#: The Tasks the library starts for an element's work (a branch, what ``emit``
#: hands out): a source's run counts them as its own (see streams.sources.base).
ELEMENT_TASKS: weakref.WeakSet[asyncio.Future[Any]] = weakref.WeakSet()


def element_task(work: Awaitable[Any]) -> asyncio.Future[Any]:
    """``work`` in a Task of its own, known as an element's (:data:`ELEMENT_TASKS`)."""
    task = asyncio.ensure_future(work)
    ELEMENT_TASKS.add(task)
    return task


def _kept_first(error: BaseException | None, e: BaseException, what: str) -> BaseException:
    """The failure to raise: ``error`` if one came first, else ``e``; a later one is logged."""
    if error is None:
        return e
    logger.error("%s, after the one raised: %s", what, e, exc_info=e)  # one is raised
    return error


def settle(pending: Awaitable[Any], node: Stream[Any]) -> Any:
    """Finish the pending work of a synchronous ``emit``/``close``: see ``streams.backlog``."""
    from .backlog import settle as settle_on_loop

    return settle_on_loop(pending, node)


def as_future(pending: Any, node: Stream[Any] | None = None) -> Any:
    """What an asynchronous ``emit`` into ``node`` returns when work is still running.

    On a running loop, a Future: the work goes on even if nobody awaits it,
    and it can be awaited any number of times, as streamz's ``emit`` result
    can (issue 15). With no loop, the awaitable as is.

    Work that is a Future of the running loop already (``buffer``'s room,
    ``rate_limit``'s turn: that node's close waits for it) is returned as it
    is; other work runs in a Task of its own, with its own context, as
    ``asyncio.timeout()`` and ``current_task()`` in a coroutine sink need.
    That Task costs an element whose sink awaits one call in 100 about 40x a
    plain loop's ``await sink(x)`` (``benchmarks/asyncemit.py``). Running the
    work at once up to its first wait, in the emitting task, cut that to 6x
    but was dropped: a sink's ``asyncio.timeout()`` then cancelled the
    producer, its context variables became the producer's, and a Task
    cancelled before its first step never reached the work already started.

    Until it ends, the Task is ``node``'s :class:`InFlight` work: closing
    ``node`` waits for it, and raises its failure if nobody read it from the
    Future. A producer that stops waiting (``asyncio.wait_for`` timing out,
    its task cancelled) cancels the Future it awaits: the work's own Task is
    not that Future, so the element still goes through, as in streamz (whose
    ``emit`` hands out a Future of its own); a failure it meets then, which
    nobody awaits, is logged, and raised at close.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return pending
    if isinstance(pending, asyncio.Future) and pending.get_loop() is loop:
        return pending  # a Future of this loop as it is
    handed = loop.create_future()
    work = None
    if node is not None:
        global _last
        ref, work = _last  # the node emitted into before, most often: no mapping look-up
        if ref() is not node:
            work = in_flight_of(node)
            _last = (weakref.ref(node), work)
    task = loop.create_task(_work(pending, handed, work))
    ELEMENT_TASKS.add(task)
    if work is not None and not task.done():  # done: an eager task factory ran it all
        work.tasks[handed] = task
    return handed


async def _work(pending: Awaitable[Any], handed: asyncio.Future[None],
                work: InFlight | None) -> None:
    """Run ``pending``, its outcome going to ``handed``, the Future ``emit`` handed out.

    Set from inside the work's Task, not by a callback when it ends: the
    producer then wakes as soon as it would on the Task itself (a callback
    added one more turn of the loop per element: 30% of a tight ``await
    emit`` loop's time). The Task leaves ``work`` (its node's) the same way.
    """
    try:
        await pending
    except asyncio.CancelledError:
        if not handed.done():
            handed.cancel()
        raise
    except (KeyboardInterrupt, SystemExit) as e:  # the loop's to stop on, not a failure
        if not handed.done():
            handed.set_exception(e)
        raise
    except BaseException as e:
        if not handed.done():
            handed.set_exception(e)
            if work is not None:  # raised at close unless someone reads it from ``handed``
                work.failed(e, handed)
            return
        # The producer stopped waiting: nobody else will say so.
        logger.error("an element's work failed after its emit was no longer awaited: %s",
                     e, exc_info=e)
        if work is not None:
            work.failed(e, None, logged=True)
        return
    finally:
        if work is not None:
            work.tasks.pop(handed, None)
    if not handed.done():
        handed.set_result(None)


#: The last node :func:`as_future` was given (weakly) and its :class:`InFlight`.
_last: tuple[Callable[[], Stream[Any] | None], InFlight | None] = (lambda: None, None)



def finish_emit(node: Stream[Any], pending: Any, asynchronous: bool) -> Any:
    """What ``node.emit`` returns when work is pending (off the fast path)."""
    __tracebackhide__ = True  # pytest, IPython: show the user's frames
    if isinstance(pending, list):  # a streamz-style update returns a list
        pending = gather_pending(pending)
        if pending is None:
            return done() if asynchronous or node.asynchronous else None
    if asynchronous or node.asynchronous:
        return as_future(pending, node)
    return settle(pending, node)


def asynchronous_of(node: Stream[Any], asynchronous: bool | None) -> bool:
    """Whether ``node`` is asynchronous: as given, else as any of its upstreams.

    As in streamz, one graph is asynchronous or not, said once: a node given
    the opposite of what an upstream was given is refused.
    """
    if asynchronous not in (None, True, False):
        raise TypeError(f"{type(node).__name__}: asynchronous must be True, False or "
                        f"None, got {asynchronous!r}")
    if asynchronous is None:
        return any(u.asynchronous for u in node.upstreams)
    for u in node.upstreams:
        if u._asynchronous_given is not None and u._asynchronous_given != asynchronous:
            raise ValueError(
                f"{type(node).__name__}: asynchronous={asynchronous} below "
                f"{u._label()}, created with asynchronous={u._asynchronous_given}; "
                "a stream has both asynchronous and synchronous elements")
    return asynchronous


async def until_done(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, whatever loop it belongs to; never raise its failure.

    Waiting must not re-raise the failure in every producer: whoever owns
    the future reports it once. A future of another loop (a timer's work on
    the loop thread, waited for by a synchronous ``emit`` on its private
    loop) is waited for thread-safely: its own loop relays the completion
    through a :class:`concurrent.futures.Future`, which wakes this loop.

    >>> import asyncio
    >>> async def main():
    ...     failing = asyncio.ensure_future(asyncio.sleep(0, "x"))
    ...     await until_done(failing)
    ...     return failing.result()
    >>> asyncio.run(main())
    'x'
    """
    if future.done():
        return
    loop = asyncio.get_running_loop()
    owner = future.get_loop()
    if owner is loop:
        await asyncio.wait((future,))
        return
    # Done-callbacks run on the future's own loop, and asyncio futures are
    # not thread-safe: attach there, and relay through a thread-safe future
    # whose wrapper wakes this loop (call_soon_threadsafe).
    relay: concurrent.futures.Future[None] = concurrent.futures.Future()

    def finished(_: Any) -> None:
        with contextlib.suppress(concurrent.futures.InvalidStateError):  # we stopped waiting
            relay.set_result(None)

    try:
        owner.call_soon_threadsafe(future.add_done_callback, finished)
    except RuntimeError:  # its loop is closed: the future will never finish
        return
    await asyncio.wrap_future(relay, loop=loop)
