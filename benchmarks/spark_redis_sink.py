"""Spark writing a Redis stream: the ``redis_streams`` sink against a hand-written one.

Run by hand (never in the test suite)::

    python benchmarks/spark_redis_sink.py [--entries 200000] [--rounds 5] [--partitions 2]

It starts its own ``redis-server`` on a free loopback port and fills an
input stream. Per round, each contender runs one streaming query (trigger
``availableNow``, a checkpoint of its own) reading the whole input through
the ``redis_streams`` source, repartitioned over ``--partitions`` tasks, into
an output stream of its own:

* ``streams``: ``writeStream.format("redis_streams")``, exactly once (each
  partition of a micro-batch added by one Lua script that records it; a
  partition above ``stageAbove`` rows goes through a staging stream);
* ``streams staged``: the same with ``stageAbove`` 1,000, so that every
  partition goes through the staging stream;
* ``hand-written``: ``foreachBatch`` with ``foreachPartition`` adding the
  rows with redis-py, ``XADD`` pipelined 1,000 a round trip: what one writes
  by hand, at least once (a micro-batch run again adds its rows again).

It prints per-contender medians of entries/s and the medians of the
per-round ratios of ``streams`` to ``hand-written`` (paired: a noisy machine
affects both sides of a ratio alike), with the load average at the start
and the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis
from redis_io import fill, load, start_server

from streams_spark import register_data_sources


def hand_written(url: str, out: str) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function adding each row's fields to ``out``, pipelined."""

    def write_partition(rows: Iterator[Any]) -> None:
        import redis

        r = redis.Redis.from_url(url)
        pipe = r.pipeline(transaction=False)
        for n, row in enumerate(rows, 1):
            pipe.xadd(out, row["fields"])
            if n % 1000 == 0:
                pipe.execute()
        pipe.execute()
        r.close()

    def write_batch(df: Any, batch_id: int) -> None:
        df.foreachPartition(write_partition)

    return write_batch


def run(spark: Any, url: str, contender: str, out: str, checkpoint: str,
        partitions: int) -> float:
    """Seconds for one query over the whole input into ``out``."""
    rows = (spark.readStream.format("redis_streams").option("url", url)
            .option("stream", "bench-in").option("count", "5000").load()
            .selectExpr("fields").repartition(partitions))
    writer = rows.writeStream.option("checkpointLocation", checkpoint)
    if contender == "hand-written":
        writer = writer.foreachBatch(hand_written(url, out))
    else:
        writer = writer.format("redis_streams").option("url", url).option("stream", out)
        if contender == "streams staged":
            writer = writer.option("stageAbove", "1000")
    start = time.perf_counter()
    writer.trigger(availableNow=True).start().awaitTermination()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    print(f"load average at start: {load()}")
    directory = tempfile.mkdtemp(prefix="spark-redis-bench-")
    server, url = start_server(directory)
    try:
        fill(url, "bench-in", args.entries)
        spark = (SparkSession.builder.master("local[2]")
                 .config("spark.sql.shuffle.partitions", args.partitions)
                 .config("spark.ui.enabled", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register_data_sources(spark)
        r = redis.Redis.from_url(url)
        contenders = ["streams", "streams staged", "hand-written"]
        times: dict[str, list[float]] = {c: [] for c in contenders}
        for r_ in range(args.rounds + 1):  # the first round warms the JVM, untimed
            order = contenders[r_ % 3:] + contenders[:r_ % 3]
            for c in order:
                out = f"out-{c.replace(' ', '-')}"
                r.delete(out, f"{out}:written")
                checkpoint = os.path.join(directory, f"ck-{r_}-{out}")
                seconds = run(spark, url, c, out, checkpoint, args.partitions)
                added = r.xlen(out)
                if added != args.entries:
                    sys.exit(f"{c}: {added} entries written, not {args.entries}")
                if r_:
                    times[c].append(seconds)
        print(f"{args.entries:,} entries, {args.partitions} partitions, {args.rounds} rounds, "
              f"Spark {spark.version} local[2], redis-server {r.info()['redis_version']}")
        for c in contenders:
            rate = args.entries / statistics.median(times[c])
            print(f"{c:15} {rate:>12,.0f} entries/s   rounds (s): "
                  + ", ".join(f"{t:.2f}" for t in times[c]))
        for c in contenders[:2]:
            ratios = [h / s for s, h in zip(times[c], times["hand-written"], strict=True)]
            print(f"{c} vs hand-written: {statistics.median(ratios):.2f}x the rate "
                  f"(rounds {', '.join(f'{x:.2f}' for x in ratios)})")
        r.close()
        spark.stop()
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(directory, ignore_errors=True)
        print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
