"""``sink_to_redis``: add elements to a Redis stream with batched ``XADD``.

Elements are buffered and written ``batch`` at a time in one round trip
(one script call, or a pipeline of ``XADD`` commands). The buffer is also
written before a checkpoint, before the source acknowledges the entries that
produced it, and when the stream closes, so a crash loses nothing that was
acknowledged. A process that exits without closing the stream writes the
buffer of a synchronous sink at exit; what it cannot write there (the
buffer of a sink on a loop that is gone, a write that fails) is reported
in a warning naming the sink and how many elements were not written.

Without a :class:`~streams.state.Checkpointer` delivery is at least once:
after a crash, entries written since the last acknowledgement are written
again. Under a Checkpointer it is exactly once: the sink numbers the
elements it writes (the count is part of each checkpoint) and every batch
records, in the same atomic step as its ``XADD`` commands (the script, or a
``MULTI``/``EXEC`` transaction), the number of the last element written in a
hash of its own (``<stream>:written`` unless ``seq_key=`` says otherwise),
under a writer name drawn when the pipeline starts afresh (one small field
per fresh start). A pipeline restored from a checkpoint keeps its writer
name and numbers the elements it replays as it did before the crash, and
the server skips those already written. This needs a deterministic
pipeline (the same elements in the same order after a restore), which is
what a checkpoint promises anyway.

Fed by ``from_redis`` without a loop, a batch is sent without waiting for the
server's reply: the source reads it a round later (``_barrier_confirm``),
before acknowledging the entries, so Redis adds one batch while this process
works on the next. A write that failed is then reported at the next write,
confirmation or close, naming its element as always.
"""

from __future__ import annotations

import asyncio
import atexit
import warnings
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ..core import Stream
from ..fusion import Fuser
from ..sources.redis_client import check_url, twin
from .redis_script import XADD_MANY, script_args
from .redis_values import all_writable, name_the_field, writable

__all__ = ["SinkToRedis"]

_hiredis_pack: Callable[..., bytes] | None
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - depends on the environment
    _hiredis_pack = None

#: Every sink alive: at exit, those still holding elements write or report them.
_sinks: weakref.WeakSet[SinkToRedis] = weakref.WeakSet()


def _write_held_at_exit() -> None:
    for sink in list(_sinks):
        sink._write_at_exit()


atexit.register(_write_held_at_exit)


