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
        self.count = int(options.get("count", "1000"))

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


class _Written(WriterCommitMessage):
    def __init__(self, count: int) -> None:
        self.count = count


class _Writer(DataSourceStreamWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.url, self.stream = _options(options, "redis_streams")

    def write(self, iterator: Iterator[Any]) -> _Written:
        import redis

        r = redis.Redis.from_url(self.url)
        n = 0
        try:
            pipe = r.pipeline(transaction=False)
            for row in iterator:
                d = row.asDict()
                fields = d.get("fields") or {"data": d["value"]}
                pipe.xadd(self.stream, fields)
                n += 1
                if n % 1000 == 0:
                    pipe.execute()
            pipe.execute()  # confirmed before the task reports success
        finally:
            r.close()
        return _Written(n)

    def commit(self, messages: list[Any], batchId: int) -> None:
        pass

    def abort(self, messages: list[Any], batchId: int) -> None:
        pass


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
        return _Writer(self.options)
