"""``gather()``: the end of a segment that runs on Dask or Spark."""

from __future__ import annotations

from typing import Any

from ..core import Stream

__all__ = ["Gather"]


@Stream.register_api()
class Gather(Stream[Any]):
    """Bring the results of a Dask or Spark segment back to this process.

    The segment's entry node (``scatter()``, ``to_spark()``) emits results
    through this node, in input order. After a node combining several
    segments (``scatter(a).zip(scatter(b))``, which runs in this process on
    their gathered results) it passes that node's results on, as streamz's
    does. Outside a segment there is nothing to gather, and the call fails
    when the graph is built.

    Examples
    --------
    >>> from streams import Stream
    >>> Stream().map(abs).gather()
    Traceback (most recent call last):
    ...
    ValueError: gather() follows map(abs), which runs in this process: nothing to gather...
    """

    __slots__ = ()
    _operator = "gather"
    _local_only = "it brings results back into this process"
    _ends_segment = True
    _graphviz_shape = "invhouse"

    def __init__(self, upstream: Stream[Any], **kwargs: Any) -> None:
        segment = upstream._segment
        if segment is None:
            raise ValueError(
                f"gather() follows {upstream._label()}, which runs in this process: nothing "
                "to gather. Use scatter() (streams_dask) or to_spark() (streams_spark) first."
            )
        Stream.__init__(self, upstream, **kwargs)
        segment.add_exit(self)
