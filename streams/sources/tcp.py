"""``Stream.from_tcp``: delimited messages received by a Tornado TCP server."""

from __future__ import annotations

from typing import Any

from ..core import Stream
from .base import Source, listen, require_loop

__all__ = ["FromTcp"]


@Stream.register_api(staticmethod)
class FromTcp(Source):
    """Listen on a TCP port and emit each delimited message (bytes, delimiter included).

    Each connection is read one message at a time, and the next is read
    only after downstream has finished with the previous one: a slow
    pipeline stops reading, the socket buffers fill and TCP flow control
    slows the sender (backpressure). ``start()`` needs a running loop (Tornado's
    IOLoop is asyncio's) and binds at once, so :attr:`port` is known when it
    returns (pass ``port=0`` for a free port). ``stop()`` stops listening and
    closes the open connections; the stream stays open until ``close()``.

    Parameters
    ----------
    port : int
        The port to listen on; 0 picks a free one.
    delimiter : bytes
        What ends a message.
    address : str
        The interface to bind (loopback by default; streamz bound every
        interface).
    server_kwargs : dict, optional
        Extra arguments for ``tornado.tcpserver.TCPServer``.
    max_message : int
        Longest message accepted (1 MiB by default); a longer one closes its
        connection. It also bounds what is read ahead of the pipeline per
        connection.

    Examples
    --------
    >>> import asyncio
    >>> from streams import Stream
    >>> source = Stream.from_tcp(0)
    >>> L = source.sink_to_list()
    >>> async def main():
    ...     got_two = asyncio.Event()
    ...     _ = source.sink(lambda x: len(L) == 2 and got_two.set())
    ...     source.start()
    ...     reader, writer = await asyncio.open_connection("127.0.0.1", source.port)
    ...     writer.write(b"hello\\nworld\\n")
    ...     await writer.drain()
    ...     await got_two.wait()
    ...     writer.close()
    ...     source.stop()
    >>> asyncio.run(main())
    >>> L
    [b'hello\\n', b'world\\n']
    """

    __slots__ = ("_connections", "_server", "address", "delimiter", "max_message",
                 "port", "server_kwargs")
    _operator = "from_tcp"
    _params = ("port", "delimiter", "address")

    def __init__(self, port: int, delimiter: bytes = b"\n", address: str = "127.0.0.1",
                 server_kwargs: dict[str, Any] | None = None, start: bool = False,
                 max_message: int = 2**20, **kwargs: Any) -> None:
        if not isinstance(delimiter, bytes) or not delimiter:
            raise ValueError(f"from_tcp(): delimiter must be non-empty bytes, got {delimiter!r}")
        self.port = port
        self.delimiter = delimiter
        self.address = address
        self.server_kwargs = dict(server_kwargs or {})
        self.max_message = max_message
        self._server: Any = None
        self._connections: set[Any] = set()
        super().__init__(start=start, **kwargs)

    def start(self) -> None:
        """Bind the port and start accepting connections (needs a running loop)."""
        from tornado.tcpserver import TCPServer

        if self._server is not None:
            return
        from ..loop_thread import call_in_loop_thread, io_loop, running_io_loop

        if running_io_loop() is None:  # as streamz: serve from the shared loop thread
            self.loop = io_loop()
            call_in_loop_thread(self.start)
            return
        require_loop(self)
        source = self

        class _Server(TCPServer):
            async def handle_stream(self, stream: Any, address: Any) -> None:
                await source._serve(stream)

        listen(self, _Server(max_buffer_size=self.max_message, **self.server_kwargs))

    async def _serve(self, stream: Any) -> None:
        from tornado.iostream import StreamClosedError

        self._connections.add(stream)
        try:
            while not self.stopped:
                try:
                    data = await stream.read_until(self.delimiter, max_bytes=self.max_message)
                except StreamClosedError:
                    break
                pending = self._push(data)
                if pending is not None:
                    await pending
        finally:
            self._connections.discard(stream)
            stream.close()

    def stop(self) -> None:
        """Stop listening and close open connections; the stream stays open."""
        from ..loop_thread import call_in_loop_thread, in_loop_thread, io_loop

        if self._server is not None and self.loop is io_loop() and not in_loop_thread():
            call_in_loop_thread(self.stop)  # the server belongs to the loop thread
            return
        super().stop()
        if self._server is not None:
            self._server.stop()
            self._server = None
        for stream in list(self._connections):
            stream.close()

    @property
    def server(self) -> Any:
        """The Tornado server while listening, else None (streamz's attribute)."""
        return self._server
