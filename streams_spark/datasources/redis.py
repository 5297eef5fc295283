"""The ``redis_streams`` Spark data source: a Redis stream read and written by Spark."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

__all__ = ["RedisStreamsDataSource"]

_START = "0-0"


def _options(options: dict[str, str], what: str) -> tuple[str, str]:
    stream = options.get("stream")
    if not stream:
        raise ValueError(f"{what}: give the Redis stream with .option('stream', 'name')")
    return options.get("url", "redis://localhost:6379/0"), stream


class _Range(InputPartition):
    def __init__(self, after: str, last: str) -> None:
        self.after = after
        self.last = last


class _Reader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.url, self.stream = _options(options, "redis_streams")
        self.count = _positive(options, "count", 1000)

    def _client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url, decode_responses=True)

    def initialOffset(self) -> dict[str, str]:
        return {"id": _START}

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, str]:
        r = self._client()
        try:
            last = r.xrevrange(self.stream, count=1)
        finally:
            r.close()
        return {"id": last[0][0] if last else _START}

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[InputPartition]:
        if start["id"] == end["id"]:
            return []
        return [_Range(start["id"], end["id"])]

    def read(self, partition: Any) -> Iterator[tuple[str, dict[str, str]]]:
        r = self._client()
        try:
            after = partition.after
            while True:
                entries = r.xrange(self.stream, min=f"({after}", max=partition.last,
                                   count=self.count)
                if not entries:
                    return
                yield from entries
                after = entries[-1][0]
                if after == partition.last:
                    return
        finally:
            r.close()

    def commit(self, end: dict[str, str]) -> None:
        pass  # nothing to acknowledge: the offset lives in Spark's checkpoint


#: Adds a partition's entries of a micro-batch to the stream (KEYS[1]), unless
#: that partition of that micro-batch, or of a later one, was added before: the
#: hash KEYS[2] records per writer (ARGV[1]: the query and partition) the last
#: micro-batch added (ARGV[2]). The entries are the rest of ARGV (per entry its
#: field count and field/value pairs), or those of the staging stream KEYS[3],
#: moved page by page and deleted. One script: atomic in Redis.
_ONCE = """
local done = redis.call('HGET', KEYS[2], ARGV[1])
if done and tonumber(done) >= tonumber(ARGV[2]) then
  if KEYS[3] then redis.call('DEL', KEYS[3]) end
  return -1
end
local n = 0
if KEYS[3] then
  local after = '-'
  while true do
    local page = redis.call('XRANGE', KEYS[3], after, '+', 'COUNT', 1000)
    if #page == 0 then break end
    for _, entry in ipairs(page) do
      redis.call('XADD', KEYS[1], '*', unpack(entry[2]))
    end
    n = n + #page
    after = '(' .. page[#page][1]
  end
  redis.call('DEL', KEYS[3])
else
  local i = 3
  while i <= #ARGV do
    local nf = tonumber(ARGV[i])
    redis.call('XADD', KEYS[1], '*', unpack(ARGV, i + 1, i + 2 * nf))
    i = i + 1 + 2 * nf
    n = n + 1
  end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return n
"""
#: Seconds a staging stream of a task that died before its move is kept.
_STAGING_TTL = 86400


class _Written(WriterCommitMessage):
    def __init__(self, count: int) -> None:
        self.count = count  # entries added; 0 for a partition added before


def _fields(row: Any) -> dict[str, Any]:
    d = row.asDict()
    return d.get("fields") or {"data": d["value"]}


class _Writer(DataSourceStreamWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.url, self.stream = _options(options, "redis_streams")
        self.seq_key = options.get("seqKey") or f"{self.stream}:written"
        self.stage_above = _positive(options, "stageAbove", 10_000)

    def write(self, iterator: Iterator[Any]) -> _Written:
        import redis
        from pyspark import TaskContext

        task = TaskContext.get()
        batch = task.getLocalProperty("streaming.sql.batchId") if task else None
        query = task.getLocalProperty("sql.streaming.queryId") if task else None
        r = redis.Redis.from_url(self.url)
        try:
            if task is None or batch is None or query is None:  # not a micro-batch's task
                return _Written(self._add_each(r, iterator))
            writer = f"spark:{query}:{task.partitionId()}"
            return _Written(self._add_once(r, iterator, writer, int(batch),
                                           task.attemptNumber()))
        finally:
            r.close()

    def _add_each(self, r: Any, iterator: Iterator[Any]) -> int:
        """Add every row, 1,000 a round trip (at least once)."""
        n = 0
        pipe = r.pipeline(transaction=False)
        for row in iterator:
            pipe.xadd(self.stream, _fields(row))
            n += 1
            if n % 1000 == 0:
                pipe.execute()
        pipe.execute()  # confirmed before the task reports success
        return n

    def _add_once(self, r: Any, iterator: Iterator[Any], writer: str, batch: int,
                  attempt: int) -> int:
        """Add the rows of this partition of micro-batch ``batch``, unless added before.

        Up to ``stageAbove`` rows travel in the script's call; a larger
        partition is first added to a staging stream of this task attempt's
        own, which the script moves (Redis holds it, not this process).
        """
        script = r.register_script(_ONCE)
        rows: list[dict[str, Any]] = []
        staging = None
        for row in iterator:
            rows.append(_fields(row))
            if staging is None and len(rows) > self.stage_above:
                staging = f"{self.stream}:staging:{writer}:{batch}:{attempt}"
                r.delete(staging)  # a retried attempt's own is new; this is for safety
            if staging is not None and len(rows) >= 1000:
                _stage(r, staging, rows)
                rows = []
        if staging is not None:
            _stage(r, staging, rows)
            added = script(keys=[self.stream, self.seq_key, staging], args=[writer, batch])
        else:
            args: list[Any] = [writer, batch]
            for fields in rows:
                args.append(len(fields))
                for kv in fields.items():
                    args.extend(kv)
            added = script(keys=[self.stream, self.seq_key], args=args)
        return max(int(added), 0)

    def commit(self, messages: list[Any], batchId: int) -> None:
        pass

    def abort(self, messages: list[Any], batchId: int) -> None:
        pass


def _stage(r: Any, staging: str, rows: list[dict[str, Any]]) -> None:
    """Add ``rows`` to the staging stream, in one round trip."""
    pipe = r.pipeline(transaction=False)
    for fields in rows:
        pipe.xadd(staging, fields)
    pipe.expire(staging, _STAGING_TTL)
    pipe.execute()


def _positive(options: dict[str, str], name: str, default: int) -> int:
    text = options.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"redis_streams: option {name} must be a whole number >= 1, "
                         f"got {text!r}")
    return value


class RedisStreamsDataSource(DataSource):
    """``spark.readStream.format("redis_streams").option("stream", ...)``; see the package docs."""

    @classmethod
    def name(cls) -> str:
        return "redis_streams"

    def schema(self) -> str:
        return "id string, fields map<string,string>"

    def streamReader(self, schema: Any) -> _Reader:
        return _Reader(self.options)

    def streamWriter(self, schema: Any, overwrite: bool) -> _Writer:
        names = set(schema.fieldNames())
        if not names & {"fields", "value"}:
            raise ValueError(
                "redis_streams: the rows written need a column 'fields' (a map of an "
                "entry's fields) or 'value' (written as the field 'data'); got columns "
                f"{sorted(names)}")
        return _Writer(self.options)
