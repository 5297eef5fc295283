# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""``to_dask()``: which Dask client the ``scatter()`` below a node uses."""

from __future__ import annotations

from typing import Any

from distributed import Client

from streams.core import Stream

__all__ = ["ToDask", "bound_client"]


@Stream.register_api()
class ToDask(Stream[Any]):
    """Choose the Dask client that the ``scatter()`` below this node uses.

    Elements pass through unchanged. Without a client, ``scatter()`` uses
    ``distributed.default_client()``, or else starts a ``LocalCluster`` on
    first use, which closes with the pipeline.

    Parameters
    ----------
    client : distributed.Client, optional
        The client to run on.

    Examples
    --------
    >>> import streams_dask
    >>> from streams import Stream
    >>> source = Stream()
    >>> node = source.to_dask()
    >>> node.describe().operator
    'to_dask'
    """

    __slots__ = ("client",)
    _operator = "to_dask"

    def __init__(self, upstream: Stream[Any], client: Client | None = None,
                 **kwargs: Any) -> None:
        self.client = client
        Stream.__init__(self, upstream, **kwargs)


def bound_client(node: Stream[Any] | None) -> Client | None:
    """The client of the nearest ``to_dask()`` upstream, if any."""
    while node is not None:
        if isinstance(node, ToDask):
            return node.client
        node = node.upstream
    return None
