"""A Spark query that failed with a node's error: that error, raised on the driver.

On an executor a node's failure that cannot travel as an error row (on its
way to an event-time window, see :mod:`streams_spark.window_failures`)
fails the query with a :class:`~streams_spark.routing.NodeFailure`, whose
message carries the pickled ``(node id, element, exception)``. Spark hands
the driver that message inside its own exception: the driver raises the
node's :class:`~streams.NodeError` from it, as in-process.
"""

from __future__ import annotations

import pickle
from typing import Any, NoReturn

from streams.errors import NodeError

from .routing import NodeFailure

__all__ = ["NodeFailureInfo", "node_failed", "reraise_as_info", "reraise_node_failure"]


class NodeFailureInfo(Exception):
    """The ``(node id, element, exception)`` a query failed with."""

    def __init__(self, info: tuple[int, Any, BaseException]) -> None:
        super().__init__(info)
        self.info = info


def reraise_as_info(exc: BaseException) -> None:
    """Turn a query failure carrying a node's error into :class:`NodeFailureInfo`."""
    text = str(exc)
    at = text.find(NodeFailure.MARK)
    if at < 0:
        return
    hexed = text[at + len(NodeFailure.MARK):].split()[0].strip("'\")")
    raise NodeFailureInfo(pickle.loads(bytes.fromhex(hexed))) from exc


def reraise_node_failure(exc: BaseException, segment: Any) -> None:
    """Raise a query failure carrying a node's error as its error (see :func:`node_failed`)."""
    try:
        reraise_as_info(exc)
    except NodeFailureInfo as info:
        node_failed(segment, info.info)


def node_failed(segment: Any, info: tuple[int, Any, BaseException]) -> NoReturn:
    """Raise the :class:`~streams.NodeError` of a node whose failure failed a query.

    What in-process ``on_error("raise")`` raises: the error names the node
    and the element and keeps its type. The micro-batch failed with it, so
    it is raised whatever the node's policy: a failure under ``skip`` or
    ``route`` fails a query only where it could not be set aside (see
    :mod:`streams_spark.window_failures`), and a note says so.
    """
    __tracebackhide__ = True  # pytest, IPython: show the user's frames
    node_id, x, error = info
    node = segment.node(node_id)
    failed = error if isinstance(error, NodeError) else NodeError(node, x, error)
    if node._policy != "raise":
        failed.add_note(f"On Spark this failure failed its micro-batch: {node._label()}'s "
                        f"on_error({node._policy!r}) could not apply to it there")
    if failed is error:
        raise failed
    raise failed from error
