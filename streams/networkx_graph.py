"""The graph as a ``networkx`` graph, as streamz's ``create_graph``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .graph import walk

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["create_graph"]


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
    attributes (``label``, ``shape``, ``style``...); edges go downstream.

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
