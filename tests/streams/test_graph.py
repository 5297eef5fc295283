"""The graph as data, and pictures."""

from __future__ import annotations

import operator
import shutil
from pathlib import Path

import pytest

from streams import Stream, describe, walk


def test_walk_is_topological_and_reaches_the_whole_graph_from_any_node() -> None:
    a, b = Stream(stream_name="a"), Stream(stream_name="b")
    u = a.map(str).union(b)
    sink = u.sink_to_list()
    late = Stream(stream_name="late")
    late.connect(u)  # created after u: walk must still put it before u
    order = walk(sink.__self__ if hasattr(sink, "__self__") else b)
    names = [n.stream_name for n in order if n.stream_name]
    assert set(names) == {"a", "b", "late"}
    pos = {id(n): i for i, n in enumerate(order)}
    for n in order:
        assert all(pos[id(up)] < pos[id(n)] for up in n.upstreams)


def test_describe_is_frozen_and_complete() -> None:
    source = Stream(stream_name="src")
    source.map(operator.add, 1).scan(operator.mul, start=1).partition(2, key=0).sink(print)
    graph = describe(source)
    ops = [s.operator for s in graph.nodes]
    assert ops == ["stream", "map", "accumulate", "partition", "sink"]
    m = graph.nodes[1]
    assert m.func is operator.add and m.params["args"] == (1,)
    assert graph.nodes[3].params["key"] == 0
    assert graph.nodes[2].upstream_ids == (m.id,)
    assert graph.downstream_ids(m.id) == (graph.nodes[2].id,)
    assert graph[m.id] is m
    with pytest.raises(AttributeError):
        m.operator = "filter"  # type: ignore[misc]
    with pytest.raises(TypeError):
        m.params["args"] = ()  # type: ignore[index]


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot program is needed")
@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_visualize_writes_a_picture(tmp_path: Path, fmt: str) -> None:
    source = Stream(stream_name="numbers")
    source.map(abs).filter(None).sink_to_list()
    target = tmp_path / f"graph.{fmt}"
    g = source.visualize(str(target))
    assert target.exists() and target.stat().st_size > 100
    assert "numbers" in g.source and "map(abs)" in g.source
