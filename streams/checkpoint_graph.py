"""Which nodes of a graph take part in its checkpoints: its sources, and sinks that number writes.

:func:`taking_part` checks the whole graph first (a node whose state lives
elsewhere, a source that keeps no offset or has another Checkpointer) and
only then attaches the sources: a refused graph is left as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._checkpoint_io import CheckpointError
from .graph import walk

if TYPE_CHECKING:
    from .core import Stream
    from .sources.base import Source

__all__ = ["taking_part"]


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
