"""Run parts of a stream graph on a Dask cluster.

Importing this package adds three methods to every ``Stream``:

* ``to_dask(client=None)`` - choose the client (else the default client,
  else an embedded ``LocalCluster`` started on first use);
* ``scatter()`` - the operators below run on the cluster, batched, many
  tasks in flight, consecutive steps fused into one task;
* ``gather()`` (defined by the core) - results come back in input order.

Examples
--------
>>> import streams_dask
>>> from streams import Stream
>>> hasattr(Stream, "scatter") and hasattr(Stream, "to_dask")
True
"""

from .nodes import Scatter, ToDask
from .runner import DaskTaskError
from .segment import DaskSegment

__all__ = ["DaskSegment", "DaskTaskError", "Scatter", "ToDask"]
