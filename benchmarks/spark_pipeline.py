"""Spark backend against hand-written PySpark, in the same process and session.

Run by hand (never in the test suite); prints times, throughputs and ratios.

1. Pipeline: records ``(key, value, ts)`` through ``map -> filter -> keyed
   scan -> event-time timed_window(1 s) -> sink``, lowered by
   ``to_spark()``, against the same Python functions written by hand in
   PySpark (one ``mapInArrow`` for map + filter, ``applyInPandasWithState``
   for the scan, ``window()`` under a watermark, ``foreachBatch``), both fed
   the same micro-batches as Parquet files. Target: >= 0.9x.
2. Fusion: a chain of 8 Python functions fused by ``to_spark()`` into one
   ``mapInArrow`` pass, against one ``mapInArrow`` per function, at the
   default micro-batch size (10,000) and at 100,000. Target: >= 3x.
3. Fixed cost per micro-batch (1 element per batch): ``to_spark()`` against
   a bare ``foreachBatch`` query over the same file source. Target: <= 1.3x.

    python benchmarks/spark_pipeline.py [--n 1000000] [--batches 10] [--small 15]
        [--fusion-sizes 10000,100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import statistics
import tempfile
import time
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

import streams_spark
from streams import Stream

# -- the user's functions, shared by both sides ------------------------------


def parse(r: tuple[str, int, float]) -> tuple[str, int, float]:
    return (r[0], r[1] * 2, r[2])


def keep(r: tuple[str, int, float]) -> bool:
    return r[1] % 3 != 0


def step(state: tuple[int, float], r: tuple[str, int, float]) -> tuple[int, float]:
    return (state[0] + r[1], r[2])


def event_time(kv: tuple[str, tuple[int, float]]) -> float:
    return kv[1][1]


FUNCS = [lambda x: x + 1, lambda x: x * 3, lambda x: x - 7, lambda x: x // 2,
         lambda x: x ^ 5, lambda x: x + 11, lambda x: x % 1000003, lambda x: x * 2]


def records(n: int) -> list[tuple[str, int, float]]:
    return [(f"k{i % 100}", i, i / 1000.0) for i in range(n)]


# -- 1. the pipeline ------------------------------------------------------------


def lowered(data: list[Any], batch: int) -> tuple[float, int]:
    source = Stream()
    count = [0]
    (source.to_spark(batch_size=batch).map(parse).filter(keep)
     .scan(step, start=(0, 0.0), key=0)
     .timed_window(1.0, time=event_time, lateness=0.5)
     .gather().sink(lambda w: count.__setitem__(0, count[0] + len(w))))
    t = time.perf_counter()
    for x in data:
        source.emit(x)
    source.close()
    return time.perf_counter() - t, count[0]


def hand_written(spark: Any, data: list[Any], batch: int) -> tuple[float, int]:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    tmp = tempfile.mkdtemp(prefix="bench-hand-")
    inbox = os.path.join(tmp, "in")
    os.makedirs(inbox)
    count = [0]

    def map_filter(batches: Any) -> Any:
        for b in batches:
            ids, ks, vs, ts = [], [], [], []
            for i, k, v, t in zip(*(c.to_pylist() for c in b.columns), strict=True):
                r = parse((k, v, t))
                if keep(r):
                    for col, value in ((ids, i), (ks, r[0]), (vs, r[1]), (ts, r[2])):
                        col.append(value)
            yield pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), pa.array(ks),
                                              pa.array(vs, pa.int64()),
                                              pa.array(ts, pa.float64())],
                                             names=["id", "key", "value", "ts"])

    def scan(key: Any, frames: Any, state: Any) -> Any:
        st = pickle.loads(state.get[0]) if state.exists else (0, 0.0)
        frame = pd.concat(list(frames)).sort_values("id")
        ids, totals, ts = [], [], []
        for i, v, t in zip(frame["id"], frame["value"], frame["ts"], strict=True):
            st = step(st, (key[0], v, t))
            for col, value in ((ids, i), (totals, st[0]), (ts, st[1])):
                col.append(value)
        state.update((pickle.dumps(st),))
        yield pd.DataFrame({"id": pd.Series(ids, dtype=object),
                            "key": pd.Series([key[0]] * len(ids), dtype=object),
                            "total": pd.Series(totals, dtype=object),
                            "ts": pd.Series(ts, dtype=object)})

    def sink(df: Any, bid: int) -> None:
        table = df.toArrow()
        for items in table.column("items").to_pylist():
            count[0] += len(items)

    src = spark.readStream.schema("id long, key string, value long, ts double") \
        .option("maxFilesPerTrigger", 1).parquet(inbox)
    q = (src.mapInArrow(map_filter, "id long, key string, value long, ts double")
         .groupBy("key").applyInPandasWithState(
             scan, "id long, key string, total long, ts double", "s binary", "append",
             GroupStateTimeout.NoTimeout)
         .withColumn("et", F.timestamp_seconds("ts")).withWatermark("et", "500 milliseconds")
         .groupBy(F.window("et", "1 second"))
         .agg(F.collect_list(F.struct("id", "key", "total")).alias("items"))
         .writeStream.foreachBatch(sink).outputMode("append")
         .option("checkpointLocation", os.path.join(tmp, "ckpt"))
         .trigger(processingTime="0 seconds").start())
    t = time.perf_counter()
    for n, start in enumerate(range(0, len(data), batch)):
        chunk = data[start:start + batch]
        cols = list(zip(*chunk, strict=True))
        table = pa.table({"id": pa.array(range(start, start + len(chunk)), pa.int64()),
                          "key": pa.array(cols[0]), "value": pa.array(cols[1], pa.int64()),
                          "ts": pa.array(cols[2], pa.float64())})
        pq.write_table(table, os.path.join(inbox, f".b{n}"))
        os.replace(os.path.join(inbox, f".b{n}"), os.path.join(inbox, f"b{n:06d}.parquet"))
        q.processAllAvailable()
    # End of input: one far-future row closes every window, as to_spark() does.
    end = pa.table({"id": pa.array([len(data)], pa.int64()), "key": pa.array(["~end"]),
                    "value": pa.array([1], pa.int64()), "ts": pa.array([7.3e9])})
    pq.write_table(end, os.path.join(inbox, "zz-end.parquet"))
    q.processAllAvailable()
    pq.write_table(end.slice(0, 0), os.path.join(inbox, "zz-end2.parquet"))
    q.processAllAvailable()
    elapsed = time.perf_counter() - t
    q.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    return elapsed, count[0]


# -- 2. fusion ------------------------------------------------------------------


def fused(data: list[int], batch: int) -> float:
    source = Stream()
    node = source.to_spark(batch_size=batch)
    for f in FUNCS:
        node = node.map(f)
    total = [0]
    node.gather().sink(lambda x: total.__setitem__(0, total[0] + 1))
    t = time.perf_counter()
    for x in data:
        source.emit(x)
    source.close()
    assert total[0] == len(data)
    return time.perf_counter() - t


def per_operator(spark: Any, data: list[int], batch: int) -> float:
    def one(f: Any) -> Any:
        def run(batches: Any) -> Any:
            for b in batches:
                xs = b.column(0).to_pylist()
                yield pa.RecordBatch.from_arrays([pa.array([f(x) for x in xs], pa.int64())],
                                                 names=["v"])
        return run

    t = time.perf_counter()
    n = 0
    for start in range(0, len(data), batch):
        df = spark.createDataFrame(pa.table({"v": pa.array(data[start:start + batch],
                                                           pa.int64())}))
        for f in FUNCS:
            df = df.mapInArrow(one(f), "v long")
        out = df.toArrow()
        n += sum(1 for _ in out.column(0).to_pylist())
    assert n == len(data)
    return time.perf_counter() - t


# -- 3. fixed cost per micro-batch -------------------------------------------------


def fixed_lowered(k: int, streaming: bool) -> list[float]:
    source = Stream()
    source.to_spark(batch_size=1, streaming=streaming).map(parse).gather().sink(lambda x: None)
    times = []
    for i in range(k + 1):
        t = time.perf_counter()
        source.emit((f"k{i}", i, float(i)))
        times.append(time.perf_counter() - t)
    source.close()
    return times[1:]  # the first batch starts Python workers


def fixed_bare(spark: Any, k: int) -> list[float]:
    tmp = tempfile.mkdtemp(prefix="bench-bare-")
    inbox = os.path.join(tmp, "in")
    os.makedirs(inbox)
    got: list[Any] = []
    q = (spark.readStream.schema("seq long, p binary").option("maxFilesPerTrigger", 1)
         .parquet(inbox).writeStream
         .foreachBatch(lambda df, bid: got.append(df.toArrow()))
         .option("checkpointLocation", os.path.join(tmp, "ckpt"))
         .trigger(processingTime="0 seconds").start())
    times = []
    for i in range(k + 1):
        t = time.perf_counter()
        table = pa.table({"seq": pa.array([i], pa.int64()),
                          "p": pa.array([pickle.dumps((f"k{i}", i, float(i)))])})
        pq.write_table(table, os.path.join(inbox, f".b{i}"))
        os.replace(os.path.join(inbox, f".b{i}"), os.path.join(inbox, f"b{i:06d}.parquet"))
        q.processAllAvailable()
        times.append(time.perf_counter() - t)
    q.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--small", type=int, default=15, help="micro-batches for part 3")
    parser.add_argument("--only", choices=["pipeline", "fusion", "fixed"], default=None)
    parser.add_argument("--fusion-sizes", default="10000,100000",
                        help="micro-batch sizes for part 2 (10,000 is to_spark()'s default)")
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds of parts 1 and 2")
    args = parser.parse_args()
    spark = streams_spark.default_session()
    batch = max(1, args.n // args.batches)
    print(f"n={args.n:,} records, micro-batches of {batch:,}, cores={os.cpu_count()}")

    if args.only in (None, "pipeline"):
        data = records(args.n)
        hand_written(spark, data[:2000], 1000)  # warm the Python workers of both sides
        lowered(data[:2000], 1000)
        ratios = []
        for r in range(args.rounds):
            # Alternate which side goes first: the machine's load drifts.
            if r % 2:
                t_low, c_low = lowered(data, batch)
                t_hand, c_hand = hand_written(spark, data, batch)
            else:
                t_hand, c_hand = hand_written(spark, data, batch)
                t_low, c_low = lowered(data, batch)
            assert c_hand == c_low, (c_hand, c_low)
            ratios.append(t_hand / t_low)
            print(f"pipeline  round {r + 1}: hand-written {t_hand:7.2f} s "
                  f"({args.n / t_hand:,.0f} rec/s), lowered {t_low:7.2f} s "
                  f"({args.n / t_low:,.0f} rec/s), ratio {t_hand / t_low:.2f}x", flush=True)
        print(f"pipeline  throughput ratio lowered/hand-written, median of {args.rounds} "
              f"paired rounds: {statistics.median(ratios):.2f}x (target >= 0.9x)")

    if args.only in (None, "fusion"):
        ints = list(range(args.n))
        fused(ints[:20_000], 10_000)  # warm the Python workers of both sides
        per_operator(spark, ints[:20_000], 10_000)
        for size in (int(v) for v in args.fusion_sizes.split(",")):
            rounds = []
            for _ in range(args.rounds):
                t_fused = fused(ints, size)
                t_per = per_operator(spark, ints, size)
                rounds.append((t_fused, t_per, t_per / t_fused))
                print(f"fusion    batch {size:>7,}: fused {t_fused:7.2f} s, one mapInArrow "
                      f"per function {t_per:7.2f} s, speed-up {t_per / t_fused:.2f}x", flush=True)
            med = [statistics.median(r[i] for r in rounds) for i in range(3)]
            print(f"fusion    batch {size:>7,} MEDIAN of {args.rounds}: fused {med[0]:.2f} s, "
                  f"per function {med[1]:.2f} s, speed-up {med[2]:.2f}x (target >= 3x)")

    if args.only in (None, "fixed"):
        bare = fixed_bare(spark, args.small)
        mb = statistics.median(bare)
        print(f"fixed     bare foreachBatch query: median {mb * 1000:7.1f} ms per micro-batch")
        for streaming in (False, True):
            ml = statistics.median(fixed_lowered(args.small, streaming))
            mode = "stream mode, one query" if streaming else "batch mode, one job per batch"
            print(f"fixed     to_spark() ({mode}): median {ml * 1000:7.1f} ms per "
                  f"micro-batch, ratio {ml / mb:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()
