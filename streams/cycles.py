"""Feedback loops: endless ones refused by ``connect()``, runaway ones named.

A graph may feed a node's output back to an earlier node (streamz allows
it, and a loop through a ``filter`` that eventually says no is a real
pattern). Elements travel depth first, so every round of a loop is a level
of Python recursion. Two things follow:

* a loop made only of nodes that pass on every element they receive
  (``map``, ``starmap``, ``pluck``, a plain ``Stream``) can never let an
  element out: :func:`check_connect` refuses it when it is built;
* a loop that could end but does not (or ends after more rounds than
  Python's recursion limit allows) raises ``RecursionError``:
  :func:`recursion_error` gives it a message naming the loop.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["check_connect", "find_cycle", "recursion_error"]


def _forwards_every_element(node: Stream[Any]) -> bool:
    # Only the exact base class: a subclass may drop elements in its update.
    from .core import Stream

    return type(node) is Stream or type(node).__dict__.get("_forwards_every_element", False)


def _path(start: Stream[Any], target: Stream[Any],
          only_forwarding: bool) -> list[Stream[Any]] | None:
    """A path of downstream links from ``start`` to ``target`` (both included)."""
    parents: dict[int, Stream[Any] | None] = {id(start): None}
    todo = [start]
    while todo:
        node = todo.pop()
        if node is target:
            path = [node]
            parent = parents[id(node)]
            while parent is not None:
                path.append(parent)
                parent = parents[id(parent)]
            return path[::-1]
        if only_forwarding and not _forwards_every_element(node):
            continue
        for d in node.downstreams:
            if id(d) not in parents:
                parents[id(d)] = node
                todo.append(d)
    return None


def _describe(cycle: list[Stream[Any]]) -> str:
    return " -> ".join(n._label() for n in [*cycle, cycle[0]])


def check_connect(upstream: Stream[Any], downstream: Stream[Any]) -> None:
    """Refuse ``upstream.connect(downstream)`` when it closes an endless loop.

    Examples
    --------
    >>> from streams import Stream
    >>> a = Stream(stream_name="a")
    >>> a.connect(a)
    Traceback (most recent call last):
    ...
    ValueError: connect(): stream 'a' -> stream 'a' would be a loop that no element ever leaves: ...
    >>> b = a.map(lambda x: x - 1)
    >>> b.filter(lambda x: x > 0).connect(a)  # a loop that ends: accepted
    """
    if not _forwards_every_element(upstream):
        return
    path = _path(downstream, upstream, only_forwarding=True)
    if path is None:
        return
    raise ValueError(
        f"connect(): {_describe(path)} would be a loop that no element ever leaves: "
        "each of its nodes passes on every element it receives. A feedback loop "
        "needs a node that lets elements out, such as filter(lambda x: ...) "
        "returning False once an element is done."
    )


def find_cycle(node: Stream[Any]) -> list[Stream[Any]] | None:
    """A loop of the graph reachable downstream of ``node``, or None.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> again = source.map(lambda x: x - 1, stream_name="again")
    >>> again.filter(lambda x: x > 0).connect(again)
    >>> [n._label() for n in find_cycle(source)]
    ["map(<lambda>) 'again'", 'filter(<lambda>)']
    """
    seen: set[int] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for d in n.downstreams:
            path = _path(d, n, only_forwarding=False)
            if path is not None:
                return [n, *path[:-1]]
            todo.append(d)
    return None


def recursion_error(node: Stream[Any], error: RecursionError) -> RecursionError:
    """A RecursionError that says which loop (or depth) ran past the limit.

    ``node`` is where the element was emitted; ``error`` is Python's (or a
    node's :class:`~streams.errors.NodeError` wrapping it, which is returned
    with the explanation as a note).
    """
    limit = sys.getrecursionlimit()
    cycle = find_cycle(node)
    if cycle is None:
        text = (f"emit() into {node._label()}: the graph is deeper than Python's recursion "
                f"limit ({limit}); raise it with sys.setrecursionlimit() or split the graph")
    else:
        text = (f"emit() into {node._label()}: an element went round the loop "
                f"{_describe(cycle)} until Python's recursion limit ({limit}). Each round "
                "is a level of recursion: a feedback loop must let every element out "
                "after a bounded number of rounds (a filter on it must eventually say no)")
    from .errors import NodeError

    if isinstance(error, NodeError):  # keeps its node and element; the loop is a note
        error.add_note(f"streams: {text}")
        return error
    new = RecursionError(text)
    new.__cause__ = error
    return new
