"""Spark-resident pipelines against the same pipelines hand-written in PySpark.

Run by hand (never in the test suite); prints times, throughputs, paired
ratios and the driver's RSS growth.

A generated Parquet directory of ``(key, value, ts)`` rows (``--n`` rows in
``--files`` files) is read with ``readStream`` and ``maxFilesPerTrigger``, and
each pipeline runs to a Parquet sink with a checkpoint, ``availableNow``:

1. keyed: ``map -> filter -> keyed scan -> parquet``, as
   ``Stream.from_spark(df)...to_dataframe(schema)`` against ``mapInArrow`` (the
   same map and filter functions) + ``applyInPandasWithState`` (the same scan
   function) written by hand;
2. stateless: ``map -> filter -> parquet`` both ways.

Both sides run once over one file before the timed rounds (the first query
of a process starts Python workers), and rounds alternate which side goes
first. Target: lowered >= 1.0x hand-written
for both, driver RSS growth under 50 MB.

    python benchmarks/spark_resident.py [--n 5000000] [--files 50] [--rounds 3]

With ``--cluster`` it measures scaling instead: a standalone Master and two
1-core Workers on loopback (``tests/spark_cluster.py``), the keyed pipeline
both ways on one executor (``spark.cores.max=1``) and on two, each round
one session of each, alternating which goes first. Target: two workers at
least 1.5x one.
"""

from __future__ import annotations

import argparse
import os
import pickle
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

import streams_spark
from streams import Stream

SCHEMA = "key string, value long, ts double"
OUT = "key string, total long"

# -- the user's functions, shared by both sides ------------------------------


def parse(r: Any) -> tuple[str, int]:
    return (r.key, r.value * 3 + 1)


def keep(kv: tuple[str, int]) -> bool:
    return kv[1] % 7 != 0


def add(total: int, kv: tuple[str, int]) -> int:
    return total + kv[1]


def as_row(kt: tuple[str, int]) -> dict[str, Any]:
    return {"key": kt[0], "total": kt[1]}


# -- input --------------------------------------------------------------------


def generate(directory: str, n: int, files: int) -> None:
    per = n // files
    for f in range(files):
        lo = f * per
        ids = range(lo, lo + per)
        pq.write_table(pa.table({
            "key": pa.array([f"k{i % 1000}" for i in ids]),
            "value": pa.array(list(ids), pa.int64()),
            "ts": pa.array([i / 1000.0 for i in ids], pa.float64()),
        }), os.path.join(directory, f"part-{f:05d}.parquet"))


def source(spark: Any, directory: str, per_trigger: int) -> Any:
    return (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", per_trigger)
            .parquet(directory))


