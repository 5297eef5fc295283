"""visualize(): a node's error and late streams hang from it by a labelled dashed edge."""

from __future__ import annotations

import re
from typing import Any

import pytest

from streams import Stream

pytest.importorskip("graphviz")


def _edges(node: Stream[Any]) -> dict[tuple[int, int], str]:
    """The edges of the DOT source, as ``(tail, head) -> attributes``."""
    source = node.visualize(filename=None).source
    return {(int(a), int(b)): attrs
            for a, b, attrs in re.findall(r"^\s*(\d+) -> (\d+)(.*)$", source, re.MULTILINE)}


def test_the_error_stream_is_drawn_from_its_node() -> None:
    source = Stream(stream_name="in")
    parsed = source.map(int).on_error("route")
    parsed.sink_to_list()
    parsed.errors.sink_to_list()
    edges = _edges(source)
    ids = {name: n._node_id for name, n in
           [("source", source), ("parsed", parsed), ("errors", parsed.errors)]}
    side = edges[(ids["parsed"], ids["errors"])]
    assert "label=errors" in side and "style=dashed" in side
    # The ordinary edges stay solid and unlabelled.
    assert edges[(ids["source"], ids["parsed"])] == ""


def test_the_late_stream_is_drawn_from_its_window() -> None:
    source = Stream(stream_name="in")
    window = source.timed_window(10, time=lambda e: e[0], lateness=5)
    window.late.sink_to_list()
    window.sink_to_list()
    edges = _edges(source)
    side = edges[(window._node_id, window.late._node_id)]
    assert "label=late" in side and "style=dashed" in side


def test_a_node_without_side_streams_has_no_dashed_edge() -> None:
    source = Stream()
    source.map(int).on_error("skip").sink_to_list()
    assert not any("dashed" in attrs for attrs in _edges(source).values())


def test_a_side_stream_visualized_draws_the_graph_it_hangs_from() -> None:
    # A side stream has no upstream: drawn from it, only itself and what is
    # below it used to show.
    source = Stream(stream_name="in")
    window = source.map(int).on_error("route").timed_window(10, time=lambda e: e, lateness=5)
    window.sink_to_list()
    window.late.sink_to_list()
    errors = window.upstreams[0].errors
    shown = errors.map(repr)
    shown.sink_to_list()
    whole = _edges(source)
    assert _edges(errors) == whole == _edges(window.late) == _edges(shown)
    assert (window.upstreams[0]._node_id, errors._node_id) in whole
