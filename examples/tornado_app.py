"""A Tornado web service with a streaming pipeline inside.

``POST /ingest`` with a JSON number (or a list of numbers) awaits ``emit``
into the pipeline: the response is sent once the pipeline has taken the
values, so a client posting faster than the pipeline can go is slowed down
(backpressure). The pipeline groups values in ``timed_window(interval)``
windows and keeps a running aggregate over the closed windows.
``GET /aggregate`` returns that aggregate as JSON.

Run it::

    python examples/tornado_app.py --port 8888 --interval 1.0
    curl -X POST -d 3.5 localhost:8888/ingest
    curl localhost:8888/aggregate

The pipeline, built by :func:`make_pipeline`::

    source -> timed_window(interval) -> map(summarize) -> scan(merge) -> sink(publish)
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict, dataclass

from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application, HTTPError, RequestHandler

from streams import Stream


@dataclass(frozen=True)
class Aggregate:
    """What the service reports: totals over every closed window."""

    windows: int = 0
    count: int = 0
    total: float = 0.0
    last_window_count: int = 0

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


def summarize(window: list[float]) -> tuple[int, float]:
    """One window's (count, sum)."""
    return len(window), float(sum(window))


def merge(agg: Aggregate, summary: tuple[int, float]) -> Aggregate:
    """The running aggregate after one more window."""
    count, total = summary
    return Aggregate(agg.windows + 1, agg.count + count, agg.total + total, count)


class Pipeline:
    """The stream graph and the latest aggregate it produced."""

    def __init__(self, interval: float) -> None:
        self.source: Stream[float] = Stream(asynchronous=True, stream_name="ingest")
        self.current = Aggregate()
        (self.source.timed_window(interval)
            .map(summarize)
            .scan(merge, start=Aggregate())
            .sink(self._publish))

    def _publish(self, agg: Aggregate) -> None:
        self.current = agg

    async def ingest(self, values: list[float]) -> None:
        for v in values:
            await self.source.emit(v)

    async def close(self) -> None:
        """Flush the open window into the aggregate."""
        await self.source.aclose()


def make_pipeline(interval: float = 1.0) -> Pipeline:
    return Pipeline(interval)


class IngestHandler(RequestHandler):
    def initialize(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    async def post(self) -> None:
        try:
            body = json.loads(self.request.body)
        except ValueError:
            raise HTTPError(400, "the body must be JSON: a number or a list of numbers") from None
        values = body if isinstance(body, list) else [body]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise HTTPError(400, "the body must be a number or a list of numbers")
        await self.pipeline.ingest([float(v) for v in values])  # backpressure
        self.write({"accepted": len(values)})


class AggregateHandler(RequestHandler):
    def initialize(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def get(self) -> None:
        agg = self.pipeline.current
        self.write({**asdict(agg), "mean": agg.mean})


def make_app(pipeline: Pipeline) -> Application:
    return Application([
        (r"/ingest", IngestHandler, {"pipeline": pipeline}),
        (r"/aggregate", AggregateHandler, {"pipeline": pipeline}),
    ])


def serve(pipeline: Pipeline, port: int = 0, address: str = "127.0.0.1") -> tuple[HTTPServer, int]:
    """Start serving on the running loop; returns the server and its port."""
    sockets = bind_sockets(port, address)
    server = HTTPServer(make_app(pipeline))
    server.add_sockets(sockets)
    return server, sockets[0].getsockname()[1]


async def main(port: int, interval: float) -> None:
    pipeline = make_pipeline(interval)
    server, port = serve(pipeline, port)
    print(f"listening on http://127.0.0.1:{port} (POST /ingest, GET /aggregate)")
    try:
        await asyncio.Event().wait()
    finally:
        server.stop()
        await pipeline.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8888)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    try:
        asyncio.run(main(args.port, args.interval))
    except KeyboardInterrupt:
        pass

