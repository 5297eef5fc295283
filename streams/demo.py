"""The demos run by ``python -m streams``: a live event stream, printed as it goes.

``events`` (the default) generates page views at a steady rate on the
running loop, for a few seconds, and sends them through a pipeline:

- a progress bar counts the events (elements per second),
- a one-second ``timed_window`` summarises each second (count, latency
  percentiles), and a ``sliding_window`` over those gives the 3-second rate,
- a keyed ``scan`` keeps one running count per page; each second's line
  shows the top pages so far.

The same pipeline runs with its enrichment step on a local Dask cluster
(``dask``) or in Spark (``spark``); ``words FILE...`` counts words in text
files (``--follow`` keeps reading lines appended to them); ``redis URL``
writes the events to a Redis stream and reads them back through a consumer
group.
"""

from __future__ import annotations

import asyncio
import collections
import random
import re
import statistics
import sys
from collections.abc import Callable
from typing import Any, TextIO

from .clock import Clock, get_clock
from .core import Stream
from .sources.redis import FromRedis
from .sources.textfile import FromTextfile

__all__ = ["PAGES", "enrich", "event_pipeline", "generate_events", "run_events", "run_redis",
           "run_words"]

#: Pages of the generated site, with how often each is viewed and its typical latency (ms).
PAGES = {"/home": (40, 30.0), "/search": (25, 80.0), "/product": (20, 50.0),
         "/cart": (10, 60.0), "/checkout": (5, 200.0)}

Segment = Callable[[Stream[Any]], Stream[Any]]


def enrich(event: dict[str, Any]) -> dict[str, Any]:
    """Mark slow views (the step a backend demo runs remotely).

    Examples
    --------
    >>> enrich({"page": "/home", "ms": 250.0})["slow"]
    True
    """
    return {**event, "slow": event["ms"] > 200.0}


def _summary(second: int, window: list[dict[str, Any]], rate3: float,
             totals: dict[str, int]) -> str:
    ms = sorted(e["ms"] for e in window)
    p50 = ms[len(ms) // 2] if ms else 0.0
    p95 = ms[int(len(ms) * 0.95)] if ms else 0.0
    slow = sum(e["slow"] for e in window)
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:3]
    return (f"second {second:2}: {len(window):5,} views  p50 {p50:5.0f} ms  p95 {p95:5.0f} ms  "
            f"slow {slow:4}  3 s rate {rate3:7,.0f}/s  top: "
            + ", ".join(f"{page} {n:,}" for page, n in top))


def event_pipeline(out: Callable[[str], Any], segment: Segment | None = None,
                   progress: bool = True, bar_file: TextIO | None = None,
                   source: Stream[Any] | None = None,
                   ) -> tuple[Stream[Any], dict[str, int]]:
    """The demo's graph from ``source`` (a new asynchronous stream by default).

    A summary line goes to ``out`` each second. ``segment`` places the
    enrichment step (a Dask or Spark segment); by default it runs in-process.

    Examples
    --------
    >>> from streams import describe
    >>> source, totals = event_pipeline(print, progress=False)
    >>> sorted({spec.operator for spec in describe(source).nodes})
    ['accumulate', 'filter', 'map', 'sink', 'sliding_window', 'stream', 'timed_window', 'zip']
    """
    if source is None:
        source = Stream(asynchronous=True, stream_name="page views")
    counted = (source.progress(desc="page views", unit=" views", file=bar_file,
                               mininterval=0.25, leave=False)
               if progress else source)
    enriched = segment(counted) if segment is not None else counted.map(enrich)
    totals: dict[str, int] = {}
    # One running count per page: the keyed scan emits (page, count).
    enriched.scan(lambda n, e: n + 1, start=0, key="page",
                  stream_name="views per page").sink(lambda kv: totals.__setitem__(*kv))
    windows = enriched.timed_window(1.0, stream_name="each second").filter(len)
    seconds = iter(range(1, sys.maxsize))
    rates = windows.map(len).sliding_window(3).map(statistics.fmean)
    windows.zip(rates).sink(
        lambda wr: out(_summary(next(seconds), wr[0], wr[1], totals)))
    return source, totals


