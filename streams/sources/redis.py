"""``Stream.from_redis``: entries of a Redis stream, with consumer groups.

Reads are batched (``count`` entries a round trip) and the acknowledgements
of one batch travel in the same pipelined round trip as the next read.

Delivery guarantees, with a consumer ``group``:

* without a checkpoint, at least once: a batch's entries are acknowledged
  (``XACK``) only after every downstream step for each of them has finished
  and the nodes that buffer output (``sink_to_redis``...) have flushed it;
* with a :class:`~streams.state.Checkpointer`, exactly once for a consumer
  restarting under its own name: entries are acknowledged only after a
  checkpoint covering them is on disk (checkpoints are written in the
  background), and each checkpoint records the ids it covers that are not
  yet acknowledged; on restart those are acknowledged, and the consumer's
  other pending entries (delivered but not covered) are processed again, in
  their original order, before any new entry. The checkpoint is the truth,
  not the group's bookkeeping: an entry read again at or below the
  checkpoint's offset (an acknowledgement lost when the server restarted,
  a group rolled back to an older snapshot) is acknowledged without being
  processed again. With ``claim_idle`` this holds for the entries the
  consumer read itself only: a lost acknowledgement of a claimed entry
  replays it (at least once), since an entry claimed and not yet processed
  may lie below the offset.

Without a loop, ``sink_to_redis`` nodes downstream write a batch without
waiting for the server's reply, which is read a round later: the server adds
one batch while this process works on the next. Entries are acknowledged
only once the writes of everything they produced are confirmed.

Entries left pending by a dead consumer are claimed (``XAUTOCLAIM``) once
idle for ``claim_idle`` seconds. Without a group, the stream is read with
``XREAD`` and ``offset`` (the last entry id) is what a checkpoint resumes
from.

Here lives the reading; the offset and the acknowledgements (what a
checkpoint holds, when an id is released for ``XACK``) live in
:mod:`streams.sources.redis_acks`, the client in
:mod:`streams.sources.redis_client`.
"""

from __future__ import annotations

from typing import Any

from ..clock import run_sync
from ..core import Stream
from ..fused_loop import take_push
from ..operators.durations import check_interval
from ._redis_ids import _hiredis_pack, start_id
from .redis_acks import RedisAcks
from .redis_client import check_client, check_start, check_url, connect, stream_entries

__all__ = ["FromRedis", "start_id"]