@Stream.register_api()
class SinkToRedis(Stream[Any]):
    """Add each element to a Redis stream (``XADD``), in pipelined batches.

    Parameters
    ----------
    stream : str
        The Redis stream's key.
    maxlen : int, optional
        Trim the stream to about this many entries (``MAXLEN ~``).
    approximate : bool
        ``False`` trims to exactly ``maxlen`` (slower for Redis).
    url : str
        The server (``redis://``, ``rediss://`` or ``unix://``); or pass ``client``.
    client : redis.Redis or redis.asyncio.Redis, optional
        A client to write with. One of the other kind than where the sink
        writes (a ``redis.Redis`` on a loop, a ``redis.asyncio.Redis``
        without one) lends its connection settings to a client of the
        right kind, to the same server, database and credentials, which
        the sink closes with the stream; the one given is left open.
    batch : int
        Elements per round trip.
    field : str
        A dict element is written as the entry's fields; any other element
        ``x`` as ``{field: x}``. Values must be ``str``, ``bytes``, ``int`` or
        ``float`` (map ``json.dumps`` first otherwise).
    method : {"script", "pipeline"}
        How a batch travels: ``"script"`` sends one call of a small Lua
        script that runs the batch's ``XADD`` commands (one round trip, one
        reply: the fastest); ``"pipeline"`` pipelines one ``XADD`` command
        per element (for servers where scripts are not allowed).
    seq_key : str, optional
        Under a :class:`~streams.state.Checkpointer`, the hash where each
        batch records the number of the last element written (see the
        module docs); default ``"<stream>:written"``.

    On an asynchronous stream a full batch is written on the running loop
    and ``await emit`` waits for it (backpressure).

    Examples
    --------
    Nothing connects before the first element, so a graph builds without a server:

    >>> from streams import Stream
    >>> sink = Stream().sink_to_redis("numbers", maxlen=100_000)
    >>> spec = sink.describe()
    >>> spec.operator, spec.params["stream"], spec.params["maxlen"]
    ('sink_to_redis', 'numbers', 100000)

    Against a running server (not run here)::

        source = Stream.from_iterable({"n": i} for i in range(10))
        source.sink_to_redis("numbers", maxlen=100_000, url="redis://localhost:6379/0")
        source.start()
    """

    __slots__ = ("_aclient", "_aloop", "_ascript", "_buffer", "_client", "_confirmed", "_conn",
                 "_deferring", "_given", "_inflight", "_script", "_sent", "approximate", "batch",
                 "field", "maxlen", "method", "seq_key", "stream", "url", "writer", "written")
    _operator = "sink_to_redis"
    _local_only = "its side effects belong in this process"
    _params = ("stream", "maxlen", "approximate", "batch", "field", "method", "seq_key")
    # Under a Checkpointer: who writes, and how many elements it has handed to writes.
    _state = ("writer", "written")
    _state_params = ("stream",)  # what it wrote to that stream
    _graphviz_shape = "trapezium"

    def __init__(self, upstream: Stream[Any], stream: str, maxlen: int | None = None,
                 approximate: bool = True, url: str = "redis://localhost:6379/0",
                 client: Any = None, batch: int = 1000, field: str = "data",
                 method: str = "script", seq_key: str | None = None, **kwargs: Any) -> None:
        try:
            import redis.asyncio
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("sink_to_redis() needs redis-py: pip install 'streams[redis]'") from e
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"sink_to_redis(): batch must be an int >= 1, got {batch!r}")
        if maxlen is not None and (isinstance(maxlen, bool) or not isinstance(maxlen, int)
                                   or maxlen < 1):
            raise ValueError(f"sink_to_redis(): maxlen must be an int >= 1, got {maxlen!r}")
        if method not in ("script", "pipeline"):
            raise ValueError(
                f"sink_to_redis(): method must be 'script' or 'pipeline', got {method!r}")
        self.stream = stream
        self.method = method
        self.maxlen = maxlen
        self.approximate = approximate
        self.url = check_url("sink_to_redis", url)
        self.batch = batch
        self.field = field
        self.seq_key = seq_key if seq_key is not None else f"{stream}:written"
        #: The writer name under which batches record their last element
        #: number ('' until a Checkpointer covers this sink: nothing numbered).
        self.writer = ""
        #: How many elements were handed to writes (the last one's number).
        self.written = 0
        # The clients written with, without a loop and on one. Those made
        # here (from ``url``, or from a client given of the other kind) are
        # closed when the stream closes, not the one ``_given``; an asyncio
        # one serves the loop it was made on (``_aloop``), so a graph run
        # under one asyncio.run() and then another gets a new one.
        self._given = client
        self._client: Any = None
        self._aclient: Any = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        if isinstance(client, redis.asyncio.Redis):
            self._aclient = client
        else:
            self._client = client
        self._script: Any = None
        self._ascript: Any = None
        self._buffer: list[Any] = []
        # Writes sent whose reply is still to be read (their elements, for
        # the error message), on the connection held meanwhile; how many
        # writes were sent and confirmed; whether a source confirms them
        # later (set by from_redis while it runs without a loop).
        self._inflight: deque[tuple[list[Any], int]] = deque()
        self._conn: Any = None
        self._sent = 0
        self._confirmed = 0
        self._deferring = False
        Stream.__init__(self, upstream, **kwargs)
        _sinks.add(self)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        buf = self._buffer
        buf.append(x)
        if len(buf) >= self.batch:
            return self._write()
        return None

    def _fusable(self) -> bool:
        return True

    def _fuse(self, f: Fuser, x: str) -> str | None:
        buf = f.bind(self._buffer, "buffer")
        node = f.bind(self, "node")
        # _write swaps the buffer for a new list, so the bound one is reused:
        # it is emptied in place instead (see _write).
        f.line(f"{buf}.append({x})\nif len({buf}) >= {node}.batch:\n    return {node}._write()")
        return None

    def _barrier(self) -> Any:
        """Write what is buffered and confirm every write (before acks and checkpoints)."""
        pending = self._write() if self._buffer else None
        self._barrier_confirm(self._sent)
        return pending

    def _barrier_send(self) -> int:
        """Send what is buffered (no loop running); return a token for :meth:`_barrier_confirm`."""
        if self._buffer:
            self._write()
        return self._sent

    def _barrier_confirm(self, token: int) -> None:
        """Read the replies of the writes sent up to ``token`` (raising their errors)."""
        while self._confirmed < token and self._inflight:
            self._read_reply()

    def _flush(self) -> Any:
        try:
            pending = self._barrier()
        except BaseException:
            self._close_own()
            raise
        if pending is None and not self._own_async_here():
            self._close_own()
            return None
        return self._close_after(pending)

    async def _close_after(self, pending: Any) -> None:
        try:
            if pending is not None:
                await pending
        finally:
            await self._close_own_async()

    def _own_async_here(self) -> bool:
        """Whether an asyncio client made here serves the running loop (closed on it)."""
        if self._aclient is None or self._aclient is self._given:
            return False
        try:
            return self._aloop is asyncio.get_running_loop()
        except RuntimeError:
            return False

    def _close_own(self) -> None:
        """Close the clients made here (not one given as ``client=``).

        An asyncio client is closed on its loop (:meth:`_close_own_async`); one
        of a loop not running here (gone, or another thread's) is let go.
        """
        client = self._client
        if client is not None and client is not self._given:
            self._client, self._script = None, None
            client.close()
        if self._aclient is not self._given:
            self._aclient, self._ascript, self._aloop = None, None, None

    async def _close_own_async(self) -> None:
        if self._own_async_here():
            aclient, self._aclient = self._aclient, None
            await aclient.aclose()
        self._close_own()

    def _attach_checkpointer(self, writer: str) -> None:
        """A Checkpointer covers this sink: number the elements as ``writer`` from now on."""
        self.writer = writer

    def _flat(self, items: list[Any], base: int) -> list[Any]:
        """The script's arguments for ``items``, numbered after ``base``."""
        return script_args(items, base, self.writer, self.maxlen, self.approximate, self.field)

    def _queue_numbered(self, pipe: Any, items: list[Any], base: int, last: Any) -> None:
        """Queue the XADDs of ``items`` (numbered after ``base``) the server lacks.

        ``last`` is the number the server records for this writer; when
        numbering, the batch's last number is recorded in the same
        transaction (the pipeline method's counterpart of the script).
        """
        if not self.writer:
            self._queue(pipe, items)
            return
        last = int(last or 0)
        self._queue(pipe, items[max(0, last - base):])
        if base + len(items) > last:
            pipe.hset(self.seq_key, self.writer, base + len(items))

    def _queue(self, pipe: Any, items: list[Any]) -> None:
        head: tuple[Any, ...] = ("XADD", self.stream, "*")
        if self.maxlen is not None:
            head = ("XADD", self.stream, "MAXLEN", "~" if self.approximate else "=",
                    self.maxlen, "*")
        for x in items:
            flat: list[Any] = []
            for kv in (x.items() if isinstance(x, dict) else ((self.field, x),)):
                flat.extend(kv)
            pipe.execute_command(*head, *flat)

    def _write(self) -> Any:
        items = self._buffer[:]
        self._buffer.clear()  # in place: compiled code holds this list
        # An element Redis cannot store fails alone, under the policy; the
        # others are written (numbered without it, as a replay numbers them).
        bad: list[Any] = []
        if not all_writable(items):
            kept: list[Any] = []
            for x in items:
                (kept if writable(x) else bad).append(x)
            items = kept
        base = self.written
        self.written = base + len(items)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if items:
                self._write_sync(items, base)
            if bad:
                self._fail_unwritable(bad)
            return None
        if bad:
            return self._write_then_fail(items, base, bad)
        return self._write_async(items, base)

    async def _write_then_fail(self, items: list[Any], base: int, bad: list[Any]) -> None:
        if items:
            await self._write_async(items, base)
        self._fail_unwritable(bad)

    def _fail_unwritable(self, bad: list[Any]) -> None:
        from redis.exceptions import DataError

        for x in bad:
            self._fail_batch([x], DataError("not a value Redis stores"))

    def _new_client(self, asynchronous: bool) -> Any:
        """A client to write with, without a loop or on one (see ``_given``)."""
        if self._given is not None:
            where = "the sink writes " + ("on a loop" if asynchronous else "without a loop")
            return twin(self._given, asynchronous, self._label(), where)
        import redis.asyncio

        return (redis.asyncio.Redis if asynchronous else redis.Redis).from_url(self.url)

    def _write_sync(self, items: list[Any], base: int) -> None:
        try:
            if self._client is None:
                self._client = self._new_client(asynchronous=False)
            if self.method == "script":
                if self._script is None:
                    self._script = self._client.register_script(XADD_MANY)
                    self._client.script_load(XADD_MANY)  # so the first batches find it
                args = self._flat(items, base)
                if _hiredis_pack is not None and self._send_packed(args, items, base):
                    return
                self._barrier_confirm(self._sent)  # in order with the writes in flight
                self._script(keys=[self.stream, self.seq_key], args=args)
            else:
                self._barrier_confirm(self._sent)
                last = self._client.hget(self.seq_key, self.writer) if self.writer else 0
                pipe = self._client.pipeline(transaction=bool(self.writer))
                self._queue_numbered(pipe, items, base, last)
                pipe.execute()
            self._sent += 1
            self._confirmed += 1
        except Exception as e:
            self._fail_batch(items, e)

    def _send_packed(self, args: list[Any], items: list[Any], base: int) -> bool:
        """Call the script packing the arguments with hiredis directly.

        redis-py checks each argument in Python before hiredis packs them in
        C (about 0.5 us an entry). The reply is read at once, or, when a
        source confirms writes later (``_deferring``), at the next write or
        confirmation: one write stays in flight. Returns False, having sent
        nothing, when hiredis refuses an argument: the caller then goes
        through redis-py, which reports bad values.
        """
        assert _hiredis_pack is not None and self._script is not None
        try:
            packed = _hiredis_pack(("EVALSHA", self._script.sha, 2, self.stream, self.seq_key,
                                    *args))
        except TypeError:
            return False
        if self._conn is None:
            self._conn = self._client.connection_pool.get_connection()
        try:
            self._conn.send_packed_command([packed])
        except Exception as e:
            self._drop_connection(items, e)
            return True  # reported
        self._inflight.append((items, base))
        self._sent += 1
        keep = 1 if self._deferring else 0
        while len(self._inflight) > keep:
            self._read_reply()
        return True

    def _read_reply(self) -> None:
        """Read the reply of the oldest write in flight."""
        from redis.exceptions import NoScriptError, ResponseError

        items, base = self._inflight.popleft()
        self._confirmed += 1
        try:
            self._conn.read_response()
        except ResponseError as e:  # a reply: the connection is still in step
            self._release_connection()
            if not isinstance(e, NoScriptError):
                self._fail_batch(items, e)
                return
            # The server lost the script (restarted, SCRIPT FLUSH): write the
            # batch again through redis-py, which reloads it. A write in
            # flight after this one fails the same way and is redone after it.
            try:
                self._script(keys=[self.stream, self.seq_key], args=self._flat(items, base))
            except Exception as e2:
                self._fail_batch(items, e2)
        except Exception as e:
            # No reply: the connection is broken, with it every write in flight.
            self._drop_connection(items, e)
        else:
            self._release_connection()

    def _release_connection(self) -> None:
        if not self._inflight and self._conn is not None:
            self._client.connection_pool.release(self._conn)
            self._conn = None

    def _drop_connection(self, items: list[Any], exc: Exception) -> None:
        """Give up a broken connection; report the writes it leaves unconfirmed."""
        conn, self._conn = self._conn, None
        lost = items + [x for batch, _ in self._inflight for x in batch]
        self._confirmed += len(self._inflight)
        self._inflight.clear()
        if conn is not None:
            conn.disconnect()
            self._client.connection_pool.release(conn)
        if lost:
            self._fail_batch(lost, exc)

    async def _write_async(self, items: list[Any], base: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self._aclient is None or (self._aclient is not self._given
                                         and self._aloop is not loop):
                self._aclient = self._new_client(asynchronous=True)
                self._aloop, self._ascript = loop, None
            if self.method == "script":
                if self._ascript is None:
                    self._ascript = self._aclient.register_script(XADD_MANY)
                await self._ascript(keys=[self.stream, self.seq_key],
                                    args=self._flat(items, base))
            else:
                last = await self._aclient.hget(self.seq_key, self.writer) if self.writer else 0
                async with self._aclient.pipeline(transaction=bool(self.writer)) as pipe:
                    self._queue_numbered(pipe, items, base, last)
                    await pipe.execute()
        except Exception as e:
            self._fail_batch(items, e)

    def _write_at_exit(self) -> None:
        """At exit: write and confirm what is held, or warn (its loop is gone, the write fails)."""
        held = len(self._buffer) + sum(len(items) for items, _ in self._inflight)
        if not held:
            return
        if self.asynchronous or self._aloop is not None:
            why = ("its loop is gone: await source.aclose() (or close the stream) before "
                   "the loop ends")
        else:
            try:
                self._barrier()
                self._close_own()
                return
            except Exception as e:
                why = f"{type(e).__name__}: {e}"
        warnings.warn(f"{self._label()}: {held} element(s) were not written to Redis stream "
                      f"{self.stream!r} when the process exited without closing the stream; "
                      f"{why}", RuntimeWarning, stacklevel=1)

    def _fail_batch(self, items: list[Any], exc: Exception) -> None:
        """Name the element that could not be written (the first unwritable one)."""
        bad = next((x for x in items if not writable(x)), items[0] if items else None)
        exc = name_the_field(exc, bad, self.field)
        pending = self._fail(bad, exc)
        if pending is not None:  # pragma: no cover - a routed error on an async stream
            from ..clock import run_sync

            run_sync(pending)

