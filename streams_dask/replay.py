"""Task results replayed on the client, in input order.

What a task returns is a list of events: ``(exit, value)`` for a
``gather()`` node, or a :class:`~streams_dask.worker.Failure` for a node's
error policy. The client pushes each where an in-process run would have
produced it, and releases the references of the elements whose results are
all replayed (see :class:`~streams_dask.held_refs.HeldRefs`). A value of a
stage without state goes with the metadata of the element it came from, as
in-process (:class:`WithMetadata`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, cast

from streams.core import Stream
from streams.pending import settle

from .held_refs import HeldRefs
from .worker import Failure, MarkedResult, StageResult

__all__ = ["Replay", "WithMetadata"]


class WithMetadata:
    """A value for the ``gather()`` node ``index``, with its element's metadata.

    The metadata (streamz's list of dicts, with ``RefCounter`` references)
    never goes to the workers: the client attaches it to the results of
    the element it came with.
    """

    __slots__ = ("index", "metadata", "value")

    def __init__(self, index: int, value: Any, metadata: list[Any]) -> None:
        self.index = index
        self.value = value
        self.metadata = metadata


class Replay:
    """The events taken from finished tasks, and where each goes.

    Parameters
    ----------
    nodes : dict
        Segment nodes by id, to apply their error policy on failures.
    exits : list of Stream
        The ``gather()`` nodes, by exit index.
    refs : HeldRefs
        The references to release once replayed.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> out = source.sink_to_list()
    >>> replay = Replay({}, [source], HeldRefs())
    >>> replay.ready.extend([(0, "a"), (0, "b")])
    >>> replay.run()
    >>> out
    ['a', 'b']
    """

    __slots__ = ("exits", "nodes", "ready", "refs")

    def __init__(self, nodes: dict[int, Stream[Any]], exits: Sequence[Stream[Any]],
                 refs: HeldRefs) -> None:
        self.nodes = nodes
        self.exits = list(exits)
        self.refs = refs
        self.ready: deque[Any] = deque()

    def add(self, result: StageResult | MarkedResult, metadata: list[Any] | None = None) -> None:
        """Take a task's events, to replay.

        ``metadata``: one per element of the task's batch (None where an
        element has none), for a :class:`MarkedResult`; each value then goes
        with its element's, as the stage's nodes (``map``, ``filter``,
        ``flatten``...) pass it on in-process. A failure goes without it
        (a node's error policy takes none).

        >>> from streams import Stream
        >>> source = Stream()
        >>> out = source.sink_to_list()
        >>> replay = Replay({}, [source], HeldRefs())
        >>> result = MarkedResult([(0, "a"), (0, "b"), (0, "c")], None, 0.0, [0, 1, 3])
        >>> replay.add(result, [[{"offset": 1}], None, [{"offset": 3}]])
        >>> [getattr(e, "metadata", None) for e in replay.ready]
        [[{'offset': 1}], None, None]
        """
        if metadata is None:
            self.ready.extend(result.events)
            return
        events, starts, ready = result.events, cast(MarkedResult, result).starts, self.ready
        for start, end, element_metadata in zip(starts, [*starts[1:], len(events)], metadata,
                                                strict=True):
            for event in events[start:end]:
                if element_metadata is not None and type(event) is tuple:
                    event = WithMetadata(event[0], event[1], element_metadata)
                ready.append(event)

    def node_of(self, event: Any) -> Stream[Any]:
        """The node ``event`` goes to."""
        kind = type(event)
        if kind is Failure:
            return self.nodes[event.node_id]
        exit_node: Stream[Any] = self.exits[event.index if kind is WithMetadata else event[0]]
        return exit_node

    def one(self, event: Any) -> Any:
        """Push one event downstream: a value to its ``gather()``, a failure to its node."""
        kind = type(event)
        if kind is not tuple:
            if kind is Failure:
                return self.nodes[event.node_id]._fail(event.element, event.error)
            if kind is WithMetadata:
                return self.exits[event.index]._emit(event.value, event.metadata)
        index, value = event
        return self.exits[index]._emit(value)

    def run(self, errors: list[BaseException] | None = None) -> None:
        """Push the ready events downstream, in order (synchronously).

        An error raised downstream (a node's ``"raise"`` policy) propagates
        at once, the events after it kept for later; with ``errors`` given
        it is appended there and replay goes on.
        """
        ready = self.ready
        while ready:
            try:
                event = ready.popleft()
                pending = self.one(event)
                if pending is not None:
                    # Finished here, or (a loop running in this thread, as in
                    # Jupyter) queued on that loop in order.
                    settle(pending, self.node_of(event))
            except Exception as e:
                if errors is None:
                    raise
                errors.append(e)
        if self.refs:
            self.refs.release()

    async def run_async(self, errors: list[BaseException] | None = None) -> None:
        """Push the ready events downstream, in order, awaiting each (see :meth:`run`)."""
        ready = self.ready
        while ready:
            try:
                pending = self.one(ready.popleft())
                if pending is not None:
                    await pending
            except Exception as e:
                if errors is None:
                    raise
                errors.append(e)
        if self.refs:
            self.refs.release()
