# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""Which Dask client a pipeline uses, and who owns it.

Resolution order: the client given to ``to_dask()``/``scatter()``, else
``distributed.default_client()``, else an embedded ``LocalCluster`` started
on first use (logged once) and shut down when the pipeline closes.

An asynchronous stream needs a client running on its own event loop; when
the resolved one is synchronous, a second, asynchronous client to the same
scheduler is opened, and closed with the pipeline.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from distributed import Client, LocalCluster, default_client

from .main_guard import check_main_guard

__all__ = ["Connection", "client_loop_running_here", "connect", "connect_async", "inform_loop"]

logger = logging.getLogger("streams_dask")


@dataclass
class Connection:
    """A client and what the pipeline must close when it ends."""

    client: Client
    owned: list[Any] = field(default_factory=list)

    def close(self) -> None:
        """Close what this pipeline started (never a client it was given)."""
        for thing in reversed(self.owned):
            thing.close()
        self.owned.clear()

    async def aclose(self) -> None:
        """Close, awaiting asynchronous clients and clusters."""
        for thing in reversed(self.owned):
            result = thing.close()
            if result is not None and hasattr(result, "__await__"):
                await result
        self.owned.clear()


def _embedded_cluster_kwargs() -> dict[str, Any]:
    # Worker processes, not threads: user functions are mostly pure Python
    # and would contend for the GIL. The dashboard takes a free port, never
    # a fixed one that another cluster may hold, on loopback like the
    # scheduler (":0" would serve it on every interface).
    return {"processes": True, "host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"}


def _announce(cluster: Any) -> None:
    logger.info(
        "streams_dask: no Dask client given and none running; started a LocalCluster "
        "at %s for this pipeline (closed with it). Pass to_dask(client) to use yours.",
        cluster.scheduler_address,
    )


def connect(client: Client | None) -> Connection:
    """Resolve the client for a synchronous pipeline.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as lc:
    ...     with Client(lc) as c:
    ...         connect(None).client is c
    True
    """
    if client is not None:
        return Connection(client)
    try:
        return Connection(default_client())
    except ValueError:
        pass
    check_main_guard()
    cluster = LocalCluster(**_embedded_cluster_kwargs())
    _announce(cluster)
    new = Client(cluster, set_as_default=False)
    return Connection(new, [cluster, new])


async def connect_async(client: Client | None) -> Connection:
    """Resolve the client for an asynchronous pipeline, on the running loop."""
    if client is None:
        try:
            client = default_client()
        except ValueError:
            client = None
    if client is not None:
        if client.asynchronous:
            return Connection(client)
        own = await Client(client.scheduler_info()["address"], asynchronous=True,
                           set_as_default=False)
        return Connection(own, [own])
    check_main_guard()
    cluster = await LocalCluster(asynchronous=True, **_embedded_cluster_kwargs())
    _announce(cluster)
    own = await Client(cluster, asynchronous=True, set_as_default=False)
    return Connection(own, [cluster, own])


def _known_client(client: Client | None) -> Client | None:
    """``client``, else the default client, else None."""
    if client is not None:
        return client
    try:
        return default_client()
    except ValueError:
        return None


def client_loop_running_here(client: Client | None) -> bool:
    """Whether this thread runs the event loop of ``client`` (or the default client)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    known = _known_client(client)
    return known is not None and getattr(known.loop, "asyncio_loop", None) is loop


def inform_loop(node: Any, client: Client | None) -> None:
    """As streamz: the nodes above ``scatter()`` know the client's loop.

    On an asynchronous stream that is the running loop (an asynchronous
    client runs there); on a synchronous one, the loop of the client known
    now (given, or the default client), if any. Only nodes with no loop yet
    get it, and not sources that run themselves: they choose a loop when
    they start.
    """
    from streams.loop_thread import running_io_loop

    loop = node.loop
    if loop is None and node.asynchronous:
        loop = running_io_loop()
    elif loop is None:
        known = _known_client(client)
        loop = None if known is None else known.loop
    if loop is None:
        return
    todo = [node]
    while todo:
        n = todo.pop()
        if n.loop is None and not hasattr(n, "_needs_loop"):
            n.loop = loop
        todo.extend(n.upstreams)
