"""Nodes that only show a stream (a Jupyter live view, a live plot) in checkpoints.

Their class sets ``_checkpointed = False``: they are no part of the
pipeline's identity or state (:mod:`streams.snapshot`). Their entry in a
record is marked and skipped on restore, so showing a stream or not never
changes whether a checkpoint restores; records made before the mark are
read by the entries' operators.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["checkpointed", "display_identity", "pipeline_entries"]


#: The operators of display-only nodes in records made before their entries
#: were marked ``"checkpointed": False`` (the record of one numbers it among the others).
_DISPLAY_OPERATORS = frozenset({"live_view", "sink_to_plot"})


def checkpointed(nodes: list[Stream[Any]]) -> list[Stream[Any]]:
    """The nodes of ``nodes`` that are part of the pipeline's checkpoints.

    Not those that only show the stream (a live view, a live plot: their
    class sets ``_checkpointed = False``): showing a stream or not leaves
    its checkpoints as they are.
    """
    return [n for n in nodes if getattr(type(n), "_checkpointed", True)]


def display_identity(node: Stream[Any]) -> dict[str, Any]:
    return {"index": None, "operator": node._operator, "name": node.stream_name,
            "state": [], "checkpointed": False}


def _is_display_entry(entry: dict[str, Any]) -> bool:
    """Whether a recorded entry is a display-only node's (marked, or by its operator if older)."""
    if "checkpointed" in entry:
        return entry["checkpointed"] is False
    return entry.get("operator") in _DISPLAY_OPERATORS


def pipeline_entries(entries: tuple[dict[str, Any], ...] | list[Any]
                     ) -> tuple[list[int], list[dict[str, Any]]]:
    """The positions in ``entries`` of the checkpointed nodes' entries, and those entries.

    Older records numbered display-only nodes among the others: the entries
    returned number only the checkpointed nodes (``index``, ``upstreams``),
    as :func:`identities` does now.

    >>> old = [{"index": 0, "operator": "stream"}, {"index": 1, "operator": "live_view"},
    ...        {"index": 2, "operator": "zip", "upstreams": [0, 2]}]
    >>> pipeline_entries(old)
    ([0, 2], [{'index': 0, 'operator': 'stream'}, {'index': 1, 'operator': 'zip', \
'upstreams': [0, 1]}])
    """
    positions = [i for i, e in enumerate(entries)
                 if not (isinstance(e, dict) and _is_display_entry(e))]
    if len(positions) == len(entries):
        return positions, list(entries)
    renumber = {entries[p].get("index", p): i for i, p in enumerate(positions)}
    kept = []
    for i, p in enumerate(positions):
        entry = {**entries[p], "index": i}
        if isinstance(entry.get("upstreams"), list):
            entry["upstreams"] = [renumber.get(u) for u in entry["upstreams"]]
        kept.append(entry)
    return positions, kept
