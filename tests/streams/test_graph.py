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


def _readable(module: object) -> tuple[set[str], dict[tuple[str, str], dict[str, str]]]:
    """A fan-out, through ``module``'s networkx helpers.

    Its labels differ: streamz numbers equal labels in the order of a set
    of nodes, which changes from run to run.
    """
    import networkx as nx

    source = module.Stream(stream_name="in")  # type: ignore[attr-defined]
    head = source.map(abs)
    head.map(round).sink(print)
    head.filter(bool).sink(len)
    g = nx.DiGraph()
    module.create_graph(source, g)  # type: ignore[attr-defined]
    readable = module.readable_graph(g)  # type: ignore[attr-defined]
    return set(readable.nodes), {e: dict(a) for e, a in readable.edges.items()}


def test_readable_graph_names_and_labels_nodes_as_streamz_does() -> None:
    streamz = pytest.importorskip("streamz")
    import streams

    nodes, edges = _readable(streams)
    assert (nodes, edges) == _readable(streamz)
    # The fan-out's edges carry the order elements reach them in.
    assert edges[(" map; abs ", " map; round ")] == {"label": "0"}
    assert edges[(" map; abs ", " filter; bool ")] == {"label": "1"}


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot program is needed")
def test_to_graphviz_draws_the_networkx_graph() -> None:
    import networkx as nx

    from streams import create_graph, readable_graph, to_graphviz

    source = Stream(stream_name="in")
    source.map(abs).sink(print)
    g = nx.DiGraph()
    create_graph(source, g)
    svg = to_graphviz(readable_graph(g), rankdir="LR").pipe(format="svg")
    assert b"map; abs" in svg and b"sink; print" in svg
    # Unrelabelled, the nodes are hashes: drawn all the same.
    assert to_graphviz(g, format="svg").pipe().count(b"<g id=\"node") == 3


def test_create_graph_hangs_side_streams_from_their_node() -> None:
    import networkx as nx

    from streams import build_node_set, create_graph

    source = Stream()
    parsed = source.map(int).on_error("route")
    parsed.errors.sink_to_list()
    g = nx.DiGraph()
    create_graph(source, g)
    assert g.edges[hash(parsed), hash(parsed.errors)] == {"label": "errors", "style": "dashed"}
    assert nx.is_weakly_connected(g)  # the error stream was an island
    assert build_node_set(None) is None  # as streamz
