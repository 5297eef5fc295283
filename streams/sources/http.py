"""``Stream.from_http_server``: POST bodies received by a Tornado web server."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from ..core import Stream
from ..errors import short_repr
from .base import Source, listen, serve_here, stop_serving
from .tcp import check_port

__all__ = ["FromHttpServer"]


@Stream.register_api(staticmethod)
class FromHttpServer(Source[bytes]):
    """Serve HTTP and emit the body (bytes) of every POST to ``path``.

    The response is sent only after downstream has finished with the body,
    so a client that waits for its response before the next POST gets
    backpressure; a failure in the pipeline answers ``500`` with the error
    (the client knows its element was not processed). ``start()`` needs a
    running loop and binds at once, so :attr:`port` is known when it returns
    (pass ``port=0`` for a free port). ``stop()`` stops listening (a POST
    that arrives later is answered ``503``); the stream stays open until
    ``close()``. On a loop, ``await source.stop()`` also waits for the
    bodies in flight to be through the graph.

    Parameters
    ----------
    port : int
        The port to listen on; 0 picks a free one.
    path : str
        URL path pattern (a regular expression) that accepts POSTs.
    server_kwargs : dict, optional
        Extra arguments for ``tornado.httpserver.HTTPServer`` (they override
        the bounds below).
    address : str
        The interface to bind (loopback by default; streamz bound every
        interface). This and the arguments after it are keywords only: the
        third positional argument is ``server_kwargs``, as in streamz.
    max_body : int
        Largest body accepted, in bytes (8 MiB by default; a chunked body is
        cut off there too); a larger one is answered ``400`` without being
        read further.
    idle_timeout : float
        Seconds a connection may stay idle, or take to send a request's
        headers or body, before it is closed (60 by default): half-open
        clients do not hold descriptors for ever.
    max_connections : int
        Connections served at once; one more is closed as soon as it is
        accepted.
    max_in_flight : int
        Requests being processed at once; one more is answered ``503`` with
        ``Retry-After: 1`` (clients that wait for their responses get
        backpressure before that).

    Bodies are read into memory: at most ``max_in_flight`` of ``max_body``
    bytes each.

    Examples
    --------
    >>> import asyncio
    >>> from tornado.httpclient import AsyncHTTPClient
    >>> from streams import Stream
    >>> source = Stream.from_http_server(0, path="/ingest")
    >>> L = source.map(bytes.decode).sink_to_list()
    >>> async def main():
    ...     source.start()
    ...     client = AsyncHTTPClient()
    ...     url = f"http://127.0.0.1:{source.port}/ingest"
    ...     for body in ["a", "b"]:
    ...         response = await client.fetch(url, method="POST", body=body)
    ...     source.stop()
    ...     return response.code
    >>> asyncio.run(main())
    200
    >>> L
    ['a', 'b']
    """

    # _handlers: the tasks of the requests in flight (what stop() waits for).
    __slots__ = ("_handlers", "_in_flight", "_server", "address", "idle_timeout", "max_body",
                 "max_connections", "max_in_flight", "path", "port", "refused", "server_kwargs")
    _operator = "from_http_server"
    _params = ("port", "path", "address")

    def __init__(self, port: int, path: str = "/.*",
                 server_kwargs: dict[str, Any] | None = None, *, address: str = "127.0.0.1",
                 start: bool = False,
                 max_body: int = 8 * 2**20, idle_timeout: float = 60.0,
                 max_connections: int = 256, max_in_flight: int = 64,
                 **kwargs: Any) -> None:
        for name, value in (("max_body", max_body), ("max_connections", max_connections),
                            ("max_in_flight", max_in_flight)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"from_http_server(): {name} must be an int >= 1, got "
                                 f"{value!r}")
        if not isinstance(address, str):
            raise TypeError(f"from_http_server(): address must be a str (the interface to "
                            f"bind), got {address!r:.80}")
        if not idle_timeout > 0:
            raise ValueError(f"from_http_server(): idle_timeout must be > 0 seconds, got "
                             f"{idle_timeout!r}")
        self.max_body = max_body
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.max_in_flight = max_in_flight
        self._in_flight = 0
        self._handlers: set[asyncio.Task[Any]] = set()
        #: Connections closed at once, and requests answered 503, for being over the bounds.
        self.refused = 0
        self.port = check_port("from_http_server", port)
        if not isinstance(path, str):
            raise TypeError(f"from_http_server(): path must be a str (a regular expression "
                            f"of the paths served), got {path!r:.80}")
        try:  # tornado compiles it only at start(): a bad one fails here, when built
            re.compile(path)
        except re.error as e:
            raise ValueError(f"from_http_server(): path {path!r} is not a regular "
                             f"expression: {e}") from None
        self.path = path
        self.address = address
        self.server_kwargs = dict(server_kwargs or {})
        self._server: Any = None
        super().__init__(start=start, **kwargs)

    def start(self) -> None:
        """Bind the port and start serving (needs a running loop)."""
        from tornado.httpserver import HTTPServer
        from tornado.web import Application, RequestHandler

        if not serve_here(self):
            return
        source = self

        class _Ingest(RequestHandler):
            async def post(self) -> None:
                if source.stopped:
                    self.set_status(503)
                    self.finish("stopped\n")
                    return
                if source._in_flight >= source.max_in_flight:
                    source.refused += 1
                    self.set_status(503)
                    self.set_header("Retry-After", "1")
                    self.finish("busy\n")
                    return
                source._in_flight += 1
                task = asyncio.current_task()
                if task is not None:
                    source._handlers.add(task)
                try:
                    pending = source._push(self.request.body)
                    if pending is not None:
                        await pending
                except Exception as e:
                    self.set_status(500)
                    self.finish(f"{type(e).__name__}: {short_repr(str(e))}\n")
                    return
                finally:
                    source._in_flight -= 1
                    source._handlers.discard(task)
                self.finish("OK")

        class _Server(HTTPServer):
            def handle_stream(self, stream: Any, address: Any) -> None:
                # Tornado's own set of open connections.
                if len(self._connections) >= source.max_connections:
                    source.refused += 1
                    stream.close()
                    return
                super().handle_stream(stream, address)

        options = {"max_body_size": self.max_body, "idle_connection_timeout": self.idle_timeout,
                   "body_timeout": self.idle_timeout, **self.server_kwargs}
        listen(self, _Server(Application([(self.path, _Ingest)]), **options))

    def stop(self) -> Any:
        """Stop listening; the stream stays open.

        On a loop, returns an awaitable (awaiting it is optional) that is
        done once the bodies in flight are through the graph; otherwise
        None. See :func:`streams.sources.base.stop_serving`.
        """
        return stop_serving(self)

    @property
    def server(self) -> Any:
        """The Tornado server while listening, else None (streamz's attribute)."""
        return self._server
