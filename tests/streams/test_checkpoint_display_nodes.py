"""Showing a stream never changes whether its checkpoint restores.

Displaying a stream in Jupyter attaches a live view (a sink node the
library adds, through ``live_view()``, what ``display(stream)`` calls), and
``sink_to_plot()`` a plot node: both only draw. They are no part of the
pipeline's checkpointed identity or state, so a notebook re-run after a
kernel restart resumes whether or not, and wherever, it shows its streams,
and checkpoints recorded with a view in them (older ones too) still restore.
A ``progress()`` bar is part of the pipeline: its count is restored.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from streams import Checkpointer, Stream
from streams.jupyter import live_view
from streams.snapshot import GraphSnapshot, restore_graph, snapshot_graph

DATA = list(range(1, 21))
FIRST = 8  # the elements the interrupted run read before the kernel restart


def add(s: int, x: int) -> int:
    return s + x


def inc(x: int) -> int:
    return x + 1


def run(directory: Path, data: list[int], show: str, progress: bool = False
        ) -> tuple[list[int], Any]:
    """The notebook's cells: build, (maybe) show, checkpoint, run.

    ``show``: ``"none"``; ``"source"``, the source displayed in the cell that
    made it, before the rest was built (its view lies mid-graph); ``"totals"``,
    the totals displayed before the Checkpointer's cell (at the graph's end);
    ``"later"``, the totals displayed after the Checkpointer's cell (its
    checkpoints, not its restore, see the view); ``"plot"``, the totals plotted.
    """
    source = Stream.from_iterable(data)
    if show == "source":
        live_view(source)
    counted = source.progress(file=io.StringIO()) if progress else source
    totals = counted.map(inc).scan(add, start=0)
    out = totals.sink_to_list()
    if show == "totals":
        live_view(totals)
    elif show == "plot":
        totals.sink_to_plot(widget=False)
    cp = Checkpointer(source, directory, every=3)
    if show == "later":
        live_view(totals)
    source.start()
    cp.wait()
    return out, counted


def uninterrupted() -> list[int]:
    source = Stream.from_iterable(DATA)
    out = source.map(inc).scan(add, start=0).sink_to_list()
    source.start()
    return out  # type: ignore[no-any-return]


@pytest.mark.parametrize(("first", "then"), [
    ("totals", "none"),     # checkpointed with a view, restored without
    ("source", "none"),
    ("later", "none"),
    ("none", "totals"),     # checkpointed without a view, restored with one
    ("none", "source"),
    ("source", "totals"),   # a view in both runs, on other streams
    ("totals", "source"),
    ("plot", "none"),       # a live plot only draws too
    ("none", "plot"),
])
def test_a_restore_does_not_depend_on_what_is_shown(tmp_path: Path, first: str,
                                                    then: str) -> None:
    before, _ = run(tmp_path, DATA[:FIRST], first)
    after, _ = run(tmp_path, DATA, then)
    assert before + after == uninterrupted()


def test_a_progress_bar_is_restored_with_its_count_whether_shown_or_not(
        tmp_path: Path) -> None:
    before, _ = run(tmp_path, DATA[:FIRST], "totals", progress=True)
    after, bar = run(tmp_path, DATA, "none", progress=True)
    assert before + after == uninterrupted()
    assert bar.count == len(DATA)  # counted on from the checkpoint's count


def _as_older_record(snap: GraphSnapshot) -> GraphSnapshot:
    """``snap`` as earlier versions recorded it: every node numbered, views unmarked."""
    position = [i for i, e in enumerate(snap.nodes) if e.get("checkpointed", True)]
    entries = []
    for i, e in enumerate(snap.nodes):
        entry = {k: v for k, v in e.items() if k != "checkpointed"} | {"index": i}
        if "upstreams" in entry:
            entry["upstreams"] = [position[u] for u in entry["upstreams"]]
        entries.append(entry)
    return GraphSnapshot(tuple(entries), snap.states, snap.sequence)


def _graph(view: str) -> tuple[Stream[int], list[int]]:
    source: Stream[int] = Stream()
    if view == "source":
        live_view(source)
    totals = source.map(inc).scan(add, start=0)
    out = totals.sink_to_list()
    if view == "totals":
        live_view(totals)
    return source, out


@pytest.mark.parametrize("then", ["none", "totals"])
def test_an_older_record_with_a_view_mid_graph_restores(then: str) -> None:
    source, out = _graph("source")
    for x in DATA[:FIRST]:
        source.emit(x)
    snap = _as_older_record(snapshot_graph(source))
    ops = [e["operator"] for e in snap.nodes]
    assert ops == ["stream", "live_view", "map", "accumulate", "sink_to_list"]
    assert snap.nodes[3]["upstreams"] == [2]  # numbered with the view, as then
    again, rest = _graph(then)
    restore_graph(again, snap)
    for x in DATA[FIRST:]:
        again.emit(x)
    assert out + rest == uninterrupted()
