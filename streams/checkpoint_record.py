"""A checkpoint's record: the bytes saved, and writing or reading one outside a pipeline.

A checkpoint's *record* (format version 2)::

    {"sequence": 7, "nodes": [...]}\n
    <pickle of a list: one state dict (or None) per node, in walk() order>

The first line is JSON: ``nodes`` lists every node of the graph in
:func:`streams.graph.walk` order as ``{"index", "operator", "name",
"state"}`` (``name`` is the ``stream_name``; ``state`` the names of its
state attributes). That list is the graph's identity: a checkpoint whose
list differs from the running graph's is refused with a message naming the
first node that differs. The file checksums each record.

:func:`write_checkpoint` and :func:`read_checkpoint` write and read one
record in the calling thread; the :class:`~streams.state.Checkpointer` of a
running pipeline encodes its records here too (see :mod:`streams.state`).
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._checkpoint_io import as_key, read_record, write_file
from .core import Stream
from .graph import walk
from .snapshot import GraphSnapshot, _dump_states, _node_state, identities

__all__ = ["read_checkpoint", "write_checkpoint"]


def _encode(nodes: list[Stream[Any]], states: list[Any], sequence: int) -> Callable[[], bytes]:
    """Serialise ``states`` now; return what makes the checkpoint's record (see the module docs).

    The pickle is made at once (the states are live objects); joining it
    to its header is left to whoever writes the file (the background writer).
    """
    payload = _dump_states(nodes, states)
    identity = identities(nodes)

    def record() -> bytes:
        header = {"sequence": sequence, "nodes": identity}
        return b"".join((json.dumps(header).encode(), b"\n", payload))

    return record


def write_checkpoint(directory: str | os.PathLike[str], node: Stream[Any],
                     sequence: int = 0, fsync: bool = True,
                     key: str | bytes | None = None) -> Path:
    """Write a checkpoint of the graph ``node`` belongs to, as a new file; return its path.

    The file is written under a temporary name and renamed over any earlier
    one, so a crash at any point leaves the previous checkpoint or the new
    one. ``fsync`` also makes it survive a power loss (a killed process
    needs no fsync: written data is in the kernel's hands). This writes in
    the calling thread; a :class:`~streams.state.Checkpointer` writes the checkpoints of a
    running pipeline. ``key`` signs it (see :class:`~streams.state.Checkpointer`).
    """
    nodes = walk(node)
    record = _encode(nodes, [_node_state(n) for n in nodes], sequence)()
    return write_file(Path(directory), sequence, record, fsync, None, as_key(key)).path


def read_checkpoint(directory: str | os.PathLike[str],
                    key: str | bytes | None = None) -> GraphSnapshot | None:
    """Read the newest checkpoint in ``directory``; None if there is none.

    Raises :class:`~streams.state.CheckpointError` for a file that is not a checkpoint, of
    another format version, or damaged; with ``key``, for one not signed
    under that key (checked before anything in it is unpickled).
    """
    found = read_record(Path(directory), as_key(key))
    if found is None:
        return None
    sequence, record = found
    end = record.index(b"\n")
    header = json.loads(record[:end])
    states = pickle.loads(record[end + 1:])
    return GraphSnapshot(tuple(header["nodes"]), tuple(states), sequence)