def run_query(df: Any, out: str) -> float:
    t = time.perf_counter()
    q = (df.writeStream.format("parquet").option("path", os.path.join(out, "data"))
         .option("checkpointLocation", os.path.join(out, "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return time.perf_counter() - t


# -- the two sides ------------------------------------------------------------


def lowered(spark: Any, inbox: str, out: str, keyed: bool, per_trigger: int) -> float:
    node = Stream.from_spark(source(spark, inbox, per_trigger)).map(parse).filter(keep)
    if keyed:
        df = node.scan(add, start=0, key=0).map(as_row).to_dataframe(OUT)
    else:
        df = node.to_dataframe("key string, value long")
    return run_query(df, out)


def hand_written(spark: Any, inbox: str, out: str, keyed: bool, per_trigger: int) -> float:
    from pyspark.sql import Row
    from pyspark.sql.streaming.state import GroupStateTimeout

    def map_filter(batches: Any) -> Any:
        for b in batches:
            keys, values = [], []
            for k, v, t in zip(*(c.to_pylist() for c in b.columns), strict=True):
                kv = parse(Row(key=k, value=v, ts=t))
                if keep(kv):
                    keys.append(kv[0])
                    values.append(kv[1])
            yield pa.RecordBatch.from_arrays([pa.array(keys), pa.array(values, pa.int64())],
                                             names=["key", "value"])

    def scan(key: Any, frames: Any, state: Any) -> Any:
        total = pickle.loads(state.get[0]) if state.exists else 0
        totals = []
        for frame in frames:
            for v in frame["value"]:
                total = add(total, (key[0], v))
                totals.append(total)
        state.update((pickle.dumps(total),))
        yield pd.DataFrame({"key": [key[0]] * len(totals), "total": totals})

    df = source(spark, inbox, per_trigger).mapInArrow(map_filter, "key string, value long")
    if keyed:
        df = df.groupBy("key").applyInPandasWithState(
            scan, OUT, "s binary", "append", GroupStateTimeout.NoTimeout)
    return run_query(df, out)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cluster_session(url: str, cores: int) -> Any:
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(url).appName(f"resident-{cores}-cores")
            .config("spark.cores.max", str(cores)).config("spark.executor.cores", "1")
            .config("spark.executor.memory", "1g").config("spark.pyspark.python", sys.executable)
            .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())


def cluster_scaling(args: Any, tmp: str, inbox: str) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from tests.spark_cluster import SparkCluster

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warm = os.path.join(tmp, "warm")  # one file, for an untimed run in each session
    os.makedirs(warm)
    generate(warm, args.n // args.files, 1)
    cluster = SparkCluster(Path(tmp), workers=2)
    try:
        for side in (lowered, hand_written):
            ratios = []
            for r in range(args.rounds):
                times = {}
                for cores in ((1, 2) if r % 2 == 0 else (2, 1)):
                    spark = cluster_session(cluster.url, cores)
                    spark.sparkContext.setLogLevel("ERROR")
                    out = os.path.join(tmp, f"out-{side.__name__}-{cores}-{r}")
                    side(spark, warm, os.path.join(out, "warm"), True, 1)  # untimed
                    times[cores] = side(spark, inbox, out, True, args.per_trigger)
                    spark.stop()
                    shutil.rmtree(out, ignore_errors=True)
                ratios.append(times[1] / times[2])
                print(f"{side.__name__:12} round {r + 1}: 1 worker {times[1]:7.2f} s, "
                      f"2 workers {times[2]:7.2f} s, {ratios[-1]:.2f}x", flush=True)
            print(f"{side.__name__:12} two workers against one, median of {args.rounds} "
                  f"rounds: {statistics.median(ratios):.2f}x (target >= 1.5x)")
    finally:
        cluster.stop()
        print(f"load at end {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--per-trigger", type=int, default=5, help="maxFilesPerTrigger")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cluster", action="store_true",
                        help="two workers against one on a standalone cluster")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-resident-")
    inbox = os.path.join(tmp, "in")
    os.makedirs(inbox)
    generate(inbox, args.n, args.files)
    print(f"n={args.n:,} rows in {args.files} files, maxFilesPerTrigger={args.per_trigger}, "
          f"cores={os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    if args.cluster:
        cluster_scaling(args, tmp, inbox)
        return
    spark = streams_spark.default_session()
    # One untimed run of each side over one file first: the first query of a
    # process pays for starting Python workers and JIT, whichever side it is.
    warm = os.path.join(tmp, "warm")
    os.makedirs(warm)
    generate(warm, args.n // args.files, 1)
    for keyed in (True, False):
        for side in (lowered, hand_written):
            out = os.path.join(tmp, f"warm-{side.__name__}-{keyed}")
            side(spark, warm, out, keyed, 1)
            shutil.rmtree(out, ignore_errors=True)
    rss_start = rss_mb()
    for keyed in (True, False):
        name = "keyed    " if keyed else "stateless"
        ratios = []
        for r in range(args.rounds):
            times = {}
            order = [lowered, hand_written] if r % 2 == 0 else [hand_written, lowered]
            for side in order:
                out = os.path.join(tmp, f"out-{side.__name__}-{keyed}-{r}")
                times[side.__name__] = side(spark, inbox, out, keyed, args.per_trigger)
                shutil.rmtree(out, ignore_errors=True)
            ratio = times["hand_written"] / times["lowered"]
            ratios.append(ratio)
            print(f"{name} round {r + 1}: hand-written {times['hand_written']:7.2f} s "
                  f"({args.n / times['hand_written']:>9,.0f} rows/s), lowered "
                  f"{times['lowered']:7.2f} s ({args.n / times['lowered']:>9,.0f} rows/s), "
                  f"ratio {ratio:.2f}x")
        print(f"{name} throughput ratio lowered/hand-written, median of {args.rounds} paired "
              f"rounds: {statistics.median(ratios):.2f}x (target >= 1.0x)")
    print(f"driver RSS (max resident) grew {rss_mb() - rss_start:.1f} MB over the runs "
          f"(target < 50 MB); load at end {os.getloadavg()[0]:.2f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
