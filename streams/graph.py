"""The graph as data: walking it, its frozen description, and pictures.

Backends (Dask, Spark) and tools (checkpoints, ``visualize``) never inspect
operator classes: they read :class:`~streams.spec.NodeSpec`, the frozen
description each node gives of itself (defined in :mod:`streams.spec`).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import short_repr
from .spec import NodeSpec

if TYPE_CHECKING:
    from .core import Stream

__all__ = [
    "GraphSpec", "NodeSpec", "describe", "label", "side_streams", "streamz_str", "visualize",
    "walk",
]

#: Attributes shown by ``str(node)``, as streamz's ``str_list``.
_STR_ATTRIBUTES = ("func", "n", "interval")  # filter's ``predicate`` is its ``func``


@dataclass(frozen=True)
class GraphSpec:
    """The description of a whole connected graph, in topological order."""

    nodes: tuple[NodeSpec, ...]

    def __getitem__(self, node_id: int) -> NodeSpec:
        for spec in self.nodes:
            if spec.id == node_id:
                return spec
        raise KeyError(node_id)

    def downstream_ids(self, node_id: int) -> tuple[int, ...]:
        """The ids of the nodes fed by ``node_id``, in the order they are fed."""
        return self[node_id].downstream_ids


#: A side stream (``node.errors``, ``node.late``) -> the node it hangs from, weakly.
#: A side stream has no upstream; :func:`visualize` draws it in its node's graph.
_HANGS_FROM: weakref.WeakKeyDictionary[Stream[Any], weakref.ref[Stream[Any]]] = (
    weakref.WeakKeyDictionary())


def hang(side: Stream[Any], node: Stream[Any]) -> None:
    """Record ``side`` as a side stream of ``node`` (its errors, its late elements)."""
    _HANGS_FROM[side] = weakref.ref(node)


def side_streams(node: Stream[Any]) -> list[tuple[str, Stream[Any]]]:
    """``node``'s side streams made so far, by name: its ``errors``, its ``late`` elements."""
    found = (("errors", node._errors), ("late", getattr(node, "_late", None)))
    return [(name, side) for name, side in found if side is not None]


def _whole_graph(node: Stream[Any]) -> list[Stream[Any]]:
    """:func:`walk` of ``node``, and of the nodes its graph's side streams hang from.

    A side stream has no upstream: what is below one (``node.errors.map(f)``)
    reaches it but not its node, whose graph holds it (walked from there).
    """
    nodes = walk(node)
    seen = {id(n) for n in nodes}
    for n in nodes:
        ref = _HANGS_FROM.get(n)
        owner = None if ref is None else ref()
        if (owner is not None and id(owner) not in seen
                and any(side is n for _, side in side_streams(owner))):
            return _whole_graph(owner)  # a larger graph: it holds all of these
    return nodes


def walk(node: Stream[Any]) -> list[Stream[Any]]:
    """Every node connected to ``node``, upstream and down, topologically.

    Sources come first; every node comes after all of its upstreams, and
    among siblings the order of connection is kept, so the order is stable
    from run to run (checkpoints rely on it).

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream(stream_name="src")
    >>> _ = source.map(str).sink_to_list()
    >>> [n.describe().operator for n in walk(source)]
    ['stream', 'map', 'sink_to_list']
    """
    seen: dict[int, Stream[Any]] = {}
    todo = [node]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        todo.extend(n.upstreams)
        todo.extend(side for _, side in side_streams(n))  # part of the graph too
        todo.extend(n.downstreams)
    nodes = sorted(seen.values(), key=lambda n: n._node_id)
    # Creation order is a topological order except after connect(); repair it.
    order: list[Stream[Any]] = []
    placed: set[int] = set()
    visiting: set[int] = set()

    def place(n: Stream[Any]) -> None:
        if id(n) in placed or id(n) in visiting:
            return  # a feedback loop: keep creation order
        visiting.add(id(n))
        for u in n.upstreams:
            place(u)
        visiting.discard(id(n))
        placed.add(id(n))
        order.append(n)

    for n in nodes:
        place(n)
    return order


def describe(node: Stream[Any]) -> GraphSpec:
    """The frozen description of the graph ``node`` belongs to.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> _ = source.filter(None).sink(print)
    >>> [s.operator for s in describe(source).nodes]
    ['stream', 'filter', 'sink']
    """
    return GraphSpec(tuple(n.describe() for n in walk(node)))


def operator_of(node: Stream[Any]) -> str:
    """The operator's name; a class that names none of its own is named by its class.

    A user's subclass of ``Stream`` (registered or not) inherits ``stream``:
    streamz names every node by its class.

    >>> from streams import Stream
    >>> class Custom(Stream):
    ...     pass
    >>> operator_of(Stream().map(str)), operator_of(Custom())
    ('map', 'Custom')
    """
    kind = type(node)
    return node._operator if "_operator" in kind.__dict__ or kind.__name__ == "Stream" \
        else kind.__name__


def label(node: Stream[Any]) -> str:
    """A short human name: ``map(parse) 'clean'`` for a named map node."""
    func = getattr(node, "func", None)
    text = operator_of(node)
    if func is not None:
        fname = getattr(func, "__name__", None) or type(func).__name__
        text = f"{text}({fname})"
    elif node._params:
        first = getattr(node, node._params[0], None)
        if first is not None and not callable(first) and first != ():
            # A path (a string or a Path), topic or URL is shown whole, since
            # cutting out its middle hides which file or topic an error is about.
            whole = isinstance(first, (str, os.PathLike))
            shown = repr(first) if whole else short_repr(first)
            text = f"{text}({shown})"
    if node.stream_name:
        text = f"{text} {node.stream_name!r}"
    return text