@Stream.register_api(staticmethod)
class FromRedis(RedisAcks):
    """Emit the entries of a Redis stream (``XREADGROUP``, or ``XREAD`` without a group).

    Parameters
    ----------
    stream : str
        The Redis stream's key.
    group, consumer : str, optional
        Read as ``consumer`` of consumer ``group`` (created if missing, at
        ``start``); entries are then acknowledged (see the module docs).
    start : str, datetime or float
        Where to begin: ``"0"`` (the default: the whole stream), ``"$"``
        (new entries only), an entry id (entries after it), or a time.
    url : str
        The server (``redis://host:port/db``); or pass ``client``.
    client : redis.Redis or redis.asyncio.Redis, optional
        A client to use: a ``redis.Redis`` without a loop; on a loop a
        ``redis.asyncio.Redis``, or a ``redis.Redis`` whose connection
        settings are used to open an asyncio client to the same server.
    count : int
        Entries read per round trip.
    block : float or str
        On a loop, seconds (at least 0.001, or a duration such as ``"500ms"``)
        a read waits for new entries before checking ``stop()`` and claiming
        again. Without a loop the source reads to the end of the stream and closes.
    claim_idle : float or str, optional
        Claim entries pending for other consumers longer than this (seconds,
        or a duration such as ``"10s"``).
    with_id : bool
        Emit ``(entry_id, fields)`` instead of ``fields``.
    decode : bool
        Decode ids, field names and values to ``str`` (else ``bytes``).

    Examples
    --------
    Building the graph needs no server (nothing connects before ``start()``):

    >>> from streams import Stream, describe
    >>> source = Stream.from_redis("events", group="etl", consumer="a")
    >>> _ = source.map(len).sink_to_redis("sizes", maxlen=1000)
    >>> [spec.operator for spec in describe(source).nodes]
    ['from_redis', 'map', 'sink_to_redis']

    Against a running server (not run here)::

        source = Stream.from_redis("events", group="etl", consumer="a",
                                   url="redis://localhost:6379/0")
        source.map(process).sink_to_redis("results", maxlen=1_000_000)
        source.start()
    """

    # The offset and the ids not yet acknowledged are RedisAcks' slots.
    __slots__ = ("_client", "block", "claim_idle", "consumer", "count", "decode", "group",
                 "start_at", "stream", "url", "with_id")
    _operator = "from_redis"
    _replayable = True
    _params = ("stream", "group", "consumer", "start_at", "count", "claim_idle", "with_id")
    # What a checkpoint's offsets are offsets into (where reading began does not
    # matter; nor the server's address, which a failover to a replica changes).
    _identity_params = ("stream", "group", "consumer", "db")
    # Acknowledgements wait for the next read's round trip, so a checkpoint
    # holds those not yet sent (_acks) as well as the ids it covers.
    _state = ("offset", "processed", "_acks")

    def __init__(self, stream: str, group: str | None = None, consumer: str | None = None,
                 start: Any = "0", url: str = "redis://localhost:6379/0", client: Any = None,
                 count: int = 1000, block: float = 1.0, claim_idle: float | None = None,
                 with_id: bool = False, decode: bool = True, **kwargs: Any) -> None:
        try:
            import redis  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("from_redis() needs redis-py: pip install 'streams[redis]'") from e
        if (group is None) != (consumer is None):
            raise ValueError("from_redis(): give both group= and consumer=, or neither")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"from_redis(): count must be an int >= 1, got {count!r}")
        self.block = check_interval("from_redis", block, "block")
        if self.block < 0.001:  # Redis waits whole milliseconds, and BLOCK 0 forever
            raise ValueError(f"from_redis(): block must be at least 0.001 seconds, got {block!r}")
        self.claim_idle = (None if claim_idle is None else
                           check_interval("from_redis", claim_idle, "claim_idle", zero=True))
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.start_at = check_start(start)
        self.url = check_url("from_redis", url)
        self.count = count
        self.with_id = with_id
        self.decode = decode
        self._client = client
        super().__init__(**kwargs)

    @property
    def db(self) -> int:
        """The number of the database the stream is in (of ``url``, or of ``client``)."""
        if self._client is not None:
            pool = getattr(self._client, "connection_pool", None)
            return int(getattr(pool, "connection_kwargs", {}).get("db", 0))
        from redis.connection import parse_url

        return int(parse_url(self.url).get("db", 0))  # type: ignore[no-untyped-call]

    # -- the Redis side ------------------------------------------------------

    def _connect(self, asynchronous: bool) -> Any:
        return connect(self._client, self.url, self.decode, asynchronous, self._label())

    @classmethod
    def _from_spec(cls, spec: Any, upstreams: list[Stream[Any]]) -> Stream[Any]:
        # Described as ``start_at`` (its attribute), passed as ``start``.
        params = dict(spec.params)
        params["start"] = params.pop("start_at")
        if spec.stream_name is not None:
            params["stream_name"] = spec.stream_name
        return cls(**params)

    def _check_start(self, on_loop: bool) -> None:
        if self._client is not None:
            check_client(self._client, on_loop, self._label())

    def _create_group(self, pipe: Any) -> None:
        pipe.xgroup_create(self.stream, self.group, id=self.start_at, mkstream=True)

    def _group_created(self, result: Any) -> None:
        if isinstance(result, Exception) and "BUSYGROUP" not in str(result):
            raise result

    def _queue_read(self, pipe: Any, ident: Any, block: int | None = None) -> None:
        """Queue the acknowledgements due and one read on ``pipe``."""
        self._queue_acks(pipe)
        if self.group is None:
            after = self.offset if self.offset is not None else self.start_at
            pipe.xread({self.stream: after}, count=self.count, block=block)
        else:
            pipe.xreadgroup(self.group, self.consumer, {self.stream: ident},
                            count=self.count, block=block)

    def _queue_acks(self, pipe: Any) -> None:
        """Queue an ``XACK`` of the ids released so far on ``pipe``."""
        self._release()
        if self._acks:
            pipe.xack(self.stream, self.group, *self._acks)
            self._acks = []

    def _queue_claim(self, pipe: Any, cursor: Any) -> None:
        assert self.claim_idle is not None
        pipe.xautoclaim(self.stream, self.group, self.consumer,
                        int(self.claim_idle * 1000), start_id=cursor, count=self.count)

    # -- the stream side -----------------------------------------------------

    def _emit_batch(self, entries: list[Any], claimed: bool = False) -> Any:
        """Push entries; return None, or an awaitable when a step is asynchronous.

        The offset and the ids to acknowledge are recorded for the entries
        whose work is done, when the loop ends (a checkpoint is taken only
        between batches, see ``_batch_done``): an entry whose work is still
        pending once that work is done (:meth:`_finish_async`), a failing
        one not at all, and a new start() reads it again. Entries
        ``claimed`` from other consumers do not move the offset (their ids
        may be older).
        """
        if entries and not claimed and self.group is not None and self.claim_idle is None:
            entries = self._skip_covered(entries)
        push = take_push(self)
        with_id = self.with_id
        done = 0
        pending = None
        try:
            for eid, flat in entries:
                if self._interrupted:  # stop(), or the graph changed on the way
                    if self.stopped:
                        break
                    push = take_push(self)
                done += 1
                if flat is None:  # deleted (trimmed) while pending: nothing to emit
                    continue
                # Redis entries hold field/value pairs: zip(strict=True) would
                # only double the cost of this line (0.4 us an entry).
                pairs = iter(flat)
                fields = dict(zip(pairs, pairs))  # noqa: B905
                pending = push((eid, fields) if with_id else fields)
                if pending is not None:
                    break
        except BaseException:
            # The entries before the failing one went through: a new start()
            # goes on from the failing one, as from_textfile does.
            self._took(entries, done - 1, claimed)
            raise
        if pending is None:
            self._took(entries, done, claimed)
            return None
        self._took(entries, done - 1, claimed)  # the last one's work is not done yet
        return self._finish_async(pending, entries[done - 1:], claimed)

    def _took(self, entries: list[Any], done: int, claimed: bool) -> None:
        """The first ``done`` of ``entries`` went through the graph: move the offset."""
        if done > 0:
            if not claimed:
                self.offset = entries[done - 1][0]
            if self.group is not None:
                self.processed.extend(e[0] for e in entries[:done])

    async def _finish_async(self, pending: Any, rest: list[Any], claimed: bool) -> None:
        """Finish the work of ``rest``'s first entry, count it, push the others."""
        await pending  # failing, the entry is read again by a new start()
        self._took(rest, 1, claimed)
        more = self._emit_batch(rest[1:], claimed)
        if more is not None:
            await more

    # -- without a loop --------------------------------------------------------

    def _run_sync(self) -> None:
        from redis.exceptions import RedisError

        try:
            self._run_sync_named()
        except RedisError as e:
            raise self._named(e) from e.__cause__

    async def _run_async(self) -> None:
        from redis.exceptions import RedisError

        try:
            await self._run_async_named()
        except RedisError as e:
            raise self._named(e) from e.__cause__

    def _run_sync_named(self) -> None:
        r = self._connect(asynchronous=False)
        try:
            self._read_sync(r)
        finally:
            if self._client is None:
                r.close()  # of our own: closed when start() fails too, not left to gc

    def _read_sync(self, r: Any) -> None:
        self._start_recovery()
        self._deferred = [b for b in self._barriers if hasattr(b, "_barrier_send")]
        for b in self._deferred:
            b._deferring = True
        try:
            if self.group is not None:
                pipe = r.pipeline(transaction=False)
                self._create_group(pipe)
                self._group_created(pipe.execute(raise_on_error=False)[0])
                self._drain_sync(r, "0")  # this consumer's pending entries, in order
                self._claim_sync(r)
            self._drain_ahead_sync(r)
            if not self.stopped:  # the end of the stream; stop() leaves the stream open
                self._settle(self.close())
                if self._checkpointer is not None:
                    self._settle(self._checkpointer.source_closed(self))
            if self._checkpointer is not None:
                self._checkpointer.wait()  # what is in flight, to ack what it covers
            self._release(final=True)
        finally:
            for b in self._deferred:
                b._deferring = False  # a later write confirms what is still in flight
            self._deferred = []
        if self._acks:
            r.xack(self.stream, self.group, *self._acks)
            self._acks = []

    @staticmethod
    def _settle(pending: Any) -> None:
        if pending is not None:
            run_sync(pending)

    def _drain_sync(self, r: Any, ident: str) -> None:
        cursor = ident
        while not self.stopped:
            pipe = r.pipeline(transaction=False)
            self._queue_read(pipe, cursor)
            entries = stream_entries(pipe.execute()[-1])
            if not entries:
                return
            self._begin()
            self._settle(self._emit_batch(entries if ident == ">" else self._skip_known(entries)))
            self._settle(self._batch_done(len(entries)))
            if ident != ">":
                cursor = entries[-1][0]  # pending entries: page through by id

    def _drain_ahead_sync(self, r: Any) -> None:
        """New entries, the next batch requested before this one is processed.

        Redis reads the next batch while this process works on the current
        one. A batch requested and then not processed (``stop()``) stays
        pending for the group, delivered again at the next start.
        """
        conn = r.connection_pool.get_connection()
        expected = 0
        try:
            expected = self._send_read(conn, self.offset)
            while expected:
                n, expected = expected, 0  # read in full, error replies too
                replies = self._read_replies(conn, n)
                entries = stream_entries(replies[-1])
                if not entries or self.stopped:
                    return
                expected = self._send_read(conn, entries[-1][0])
                self._begin()
                self._settle(self._emit_batch(entries))
                self._settle(self._batch_done(len(entries)))
        finally:
            for _ in range(expected):  # leave the connection clean for the pool
                conn.read_response()
            r.connection_pool.release(conn)

    def _read_replies(self, conn: Any, n: int) -> list[Any]:
        """Read ``n`` replies; raise the first error reply, naming this source.

        Every reply is read before raising: one left unread would be taken
        for the answer to the next command, or waited for until the socket
        times out.
        """
        from redis.exceptions import ResponseError

        replies: list[Any] = []
        error: ResponseError | None = None
        for _ in range(n):
            try:
                replies.append(conn.read_response())
            except ResponseError as e:
                error = error or e
                replies.append(e)
        if error is not None:
            raise self._named(error)
        return replies

    def _named(self, error: Exception) -> Exception:
        """``error`` (same type) with a message that names this source and its stream."""
        if str(error).startswith(self._label()):
            return error
        try:
            named = type(error)(f"{self._label()} on stream {self.stream!r}: {error}")
        except Exception:  # pragma: no cover - an exception type with other arguments
            return error
        named.__cause__ = error
        return named

    def _send_read(self, conn: Any, after: Any) -> int:
        """Send the acknowledgements due and a read; return how many replies will come."""
        self._release()
        commands: list[tuple[Any, ...]] = []
        if self._acks:
            commands.append(("XACK", self.stream, self.group, *self._acks))
            self._acks = []
        if self.group is None:
            commands.append(("XREAD", "COUNT", self.count, "STREAMS", self.stream,
                             after if after is not None else self.start_at))
        else:
            commands.append(("XREADGROUP", "GROUP", self.group, self.consumer, "COUNT",
                             self.count, "STREAMS", self.stream, ">"))
        if _hiredis_pack is not None:
            # redis-py checks every argument in Python before hiredis packs
            # them in C; the ids acknowledged are known strings.
            conn.send_packed_command([b"".join(map(_hiredis_pack, commands))])
        else:
            conn.send_packed_command(conn.pack_commands(commands))
        return len(commands)

    def _claim_sync(self, r: Any) -> None:
        if self.claim_idle is None:
            return
        cursor: Any = "0-0"
        while not self.stopped:
            pipe = r.pipeline(transaction=False)
            self._queue_acks(pipe)
            self._queue_claim(pipe, cursor)
            cursor, entries = pipe.execute()[-1][:2]
            self._begin()
            self._settle(self._emit_batch(self._skip_known(entries, self._held()), claimed=True))
            self._settle(self._batch_done(len(entries)))
            if cursor in ("0-0", b"0-0"):
                return

    # -- on a loop -------------------------------------------------------------

    async def _run_async_named(self) -> None:
        r = self._connect(asynchronous=True)
        self._start_recovery()
        try:
            if self.group is not None:
                async with r.pipeline(transaction=False) as pipe:
                    self._create_group(pipe)
                    self._group_created((await pipe.execute(raise_on_error=False))[0])
                await self._drain_async(r, "0", follow=False)
                await self._claim_async(r)
            await self._drain_async(r, ">", follow=True)
            if self._checkpointer is not None:
                await self._checkpointer.wait_async()  # what is in flight, to ack it
            self._release(final=True)
            if self._acks:
                await r.xack(self.stream, self.group, *self._acks)
                self._acks = []
        finally:
            if not isinstance(self._client, type(r)):
                await r.aclose()  # a client of our own (from url=, or converted)

    async def _wait(self, pending: Any) -> None:
        if pending is not None:
            await pending

    async def _drain_async(self, r: Any, ident: str, follow: bool) -> None:
        cursor = ident
        block = int(self.block * 1000) if follow else None
        while not self.stopped:
            async with r.pipeline(transaction=False) as pipe:
                self._queue_read(pipe, cursor, block)
                entries = stream_entries((await pipe.execute())[-1])
            if not entries:
                if not follow:
                    return
                await self._claim_async(r)
                continue
            self._begin()
            await self._wait(self._emit_batch(entries if ident == ">" else
                                              self._skip_known(entries)))
            await self._wait(self._batch_done(len(entries)))
            if ident != ">":
                cursor = entries[-1][0]

    async def _claim_async(self, r: Any) -> None:
        if self.claim_idle is None or self.group is None:
            return
        cursor: Any = "0-0"
        while not self.stopped:
            async with r.pipeline(transaction=False) as pipe:
                self._queue_acks(pipe)
                self._queue_claim(pipe, cursor)
                cursor, entries = (await pipe.execute())[-1][:2]
            self._begin()
            await self._wait(self._emit_batch(self._skip_known(entries, self._held()),
                                              claimed=True))
            await self._wait(self._batch_done(len(entries)))
            if cursor in ("0-0", b"0-0"):
                return
