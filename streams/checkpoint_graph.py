"""Which nodes of a graph take part in its checkpoints: its sources, and sinks that number writes.

:func:`taking_part` checks the whole graph first (a node whose state lives
elsewhere, a source that keeps no offset or has another Checkpointer) and
only then attaches the sources: a refused graph is left as it was.
:func:`barrier_levels` orders the nodes a checkpoint waits for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._checkpoint_io import CheckpointError
from .graph import walk

if TYPE_CHECKING:
    from .core import Stream
    from .sources.base import Source

__all__ = ["barrier_levels", "taking_part"]


def taking_part(checkpointer: Any, node: Stream[Any], needs_source: bool
                ) -> tuple[list[Source], list[Stream[Any]]]:
    """The sources ``checkpointer`` resumes (now attached to it) and the sinks that number writes.

    ``needs_source``: checkpoints are counted or timed, which only a source can
    drive; a graph without one is refused.
    """
    from .sources.base import Source

    sources: list[Source] = []
    numbering: list[Stream[Any]] = []
    for n in walk(node):
        # A node whose state lives elsewhere, out of step with the
        # checkpoint (Spark-managed state), says why it cannot take part.
        refusal = getattr(n, "_checkpoint_refusal", None)
        if refusal is not None and (why := refusal()):
            raise CheckpointError(why)
        if hasattr(n, "_attach_checkpointer"):
            numbering.append(n)  # a sink that numbers its writes (sink_to_redis)
        if not isinstance(n, Source):
            continue
        if not n._replayable:
            raise CheckpointError(
                f"{n._label()} cannot resume from a checkpoint (it keeps no offset); "
                "checkpoint a pipeline fed by a replayable source")
        if n._checkpointer is not None and n._checkpointer is not checkpointer:
            raise CheckpointError(f"{n._label()} already has a Checkpointer")
        sources.append(n)
    if not sources and needs_source:
        raise CheckpointError(
            f"Checkpointer(): the graph of {node._label()} has no source to resume "
            "(elements given to emit() keep no offset, so no checkpoint would ever be "
            "taken); feed it from a replayable source (Stream.from_iterable, "
            "from_textfile, from_redis...), or pass manual=True and call step() or save() "
            "yourself")
    for s in sources:
        s._checkpointer = checkpointer
    return sources, numbering


def barrier_levels(nodes: list[Stream[Any]]) -> list[list[Stream[Any]]]:
    """The nodes with a barrier among ``nodes``, by how many barriers lead to them.

    A node's barrier sends on what it holds (``buffer``, ``map_async``) or
    writes what it buffered (a sink); what one sends may reach another node
    with a barrier further down, which must then be asked after it. So a
    checkpoint asks each level's barriers together, once the levels above
    have done theirs. A node's level is one more than the deepest of the
    barriers that feed it, through its upstreams or the node whose errors or
    late elements it takes (0: none does); unrelated branches share levels.

    Examples
    --------
    >>> from streams import Stream
    >>> from streams.graph import walk
    >>> source = Stream()
    >>> buffered = source.buffer(2)
    >>> _ = buffered.map_async(lambda x: x).sink_to_list()
    >>> _ = source.map(str).buffer(3)
    >>> [[n._label() for n in level] for level in barrier_levels(walk(source))]
    [['buffer(2)', 'buffer(3)'], ['map_async(<lambda>)']]
    """
    feeds: dict[int, list[Stream[Any]]] = {}  # a node's error or late stream -> the node
    for n in nodes:
        for side in (n._errors, getattr(n, "_late", None)):
            if side is not None:
                feeds.setdefault(id(side), []).append(n)
    deepest: dict[int, int] = {}  # the deepest barrier level at or above a node (-1: none)

    def level_of(n: Stream[Any], visiting: set[int]) -> int:
        key = id(n)
        if key in deepest:
            return deepest[key]
        if key in visiting:
            return -1  # a cycle's way back
        visiting.add(key)
        above = max((level_of(u, visiting) for u in [*n.upstreams, *feeds.get(key, ())]),
                    default=-1)
        visiting.discard(key)
        deepest[key] = above + 1 if _has_barrier(n) else above
        return deepest[key]

    levels: list[list[Stream[Any]]] = []
    for n in nodes:  # in the graph's order within a level
        d = level_of(n, set())
        if _has_barrier(n):
            while len(levels) <= d:
                levels.append([])
            levels[d].append(n)
    return levels


def _has_barrier(n: Stream[Any]) -> bool:
    # A file sink hands its data over with its state instead.
    return hasattr(n, "_barrier") and not hasattr(n, "_checkpoint_state")