def visualize(node: Stream[Any], filename: str | None = "mystream.png", **kwargs: Any) -> Any:
    """Draw the graph ``node`` belongs to with graphviz.

    Parameters
    ----------
    node : Stream
        Any node of the graph, also of what hangs below a side stream
        (``node.errors``, ``node.late``): the graph it hangs from is drawn.
    filename : str or None
        Where to write the picture (format from the extension: ``.png``,
        ``.svg``, ``.pdf``...). ``None`` writes nothing.
    **kwargs
        Graph attributes passed to ``graphviz.Digraph`` (``rankdir="LR"``...).

    Returns
    -------
    graphviz.Digraph
        Jupyter displays it inline as SVG (graphviz's ``_repr_mimebundle_``);
        ``.pipe(format="svg")`` gives the SVG bytes. Each node shows its
        operator, function and ``stream_name``; nodes that run on Dask or
        Spark are tinted and boxed by segment. A node's error stream
        (``node.errors``) and late stream (``node.late``) hang from it by
        a dashed edge labelled ``errors`` or ``late``.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream(stream_name="numbers")
    >>> _ = source.map(abs).sink_to_list()
    >>> g = visualize(source, filename=None)
    >>> "image/svg+xml" in g._repr_mimebundle_()
    True
    >>> b"map(abs)" in g.pipe(format="svg")
    True
    """
    try:
        import graphviz
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "visualize() needs the graphviz Python package and the dot program: "
            "pip install 'streams[notebook]' and apt-get install graphviz "
            "(or conda install python-graphviz)"
        ) from e
    colors = {"dask": "#fde2c3", "spark": "#d6e9f8"}
    g = graphviz.Digraph(graph_attr={k: str(v) for k, v in kwargs.items()})
    # Nodes of one Dask or Spark segment are drawn inside one labelled box
    # (a graphviz cluster), so where each part runs is visible at a glance.
    clusters: dict[int, Any] = {}
    for n in _whole_graph(node):
        if n._graphviz_hidden:
            continue
        spec = n.describe()
        text = spec.name if spec.backend is None else f"{spec.name}\n[{spec.backend}]"
        where = g
        if spec.backend is not None and n._segment is not None:
            where = clusters.get(id(n._segment))
            if where is None:
                where = clusters[id(n._segment)] = graphviz.Digraph(
                    name=f"cluster_{len(clusters)}",
                    graph_attr={"label": f"runs on {spec.backend.capitalize()}",
                                "style": "rounded,dashed", "color": "#888888",
                                "fontcolor": "#555555"})
        where.node(
            str(spec.id),
            label=text,
            shape=n._graphviz_shape,
            style=n._graphviz_style,
            fillcolor=colors.get(spec.backend or "", n._graphviz_fillcolor),
            orientation=str(n._graphviz_orientation),
        )
        for uid in spec.upstream_ids:
            g.edge(str(uid), str(spec.id))
        # A side stream has no upstream: the dashed edge says whose it is.
        for name, side in side_streams(n):
            g.edge(str(spec.id), str(side._node_id), label=name, style="dashed")
    for cluster in clusters.values():
        g.subgraph(cluster)
    if filename is not None:
        stem, _, fmt = filename.rpartition(".")
        if not stem:
            raise ValueError(f"visualize(): give the file a format extension, got {filename!r}")
        try:
            # Piped, not rendered: render() writes the DOT text to ``stem``
            # first (a file of that name is overwritten, then deleted).
            data = g.pipe(format=fmt.lower())
        except graphviz.ExecutableNotFound as e:  # pragma: no cover
            raise RuntimeError(
                "visualize() needs graphviz's dot program: apt-get install graphviz"
            ) from e
        with open(filename, "wb") as out:
            out.write(data)
    return g

# streamz's names in streamz.graph.
from .networkx_graph import (  # noqa: E402, F401
    _clean_text,
    build_node_set,
    create_graph,
    readable_graph,
    to_graphviz,
)


def streamz_str(node: Stream[Any]) -> str:
    """``str(node)`` in streamz's format: ``<map: inc>``, ``<name; Stream>``, ``<partition: 2>``.

    Examples
    --------
    >>> from streams import Stream
    >>> str(Stream().partition(2)), str(Stream(stream_name="in"))
    ('<partition: 2>', '<in; Stream>')
    """
    from .core import Stream

    kind = "Stream" if type(node) is Stream else operator_of(node)
    parts = [f"{node.stream_name}; {kind}" if node.stream_name else kind]
    for attr in _STR_ATTRIBUTES:
        value = getattr(node, attr, None)
        if value:
            if callable(value):
                value = getattr(value, "__name__", type(value).__name__)
            parts.append(f"{attr}={value}")
    if len(parts) <= 2:  # as streamz: ``<map: inc>``, not ``<map: func=inc>``
        parts = [p.split("=")[-1] for p in parts]
    return f"<{parts[0]}: {', '.join(parts[1:])}>" if len(parts) > 1 else f"<{parts[0]}>"
