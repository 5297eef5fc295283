"""``Stream.from_http_server``: POST bodies received by a Tornado web server."""

from __future__ import annotations

from typing import Any

from ..core import Stream
from ..errors import short_repr
from .base import Source, listen, require_loop

__all__ = ["FromHttpServer"]


@Stream.register_api(staticmethod)
class FromHttpServer(Source):
    """Serve HTTP and emit the body (bytes) of every POST to ``path``.

    The response is sent only after downstream has finished with the body,
    so a client that waits for its response before the next POST gets
    backpressure; a failure in the pipeline answers ``500`` with the error
    (the client knows its element was not processed). ``start()`` needs a
    running loop and binds at once, so :attr:`port` is known when it returns
    (pass ``port=0`` for a free port). ``stop()`` stops listening; the
    stream stays open until ``close()``.

    Parameters
    ----------
    port : int
        The port to listen on; 0 picks a free one.
    path : str
        URL path pattern (a regular expression) that accepts POSTs.
    address : str
        The interface to bind (loopback by default; streamz bound every
        interface).
    server_kwargs : dict, optional
        Extra arguments for ``tornado.httpserver.HTTPServer``.

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

    __slots__ = ("_server", "address", "path", "port", "server_kwargs")
    _operator = "from_http_server"
    _params = ("port", "path", "address")

    def __init__(self, port: int, path: str = "/.*", address: str = "127.0.0.1",
                 server_kwargs: dict[str, Any] | None = None, start: bool = False,
                 **kwargs: Any) -> None:
        self.port = port
        self.path = path
        self.address = address
        self.server_kwargs = dict(server_kwargs or {})
        self._server: Any = None
        super().__init__(start=start, **kwargs)

    def start(self) -> None:
        """Bind the port and start serving (needs a running loop)."""
        from tornado.httpserver import HTTPServer
        from tornado.web import Application, RequestHandler

        if self._server is not None:
            return
        from ..loop_thread import call_in_loop_thread, io_loop, running_io_loop

        if running_io_loop() is None:  # as streamz: serve from the shared loop thread
            self.loop = io_loop()
            call_in_loop_thread(self.start)
            return
        require_loop(self)
        source = self

        class _Ingest(RequestHandler):
            async def post(self) -> None:
                if source.stopped:
                    self.set_status(503)
                    self.finish("stopped\n")
                    return
                try:
                    pending = source._push(self.request.body)
                    if pending is not None:
                        await pending
                except Exception as e:
                    self.set_status(500)
                    self.finish(f"{type(e).__name__}: {short_repr(str(e))}\n")
                    return
                self.finish("OK")

        listen(self, HTTPServer(Application([(self.path, _Ingest)]), **self.server_kwargs))

    def stop(self) -> None:
        """Stop listening; the stream stays open."""
        from ..loop_thread import call_in_loop_thread, in_loop_thread, io_loop

        if self._server is not None and self.loop is io_loop() and not in_loop_thread():
            call_in_loop_thread(self.stop)  # the server belongs to the loop thread
            return
        super().stop()
        if self._server is not None:
            self._server.stop()
            self._server = None

    @property
    def server(self) -> Any:
        """The Tornado server while listening, else None (streamz's attribute)."""
        return self._server
