"""Run parts of a stream graph on a Dask cluster.

Importing this package adds three methods to every ``Stream``:

* ``to_dask(client=None)`` - choose the client (else the default client,
  else an embedded ``LocalCluster`` started on first use);
* ``scatter()`` - the operators below run on the cluster, batched, many
  tasks in flight, consecutive steps fused into one task;
* ``gather()`` (defined by the core) - results come back in input order.

streamz's names are here too: ``scatter`` and ``gather`` (the node
classes: ``scatter(source)`` is ``source.scatter()``) and ``DaskStream``.

Examples
--------
>>> import streams_dask
>>> from streams import Stream
>>> hasattr(Stream, "scatter") and hasattr(Stream, "to_dask")
True
>>> source = Stream()
>>> type(streams_dask.scatter(source)) is type(source.scatter())
True
"""

from streams import Stream as DaskStream
from streams.operators.gather import Gather

from .nodes import Scatter
from .runner import DaskTaskError
from .segment import DaskSegment
from .to_dask import ToDask

#: streamz's names. Nodes between ``scatter()`` and ``gather()`` are the
#: core's own (they run on workers), so streamz's ``DaskStream`` base class
#: is ``streams.Stream``.
scatter = Scatter
gather = Gather

__all__ = ["DaskSegment", "DaskStream", "DaskTaskError", "Scatter", "ToDask", "gather",
           "scatter"]
