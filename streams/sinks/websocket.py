"""``Stream.to_websocket``: send every element over a websocket (``websockets``)."""

from __future__ import annotations

import asyncio
from typing import Any

from ..core import Stream
from ..sources.websocket import import_websockets
from .ordered import LoopLock

__all__ = ["ToWebsocket"]

#: Closings started by destroy() on a running loop, held until done (a task
#: only weakly referenced by the loop may be collected before it runs).
_closing: set[asyncio.Future[None]] = set()


def _open_state() -> Any:
    """The state of a websockets connection that can send."""
    from websockets.protocol import State

    return State.OPEN


@Stream.register_api()
class ToWebsocket(Stream[Any]):
    """Send each element (str or bytes) as one message to the websocket at ``uri``.

    The connection is opened on the first element and kept; ``await emit``
    resolves once the message is written (a synchronous ``emit`` returns
    then). A connection that fails, or an element that is neither str nor
    bytes, raises through the node's error policy, naming the node (streamz
    sent iterables as fragmented messages and wrote to a closed connection
    silently). A connection the server has closed, or that failed, is
    dropped: the next element opens a new one, so a restarted server gets
    the elements sent after it is back. The end of the stream
    (``close()``) or ``destroy()`` closes the connection.

    Elements are sent one at a time, in the order emitted, on the node's
    one connection, also when emits overlap (an asynchronous ``emit`` not
    awaited, a ``buffer`` upstream): streamz opened a connection for each
    element that arrived while the first was connecting, and left them open.

    Without a running loop the connection lives on the private loop that
    synchronous emits run on, which turns only while an element is being
    sent: there the client pings nothing by default (``ping_interval=None``)
    and a server that pings an idle client may close the connection; the
    next element then raises.

    Parameters
    ----------
    uri : str
        ``ws://host:port/path`` (``wss://`` for TLS).
    ws_kwargs : dict, optional
        Passed to ``websockets.asyncio.client.connect``.

    Examples
    --------
    >>> import asyncio
    >>> from streams import Stream
    >>> server = Stream.from_websocket("127.0.0.1", 0)
    >>> L = server.sink_to_list()
    >>> async def main():
    ...     got_two = asyncio.Event()
    ...     _ = server.sink(lambda x: len(L) == 2 and got_two.set())
    ...     server.start()
    ...     source = Stream(asynchronous=True)
    ...     source.to_websocket(f"ws://127.0.0.1:{server.port}")
    ...     for x in ["a", b"b"]:
    ...         await source.emit(x)
    ...     await source.aclose()  # closes the connection
    ...     await got_two.wait()
    ...     await server.stop()
    >>> asyncio.run(main())
    >>> L
    ['a', b'b']
    """

    __slots__ = ("_order", "_ws_loop", "uri", "ws", "ws_kw")
    _operator = "to_websocket"
    _local_only = "it holds a connection to the server, in this process"
    _params = ("uri", "ws_kwargs")
    _graphviz_shape = "trapezium"

    def __init__(self, upstream: Stream[Any], uri: str, ws_kwargs: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        if not isinstance(uri, str) or not uri.startswith(("ws://", "wss://")):
            raise ValueError(f"to_websocket(): uri must be a str starting with ws:// or wss://, "
                             f"got {uri!r}")
        if ws_kwargs is not None and not isinstance(ws_kwargs, dict):
            raise TypeError(f"to_websocket(): ws_kwargs must be a dict, got {ws_kwargs!r}")
        kwargs.pop("ensure_io_loop", None)  # streamz's; the send runs where emit runs
        self.uri = uri
        self.ws_kw = dict(ws_kwargs or {})  # streamz's attribute name
        #: The client connection once open, else None (streamz's attribute).
        self.ws: Any = None
        self._ws_loop: asyncio.AbstractEventLoop | None = None
        # Held while connecting and sending (first come, first served: the
        # order emitted).
        self._order = LoopLock()
        Stream.__init__(self, upstream, **kwargs)

    @property
    def ws_kwargs(self) -> dict[str, Any]:
        """The keywords given to ``connect()``."""
        return self.ws_kw

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if not isinstance(x, (str, bytes, bytearray, memoryview)):
            return self._fail(x, TypeError(
                f"to_websocket() sends str or bytes, got {type(x).__name__}: map the "
                "elements to one of those first"))
        return self._send(x)


    async def _send(self, x: Any) -> None:
        try:
            # Sends overlapping would each see no connection and open their own.
            async with self._order.get():
                ws = await self._connection()
                try:
                    await ws.send(x)
                except Exception:
                    if self.ws is ws and ws.state is not _open_state():
                        self.ws = None  # closed for good: the next element reconnects
                    raise
        except Exception as e:
            pending = self._fail(x, e)
            if pending is not None:
                await pending

    async def _connection(self) -> Any:
        loop = asyncio.get_running_loop()
        if self.ws is not None and self._ws_loop is not loop:
            self.ws = None  # the loop it was opened on is gone (asyncio.run ended)
        if self.ws is not None and self.ws.state is not _open_state():
            # Closed by the server (it stopped or restarted) or by a failure:
            # sending on it could only fail, a new connection may not.
            self.ws = None
        if self.ws is None:
            import_websockets("to_websocket")
            from websockets.asyncio.client import connect

            options: dict[str, Any] = {"ping_interval": None, "proxy": None, **self.ws_kw}
            try:
                self.ws = await connect(self.uri, **options)
            except OSError as e:
                raise ConnectionError(f"{self._label()}: cannot connect to {self.uri}: "
                                      f"{e}") from e
            self._ws_loop = loop
        return self.ws

    async def _close_connection(self) -> None:
        async with self._order.get():  # after the sends queued before it
            ws, self.ws = self.ws, None
            if ws is not None:
                await ws.close()

    def _flush(self) -> Any:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        # A send in progress here (destroy() during it) may be opening the
        # first connection: closing after it closes that one.
        opening = self._order.held()
        if self.ws is None and not opening:
            return None
        loop = self._ws_loop
        if loop is not None and loop is not running and loop.is_running():
            # Opened on another thread's loop (the loop thread): close it there.
            asyncio.run_coroutine_threadsafe(self._close_connection(), loop).result(30)
            return None
        if running is None:
            if loop is not None and not loop.is_closed():
                loop.run_until_complete(self._close_connection())  # the private loop, idle
            self.ws = None
            return None
        return self._close_connection()

    def destroy(self, streams: list[Stream[Any]] | None = None) -> None:
        super().destroy(streams)
        if streams is None:
            pending = self._flush()
            if pending is not None:
                task = asyncio.ensure_future(pending)
                _closing.add(task)
                task.add_done_callback(_closing.discard)
