"""The graph as a ``networkx`` graph, and that graph drawn: streamz's graph helpers.

:func:`create_graph`, :func:`readable_graph`, :func:`to_graphviz` and
:func:`build_node_set` keep streamz's names and results, for code that
draws or inspects a pipeline through networkx. :func:`streams.graph.visualize`
draws the graph directly.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .graph import side_streams, walk

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["build_node_set", "create_graph", "readable_graph", "to_graphviz"]


def _clean_text(text: str, match: str | None = None) -> str:
    """``text`` with each run of characters graphviz labels refuse made a space.

    Colons become semicolons, as in streamz.

    >>> _clean_text("JFDSM*(@&$:FFDS:;;")
    'JFDSM ;FFDS; '
    """
    text = re.sub(match or "[^a-zA-Z0-9_:]+", " ", text)
    return re.sub(":", ";", text)


def create_graph(node: Stream[Any], graph: Any) -> None:
    """Fill ``graph`` (a ``networkx.DiGraph``) with the graph ``node`` belongs to.

    Nodes are keyed by ``hash(stream_node)`` and carry streamz's drawing
    attributes (``label``, ``shape``, ``style``...); edges go downstream, and
    a node's edges to two or more downstreams are labelled with their order
    (``"0"``, ``"1"``...), the order in which each element is pushed to them.
    A node's error and late streams hang from it by a dashed edge labelled
    ``errors`` or ``late``.

    Examples
    --------
    >>> import networkx as nx
    >>> from streams import Stream
    >>> source = Stream(stream_name="in")
    >>> out = source.map(abs)
    >>> g = nx.DiGraph()
    >>> create_graph(source, g)
    >>> (hash(source), hash(out)) in g.edges, g.nodes[hash(out)]["label"]
    (True, ' map; abs ')
    """
    nodes = walk(node)  # every connected node, upstream and down (cycles allowed)
    for n in nodes:
        graph.add_node(
            hash(n),
            label=_clean_text(str(n)),
            shape=n._graphviz_shape,
            orientation=str(n._graphviz_orientation),
            style=n._graphviz_style,
            fillcolor=n._graphviz_fillcolor,
        )
    for n in nodes:
        for u in n.upstreams:
            graph.add_edge(hash(u), hash(n))
        # A side stream has no upstream: a dashed edge from its node, as visualize() draws.
        for name, side in side_streams(n):
            graph.add_edge(hash(n), hash(side), label=name, style="dashed")
        downstreams = list(n.downstreams)
        for i, d in enumerate(downstreams):
            if len(downstreams) > 1:
                graph.add_edge(hash(n), hash(d), label=str(i))
            else:
                graph.add_edge(hash(n), hash(d))


def build_node_set(node: Stream[Any] | None,
                   s: set[Stream[Any]] | None = None) -> set[Stream[Any]]:
    """Every node connected to ``node``, upstream and down, added to ``s`` (a new set if None).

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> out = source.map(abs)
    >>> build_node_set(out) == {source, out}
    True
    """
    if node is None:  # as streamz
        return s  # type: ignore[return-value]
    if s is None:
        s = set()
    s.update(walk(node))
    return s


def readable_graph(graph: Any) -> Any:
    """A copy of :func:`create_graph`'s ``graph`` with each node named by its label.

    Nodes of the same label get ``-1``, ``-2``... after the first, as in
    streamz, so that two ``map(inc)`` stay two nodes.

    Examples
    --------
    >>> import networkx as nx
    >>> from streams import Stream
    >>> source = Stream(stream_name="in")
    >>> _ = source.map(abs).map(abs)
    >>> g = nx.DiGraph()
    >>> create_graph(source, g)
    >>> sorted(readable_graph(g).edges)
    [(' in Stream ', ' map; abs '), (' map; abs ', ' map; abs -1')]
    """
    import networkx as nx

    names: dict[Any, str] = {}
    seen: dict[str, int] = {}
    for key in graph:
        label = str(graph.nodes[key]["label"])
        if label in seen:
            seen[label] += 1
            names[key] = f"{label}-{seen[label]}"
        else:
            seen[label] = 0
            names[key] = label
    return nx.relabel_nodes(graph, names, copy=True)


#: ``graphviz.Digraph``'s own keywords: :func:`to_graphviz` passes them through.
_DIGRAPH_KEYWORDS = frozenset({
    "name", "comment", "filename", "format", "engine", "encoding", "graph_attr", "node_attr",
    "edge_attr", "body", "strict", "directory"})


def to_graphviz(graph: Any, **graph_attr: Any) -> Any:
    """A ``graphviz.Digraph`` of a networkx graph, its nodes' and edges' attributes kept.

    ``graph_attr`` are the picture's attributes (``rankdir="LR"``), or, if
    any of them is one of ``graphviz.Digraph``'s keywords (``graph_attr=``,
    ``format=``...), ``Digraph``'s keywords, as in streamz.

    Examples
    --------
    >>> import networkx as nx
    >>> from streams import Stream
    >>> source = Stream(stream_name="in")
    >>> _ = source.map(abs)
    >>> g = nx.DiGraph()
    >>> create_graph(source, g)
    >>> dot = to_graphviz(readable_graph(g), rankdir="LR")
    >>> "rankdir=LR" in dot.source, '" map; abs "' in dot.source
    (True, True)
    """
    import graphviz

    if not _DIGRAPH_KEYWORDS.intersection(graph_attr):
        graph_attr = {"graph_attr": graph_attr}
    picture = graphviz.Digraph(**graph_attr)
    # Names as text: create_graph keys its nodes by hash, which graphviz cannot quote.
    for key, attrs in graph.nodes.items():
        picture.node(str(key), **attrs)
    for (a, b), attrs in graph.edges.items():
        picture.edge(str(a), str(b), **attrs)
    return picture