async def generate_events(source: Stream[Any], seconds: float, rate: float,
                          clock: Clock, seed: int = 0) -> int:
    """Emit page views on ``clock`` for ``seconds`` at about ``rate`` a second, then close.

    Each view is awaited through the graph (backpressure). Returns the count.
    """
    rng = random.Random(seed)
    pages, weights = list(PAGES), [w for w, _ in PAGES.values()]
    tick = 0.05
    # The first view starts what the pipeline needs (a cluster, a JVM): time counts after it.
    await source.emit({"page": "/home", "ms": PAGES["/home"][1], "t": clock.now()})
    n = 1
    end = clock.now() + seconds
    while clock.now() < end:
        # The load rises and falls, so the windows differ from one second to the next.
        phase = (end - clock.now()) / seconds
        burst = int(rate * tick * (0.6 + 3.2 * phase * (1 - phase)))
        for page in rng.choices(pages, weights, k=burst):
            ms = rng.lognormvariate(0.0, 0.6) * PAGES[page][1]
            await source.emit({"page": page, "ms": ms, "t": clock.now()})
            n += 1
        await clock.sleep(tick)
    await source.aclose()  # the last window is flushed
    return n


def _writer(out: TextIO | None, progress: bool) -> Callable[[str], None]:
    stream = sys.stdout if out is None else out

    def write(line: str) -> None:
        if progress:
            from tqdm.auto import tqdm

            tqdm.write(line, file=stream)  # above the bar, not through it
        else:
            print(line, file=stream)
        stream.flush()

    return write


async def run_events(seconds: float = 4.0, rate: float = 2000.0, out: TextIO | None = None,
                     segment: Segment | None = None, progress: bool = True,
                     clock: Clock | None = None) -> int:
    """Run the events demo on the running loop; returns the number of events."""
    write = _writer(out, progress)
    source, totals = event_pipeline(write, segment, progress)
    n = await generate_events(source, seconds, rate, clock or get_clock())
    write(f"{n:,} page views in {seconds:g} s; views per page: "
          + ", ".join(f"{p} {c:,}" for p, c in sorted(totals.items(), key=lambda kv: -kv[1])))
    return n


async def run_redis(url: str, seconds: float = 4.0, rate: float = 2000.0,
                    out: TextIO | None = None, progress: bool = True,
                    clock: Clock | None = None) -> int:
    """The events demo through Redis: written with ``sink_to_redis``, read back by
    ``from_redis`` in a consumer group (acknowledged once processed)."""
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(url)
    try:
        await client.ping()  # a server that is not there: one error, before anything runs
        return await _redis_round_trip(client, url, seconds, rate, out, progress, clock)
    finally:
        await client.aclose()


async def _redis_round_trip(client: Any, url: str, seconds: float, rate: float,
                            out: TextIO | None, progress: bool, clock: Clock | None) -> int:
    import uuid

    key = f"streams-demo-{uuid.uuid4().hex[:8]}"
    write = _writer(out, progress)
    producer: Stream[Any] = Stream(asynchronous=True, stream_name="page views")
    producer.sink_to_redis(key, url=url, batch=100)
    reader = FromRedis(key, group="demo", consumer="demo-1", url=url, block=0.1)
    parsed = reader.map(lambda f: {"page": f["page"], "ms": float(f["ms"]), "t": float(f["t"])})
    _, totals = event_pipeline(write, progress=progress, source=parsed)
    seen = [0]
    parsed.sink(lambda _: seen.__setitem__(0, seen[0] + 1))
    clock = clock or get_clock()
    run = reader.start()
    n = await generate_events(producer, seconds, rate, clock)
    while seen[0] < n:  # what is still on its way from Redis
        await clock.sleep(0.05)
    reader.stop()
    await run
    await reader.aclose()  # the last window is flushed
    await client.delete(key)
    write(f"{n:,} page views through Redis stream {key!r} (deleted); views per page: "
          + ", ".join(f"{p} {c:,}" for p, c in sorted(totals.items(), key=lambda kv: -kv[1])))
    return n


WORD = re.compile(r"[A-Za-z_]{4,}")


async def run_words(files: list[str], follow: bool, window: int = 500, top: int = 5,
                    out: TextIO | None = None) -> None:
    """Count words in text files, printing the running top after each window.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "in.txt")
    >>> _ = open(path, "w").write("streams stream streams\\nwords words streams\\n")
    >>> asyncio.run(run_words([path], follow=False, window=4, top=2))
    streams=2, stream=1
    streams=3, words=2
    """
    stream = sys.stdout if out is None else out
    totals: collections.Counter[str] = collections.Counter()

    def show(counts: collections.Counter[str]) -> None:
        totals.update(counts)
        print(", ".join(f"{w}={n}" for w, n in totals.most_common(top)), file=stream,
              flush=True)

    runs = []
    for path in files:
        lines = FromTextfile(path, follow=follow)
        (lines.map(str.lower).map(WORD.findall).flatten()
         .partition(window).map(collections.Counter).sink(show))
        runs.append(lines.start())
    await asyncio.gather(*runs)
