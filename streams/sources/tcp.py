"""``Stream.from_tcp``: delimited messages received by a Tornado TCP server."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..clock import get_clock
from ..core import Stream
from .base import Source, listen, serve_here, stop_serving

logger = logging.getLogger("streams")

__all__ = ["FromTcp", "check_port"]


def check_port(operator: str, port: Any) -> int:
    """``port`` if it is a TCP port number (0 for a free one); else a clear error.

    The operating system takes a port modulo 65536: 70000 would bind 4464.

    Examples
    --------
    >>> check_port("from_tcp", 8080)
    8080
    >>> check_port("from_tcp", 70000)
    Traceback (most recent call last):
    ...
    ValueError: from_tcp(): port must be an int from 0 to 65535 (0 picks a free one), got 70000
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"{operator}(): port must be an int from 0 to 65535 (0 picks a free "
                         f"one), got {port!r}")
    return port


@Stream.register_api(staticmethod)
class FromTcp(Source[bytes]):
    """Listen on a TCP port and emit each delimited message (bytes, delimiter included).

    Each connection is read one message at a time, and the next is read
    only after downstream has finished with the previous one: a slow
    pipeline stops reading, the socket buffers fill and TCP flow control
    slows the sender (backpressure). ``start()`` needs a running loop (Tornado's
    IOLoop is asyncio's) and binds at once, so :attr:`port` is known when it
    returns (pass ``port=0`` for a free port). ``stop()`` stops listening and
    closes the open connections; the stream stays open until ``close()``.
    On a loop, ``await source.stop()`` also waits for the messages in
    flight to be through the graph.

    A connection's last message may lack the delimiter: when the client
    closes the connection, what it sent after its last delimiter is emitted
    as a message of its own (as ``from_textfile`` and ``from_process`` emit a
    last line without a newline). A connection closed by the server
    (``stop()``, ``idle_timeout``, a message longer than ``max_message``)
    emits nothing more.

    Parameters
    ----------
    port : int
        The port to listen on; 0 picks a free one.
    delimiter : bytes
        What ends a message.
    server_kwargs : dict, optional
        Extra arguments for ``tornado.tcpserver.TCPServer``.
    address : str
        The interface to bind (loopback by default; streamz bound every
        interface). This and the arguments after it are keywords only: the
        third positional argument is ``server_kwargs``, as in streamz.
    max_message : int
        Longest message accepted (1 MiB by default); a longer one closes its
        connection, and a warning says so. What is read ahead of the
        pipeline per connection is bounded by about twice that.
    idle_timeout : float, optional
        Seconds a connection may take to send its next complete message
        (time on :func:`streams.clock.get_clock`; the pipeline's own time
        does not count); a connection that takes longer is closed. None:
        no limit. Half-open and silent clients otherwise hold a file
        descriptor each for ever.
    max_connections : int
        Connections served at once; one more is closed as soon as it is
        accepted (the process keeps descriptors for everything else).

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

    # _handlers: the tasks serving the open connections (what stop() waits for).
    __slots__ = ("_connections", "_handlers", "_server", "address", "delimiter", "idle_timeout",
                 "max_connections", "max_message", "port", "refused", "server_kwargs")
    _operator = "from_tcp"
    _params = ("port", "delimiter", "address")

    def __init__(self, port: int, delimiter: bytes = b"\n",
                 server_kwargs: dict[str, Any] | None = None, *, address: str = "127.0.0.1",
                 start: bool = False, max_message: int = 2**20, idle_timeout: float | None = 300.0,
                 max_connections: int = 256, **kwargs: Any) -> None:
        if not isinstance(delimiter, bytes) or not delimiter:
            raise ValueError(f"from_tcp(): delimiter must be non-empty bytes, got {delimiter!r}")
        if not isinstance(address, str):
            raise TypeError(f"from_tcp(): address must be a str (the interface to bind), got "
                            f"{address!r:.80}")
        if isinstance(max_message, bool) or not isinstance(max_message, int) or max_message < 1:
            raise ValueError(f"from_tcp(): max_message must be an int >= 1 (bytes), got "
                             f"{max_message!r}")
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError(f"from_tcp(): idle_timeout must be > 0 seconds or None, got "
                             f"{idle_timeout!r}")
        if (isinstance(max_connections, bool) or not isinstance(max_connections, int)
                or max_connections < 1):
            raise ValueError(f"from_tcp(): max_connections must be an int >= 1, got "
                             f"{max_connections!r}")
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        #: How many connections were closed at once for being over ``max_connections``.
        self.refused = 0
        self.port = check_port("from_tcp", port)
        self.delimiter = delimiter
        self.address = address
        self.server_kwargs = dict(server_kwargs or {})
        self.max_message = max_message
        self._server: Any = None
        self._connections: set[Any] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        super().__init__(start=start, **kwargs)

    def start(self) -> None:
        """Bind the port and start accepting connections (needs a running loop)."""
        from tornado.tcpserver import TCPServer

        if not serve_here(self):
            return
        source = self

        class _Server(TCPServer):
            async def handle_stream(self, stream: Any, address: Any) -> None:
                await source._serve(stream)

        # The buffer holds a message and what the stream read ahead of it (the
        # next messages, in chunks of up to 64 KiB): max_message alone refused
        # two messages shorter than it that came together.
        # server_kwargs override it (streamz users pass max_buffer_size there).
        listen(self, _Server(**{"max_buffer_size": 2 * self.max_message + 2**16,
                                **self.server_kwargs}))

    async def _serve(self, stream: Any) -> None:
        from tornado.iostream import StreamClosedError, UnsatisfiableReadError

        if len(self._connections) >= self.max_connections:
            self.refused += 1
            stream.close()
            return
        self._connections.add(stream)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        clock = get_clock()
        timed_out: list[bool] = []

        def expire() -> None:
            timed_out.append(True)
            stream.close()

        try:
            while not self.stopped:
                if stream.closed():
                    # By the client (its end of file: no error), or by us (an idle
                    # timeout; stop() ends the loop): only the client's end of
                    # file completes what it sent last.
                    if isinstance(stream.error, UnsatisfiableReadError):
                        # Tornado closed it: no delimiter within max_message.
                        logger.warning("%s: a message longer than max_message=%d bytes; its "
                                       "connection is closed", self._label(), self.max_message)
                    elif stream.error is None and not timed_out:
                        await self._emit_rest(stream)
                    break
                timer = (None if self.idle_timeout is None
                         else clock.call_later(self.idle_timeout, expire))
                try:
                    data = await stream.read_until(self.delimiter, max_bytes=self.max_message)
                except StreamClosedError:
                    continue  # what is still buffered is read above

                finally:
                    if timer is not None:
                        timer.cancel()
                pending = self._push(data)
                if pending is not None:
                    await pending
        finally:
            self._connections.discard(stream)
            self._handlers.discard(task)
            stream.close()

    async def _emit_rest(self, stream: Any) -> None:
        """Emit the messages a closed connection left buffered, the last one undelimited."""
        from tornado.iostream import StreamClosedError

        try:
            # On a closed stream, a read returns what is buffered, at once
            # (a read_until would fail even with a delimited message there).
            rest = await stream.read_until_close()
        except StreamClosedError:
            return
        while rest and not self.stopped:
            end = rest.find(self.delimiter)
            end = len(rest) if end < 0 else end + len(self.delimiter)
            message, rest = rest[:end], rest[end:]
            pending = self._push(message)
            if pending is not None:
                await pending

    def stop(self) -> Any:
        """Stop listening and close open connections; the stream stays open.

        On a loop, returns an awaitable (awaiting it is optional) that is
        done once the messages in flight are through the graph; otherwise
        None. See :func:`streams.sources.base.stop_serving`.
        """
        return stop_serving(self, self._close_connections)

    def _close_connections(self) -> None:
        for stream in list(self._connections):
            stream.close()

    @property
    def server(self) -> Any:
        """The Tornado server while listening, else None (streamz's attribute)."""
        return self._server
