"""The writer names of sinks that number their writes, for a pipeline starting without a checkpoint.

A sink that numbers its writes (``sink_to_redis``) records on the server,
under a writer name, the number of the last element it wrote, and skips
what the server already has (see :mod:`streams.sinks.redis`). A pipeline
restored from a checkpoint takes its names from the checkpoint. One that
starts without a checkpoint draws new names and writes them, before its
first write, to ``<directory>/writers.json`` together with the identity of
its graph and input, as a checkpoint records them
(:func:`streams.snapshot.identities`)::

    {"names": ["3f2a...", ...], "nodes": [<one identity per node, in walk() order>]}

A crash before the first checkpoint restarts the same graph over the same
input under the same names: the server skips the writes it already has, and
each output is written once. Any other pipeline (a function or a key
changed, another input) draws new names, with a warning: its outputs are
not the ones written under the old names, and numbered under them the
server would skip as many of the new outputs as the old run wrote. So does a
``writers.json`` written by an earlier version of the library, which
recorded no identity (a start without a checkpoint then writes each output
at least once, instead of possibly losing some).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from ._checkpoint_io import WRITERS
from .core import Stream
from .snapshot import first_difference, identities

__all__ = ["name_writers"]

logger = logging.getLogger("streams")


def name_writers(directory: Path, nodes: list[Stream[Any]], numbering: list[Stream[Any]],
                 reuse: bool, fsync: bool) -> None:
    """Give each sink of ``numbering`` its writer name (the graph's ``nodes`` start afresh).

    ``reuse``: take the names in ``writers.json`` if the same graph over the
    same input wrote it (else, or with ``reuse=False``, draw new ones and
    write them there before anything is written).
    """
    path = directory / WRITERS
    names = _recorded_names(path, nodes, len(numbering)) if reuse else None
    if names is None:
        names = [uuid.uuid4().hex for _ in numbering]
        directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(WRITERS + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"names": names, "nodes": identities(nodes)}, f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    for n, name in zip(numbering, names, strict=True):
        n._attach_checkpointer(name)  # type: ignore[attr-defined]


def _recorded_names(path: Path, nodes: list[Stream[Any]], count: int) -> list[str] | None:
    """The names in ``path`` if this graph over this input wrote them; None to draw new ones."""
    try:
        recorded = json.loads(path.read_text())
        names = recorded.get("names") if isinstance(recorded, dict) else None
        entries = recorded.get("nodes") if isinstance(recorded, dict) else None
        if not isinstance(names, list) or not isinstance(entries, list):
            why = ("it records no identity of the pipeline that wrote it (an earlier "
                   "version of streams wrote it), so it may be another pipeline's")
        elif (found := first_difference(nodes, entries, then=WRITERS)) is not None:
            why = f"it was written by another pipeline or over another input (it {found[0]})"
        elif len(names) != count or not all(isinstance(n, str) and n for n in names):
            why = f"it names {len(names)} writers, for {count} sink(s) here"
        else:
            return names
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, AttributeError, KeyError) as e:
        why = f"it cannot be read ({type(e).__name__}: {e})"
    logger.warning(
        "%s is not reused: %s. This run draws new writer names, so that all its writes "
        "reach the server (none is skipped as already written); what a run under the old "
        "names wrote stays as it is", path, why)
    return None
