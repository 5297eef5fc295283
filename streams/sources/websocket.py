"""``Stream.from_websocket``: messages received by a websocket server (``websockets``)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
from typing import Any
from urllib.parse import unquote

from ..core import Stream
from ..loop_thread import start_task
from .base import Source, _InFlight, require_loop
from .tcp import check_port

__all__ = ["FromWebsocket", "import_websockets"]

logger = logging.getLogger("streams")

#: Server closings in progress, held until done (the loop references a task
#: only weakly, and a handler that stops its source does not await its closing).
_closing: set[asyncio.Future[None]] = set()


def import_websockets(operator: str) -> Any:
    """The ``websockets`` package, or an ImportError saying what to install."""
    try:
        import websockets
    except ImportError:
        raise ImportError(f"{operator}() needs websockets: pip install 'streams[websocket]' "
                          "(or websockets)") from None
    return websockets


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``'s first address (port 0: a free one)."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                  flags=socket.AI_PASSIVE)[0]
    return socket.create_server(address[:2], family=family)


@Stream.register_api(staticmethod)
class FromWebsocket(Source[Any]):
    """Serve websockets on ``host:port`` and emit every message received (str or bytes).

    Each connection's next message is read only after downstream has
    finished with the previous one: a slow pipeline stops reading, and
    websockets' flow control slows the sender (backpressure). ``start()``
    binds at once, so :attr:`port` is known when it returns (pass ``port=0``
    for a free one); with no loop running it serves from the shared loop
    thread, as streamz does, and ``start=True`` is allowed (a message
    arriving before a node is attached goes nowhere, as in streamz).
    ``stop()`` stops listening and closes the open connections; the stream
    stays open until ``close()``. A message the pipeline fails on closes its
    connection with code 1011 and the error as reason, and is logged: the
    client knows.

    Parameters
    ----------
    host : str
        The interface to bind, typically ``"localhost"``.
    port : int
        The port to listen on; 0 picks a free one.
    serve_kwargs : dict, optional
        Passed to ``websockets.asyncio.server.serve`` (``max_size``...).
    path : str, optional
        Serve only clients connecting to this path (``"/prices"``; compared
        percent-decoded, without the query string, so ``/a%20b`` is ``"/a
        b"``); others are answered ``404 Not Found`` and never reach the
        pipeline. None (the default, as streamz) serves every path.
    max_connections : int
        Connections served at once; one more is closed at once with code
        1013 (try again later).

    Examples
    --------
    >>> import asyncio
    >>> from websockets.asyncio.client import connect
    >>> from streams import Stream
    >>> source = Stream.from_websocket("127.0.0.1", 0)
    >>> L = source.sink_to_list()
    >>> async def main():
    ...     source.start()
    ...     async with connect(f"ws://127.0.0.1:{source.port}") as ws:
    ...         await ws.send("hello")
    ...         await ws.send(b"world")
    ...     await source.stop()
    >>> asyncio.run(main())
    >>> L
    ['hello', b'world']

    Only one path served, as ``Stream.from_uri("ws://127.0.0.1:0/prices")``:

    >>> from websockets.exceptions import InvalidStatus
    >>> source = Stream.from_websocket("127.0.0.1", 0, path="/prices")
    >>> L = source.sink_to_list()
    >>> async def main():
    ...     source.start()
    ...     async with connect(f"ws://127.0.0.1:{source.port}/prices") as ws:
    ...         await ws.send("1.5")
    ...     try:
    ...         await connect(f"ws://127.0.0.1:{source.port}/other")
    ...     except InvalidStatus as e:
    ...         print(e.response.status_code)
    ...     await source.stop()
    >>> asyncio.run(main())
    404
    >>> L
    ['1.5']
    """

    # _handlers: the tasks serving the open connections (see base._InFlight).
    __slots__ = ("_connections", "_handlers", "_serving", "_sock", "host", "max_connections",
                 "path", "port", "refused", "s_kw", "server")
    _operator = "from_websocket"
    _params = ("host", "port", "serve_kwargs", "max_connections", "path")

    def __init__(self, host: str, port: int, serve_kwargs: dict[str, Any] | None = None,
                 max_connections: int = 256, start: bool = False, path: str | None = None,
                 **kwargs: Any) -> None:
        if not isinstance(host, str) or not host:
            raise ValueError(f"from_websocket(): host must be a non-empty str, got {host!r}")
        if (isinstance(max_connections, bool) or not isinstance(max_connections, int)
                or max_connections < 1):
            raise ValueError(f"from_websocket(): max_connections must be an int >= 1, got "
                             f"{max_connections!r}")
        if serve_kwargs is not None and not isinstance(serve_kwargs, dict):
            raise TypeError(f"from_websocket(): serve_kwargs must be a dict, got "
                            f"{serve_kwargs!r}")
        if path is not None and (not isinstance(path, str) or not path.startswith("/")
                                 or "?" in path):
            raise ValueError(f"from_websocket(): path must be a str starting with '/' and "
                             f"holding no query ('?'), or None for every path; got {path!r}")
        #: The only path served, or None for every path.
        self.path = path
        self.host = host
        self.port = check_port("from_websocket", port)
        self.s_kw = dict(serve_kwargs or {})  # streamz's attribute name
        self.max_connections = max_connections
        #: Connections closed at once for being over ``max_connections``.
        self.refused = 0
        #: The websockets server while serving, else None (streamz's attribute).
        self.server: Any = None
        self._sock: socket.socket | None = None
        self._serving: asyncio.Future[None] | None = None
        self._connections: set[Any] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        # A server loses nothing to starting before the graph is built (unlike
        # a finite source, which Source refuses to start early).
        super().__init__(start=False, **kwargs)
        if start:
            self.start()

    @property
    def serve_kwargs(self) -> dict[str, Any]:
        """The keywords given to ``serve()``."""
        return self.s_kw

    def start(self) -> None:
        """Bind the port and start serving (on the loop thread when none is running)."""
        if self._sock is not None:
            return
        import_websockets("from_websocket")
        from ..loop_thread import call_in_loop_thread, io_loop, running_io_loop

        running = running_io_loop()
        if running is None:  # as streamz: serve from the shared loop thread
            self.loop = io_loop()
            call_in_loop_thread(self.start)
            return
        require_loop(self)
        self._sock = sock = _bind(self.host, self.port)
        self.port = sock.getsockname()[1]
        self.loop = running  # where the server lives: stop() from elsewhere is handed there
        self.started, self.stopped = True, False
        self._serving = asyncio.ensure_future(self._serve(sock))

    async def _serve(self, sock: socket.socket) -> None:
        from websockets.asyncio.server import serve

        # Not serving yet: until self.server is set (in this first step of the
        # task, which does not yield before), stop() may close the socket itself.
        options = {**self.s_kw, "start_serving": False}
        if self.path is not None:
            options["process_request"] = self._only_path(self.path,
                                                         self.s_kw.get("process_request"))
        server = await serve(self._handle, sock=sock, **options)
        self.server = server
        await server.start_serving()

    @staticmethod
    def _only_path(path: str, given: Any) -> Any:
        """A ``process_request`` answering 404 but to ``path``, after ``given`` (the user's)."""
        from http import HTTPStatus

        # As the client sends it (/a%20b) against the path as given (/a b).
        wanted = unquote(path)

        async def process_request(connection: Any, request: Any) -> Any:
            if given is not None:
                response = given(connection, request)
                if inspect.isawaitable(response):
                    response = await response
                if response is not None:
                    return response
            if unquote(request.path.partition("?")[0]) != wanted:
                return connection.respond(HTTPStatus.NOT_FOUND,
                                          f"this server serves {path} only\n")
            return None

        return process_request

    async def _handle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        if len(self._connections) >= self.max_connections:
            self.refused += 1
            await ws.close(1013, "too many connections")
            return
        self._connections.add(ws)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            while not self.stopped:
                try:
                    message = await ws.recv()
                except ConnectionClosed:
                    return
                try:
                    pending = self._push(message)
                    if pending is not None:
                        await pending
                except Exception as e:
                    logger.error("%s failed on a message: %s: %s", self._label(),
                                 type(e).__name__, e)
                    # The close reason is limited to 123 bytes by the protocol.
                    reason = str(e).encode()[:120].decode(errors="ignore")
                    await ws.close(1011, reason)
                    return
        finally:
            self._connections.discard(ws)
            self._handlers.discard(task)

    def stop(self) -> Any:
        """Stop listening and close the open connections; the stream stays open.

        The port is free when it returns: ``start()`` may follow at once. On a
        running loop, returns an awaitable of the connections' closing
        (awaiting it is optional); from another thread, waits for it. A node
        of the source's own graph may await it (a coroutine sink that stops
        its source): from a connection's handler it is done at once, and the
        server finishes closing once that handler has returned.
        """
        if self._sock is not None and self._serves_elsewhere():
            # The server belongs to its loop's thread (the loop thread): stop it there.
            start_task(self._stop_and_wait(), self.loop).result(30)
            return None
        Source.stop(self)  # no element is taken from now on
        sock, self._sock = self._sock, None
        serving, self._serving = self._serving, None
        server, self.server = self.server, None
        if sock is None:
            return None
        failed = None
        if server is None:
            # _serve has not run yet, or failed (serve_kwargs): nothing listens
            # on the socket.
            if serving is not None and serving.done():
                failed = serving
            elif serving is not None:
                serving.cancel()
            sock.close()
        else:
            # asyncio's server stops listening and closes the socket now (its
            # close() is synchronous); websockets' closes the connections in a task.
            server.server.close()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None  # the loop it served on has ended: nothing runs there any more
        if server is None:  # awaiting it raises what made _serve fail, if anything
            return failed if failed is not None else asyncio.ensure_future(asyncio.sleep(0))
        server.close()
        closed = asyncio.ensure_future(self._server_closed(server, serving))
        _closing.add(closed)
        closed.add_done_callback(_closing.discard)
        return _InFlight(set(self._handlers), closed)

    async def _stop_and_wait(self) -> None:
        pending = self.stop()
        if pending is not None:
            await pending

    @staticmethod
    async def _server_closed(server: Any, serving: asyncio.Future[None] | None) -> None:
        if serving is not None:
            await serving  # its last step, after the server started serving
        await server.wait_closed()

    def _serves_elsewhere(self) -> bool:
        """Whether the server runs on another thread's loop (the loop thread's).

        Compares with the loop it was started on, without asking
        streams.loop_thread for its loop, which would start the thread.
        """
        loop = getattr(self.loop, "asyncio_loop", None)
        if loop is None or not loop.is_running():
            return False
        try:
            return asyncio.get_running_loop() is not loop
        except RuntimeError:
            return True
