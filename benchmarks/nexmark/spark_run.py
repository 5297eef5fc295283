"""Nexmark on Spark: Spark-resident streams pipelines against hand-written PySpark, twice.

The same queries as ``run.py`` (q0, q1, q2, q5 sliding, q7 tumbling, q8
keyed tumbling, q11 keyed sessions) over the same seeded events, on one
local SparkSession (``local[2]``) in this process. The events are written
once as Parquet (``--files`` files); per query and round:

* streams: ``Stream.from_spark(spark.read.parquet(dir))`` (with ``--project``,
  ``.select()`` of the query's columns first), the query's graph
  (``spark_queries.streams_query``: the functions of ``queries.py``, taking
  rows), ``.to_dataframe(schema)``;
* PySpark: the query written with the DataFrame API (native expressions for
  q0, q1, q2; ``window()`` for q5 and q7, a join of windowed persons and
  auctions for q8, ``session_window()`` for q11);
* same functions: the query hand-written in PySpark around the streams
  pipeline's own Python functions (``spark_queries.same_functions_query``:
  ``mapInArrow`` for the filter and map functions, which for a window also
  computes each row's time and key; Spark's ``window()`` /
  ``session_window()`` with ``collect_list`` of the rows' columns, then
  ``mapInArrow`` calling the window function). Against it the streams
  pipeline's ratio is the library's own cost; against native PySpark it
  also holds what Python functions cost against JVM expressions;

each written with ``write.format("noop")`` and timed from the start of its
building until the write ends. Its CPU time is taken over the same span:
the user and system seconds of this process and of all its children (the
JVM, and any Python workers it starts), which the other tenants of a shared
machine disturb less than they do the elapsed time. The two parts are also printed apart, for
streams and PySpark: the build (the side's Python code, and Spark's
analysis of each DataFrame as it is made) and the run (the write: Spark's
optimiser, planner, generated code and the job). A query is built once and
runs on all its data, so the build weighs against a run's length: with
1,000,000 events it was 2-25% of a query's time (2026-11-25).

The input is a static DataFrame (a backfill), on both sides: each query is
then one batch job over the same files, so the time is the engines' work. A
streaming read (``readStream`` with ``trigger(availableNow=True)``) would add
state-store commits and checkpoint writes per micro-batch, the same on both
sides, and Spark emits an event-time window only once its watermark has
passed it, which an ``availableNow`` run over a finite input never does for
its last windows: the results would be incomplete on both sides (over the
20,000 events of the check, q7 gave 1 of its 2 windows and q11 none of its
391 sessions, each side).

Before timing, each query's three outputs over the first 20,000 events are
collected, sorted and compared, and set against the in-process streams
result (``run.streams_run``) as well. Each side then runs once untimed (the
JVM compiles a plan's code on its first run, which would weigh on whichever
side goes first in the first round). Rounds rotate which side goes first;
medians and the per-round ratios (the hand-written side's time / streams'
time, so streams' rate over theirs: above 1, streams is faster) are
printed, against native PySpark and against the same functions. Each
median ratio comes with a 95% interval for the median of its rounds'
distribution (:func:`median_interval`): where the interval holds 1.0,
the run cannot tell streams from the hand-written query.

Run: ``python benchmarks/nexmark/spark_run.py [--events 1000000] [--rounds 3] [--only q5,q7]``
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import psutil
import pyarrow.parquet as pq
import spark_queries as sq
from events import generate
from run import QUERIES, streams_run

#: Events of the check run (their outputs are collected and compared).
CHECK_EVENTS = 20_000

HERE = os.path.dirname(os.path.abspath(__file__))


#: Rows per Parquet row group of the ``by-kind`` layout.
ROW_GROUP = 65_536


def write_events(events: list[Any], directory: str, files: int,
                 layout: str = "interleaved") -> None:
    """``events`` as ``files`` Parquet files of :data:`spark_queries.EVENT_SCHEMA`.

    ``interleaved``: in time order, as generated (a row group holds every
    kind); ``by-kind``: sorted by kind (persons, auctions, bids, each in time
    order) in row groups of :data:`ROW_GROUP` rows, as a table clustered by
    kind is, whose row groups' statistics let a reader skip the kinds a
    query does not read.
    """
    table = sq.event_table(events)
    if layout == "by-kind":
        table = table.sort_by("kind")  # Arrow's sort is stable: time order within a kind
    per = -(-table.num_rows // files)
    for f in range(files):
        pq.write_table(table.slice(f * per, per),
                       os.path.join(directory, f"part-{f:03d}.parquet"),
                       row_group_size=ROW_GROUP if layout == "by-kind" else None)


def session(master: str) -> Any:
    import streams_spark

    spark = streams_spark.default_session(master)
    # streams sends the functions of modules that are not installed by value
    # (and the modules they import), but the hand-written queries' functions
    # are pickled by reference, PySpark's default: the executors import
    # these files, for both sides alike.
    for name in ("events", "queries", "spark_queries"):
        spark.sparkContext.addPyFile(os.path.join(HERE, f"{name}.py"))
    return spark


# -- the sides, each built and run to a sink ---------------------------------------

def write_noop(frame: Any) -> None:
    frame.write.format("noop").mode("overwrite").save()


#: Each side's query builder: streams, the same functions hand-written, native PySpark.
SIDES: tuple[Callable[[str, Any], Any], ...] = (
    sq.streams_query, sq.same_functions_query, sq.pyspark_query)


def cpu_seconds() -> float:
    """User and system CPU seconds of this process and its children, live or ended.

    The children are the JVM and the Python workers it forks. A child that
    ended and was waited for is counted in its parent's children's times,
    so the sum does not drop when one ends. Parents are read before their
    children, and the whole reading is taken again if a child it listed
    ended before it was read: read after its parent, the child's seconds
    were in neither (a round of 2026-12-02 measured less CPU at its end
    than at its start that way).
    """
    me = psutil.Process()
    while True:
        # children() lists each parent before its own children.
        total, vanished = 0.0, False
        for p in (me, *me.children(recursive=True)):
            try:
                t = p.cpu_times()
            except psutil.NoSuchProcess:
                vanished = True
                break
            total += t.user + t.system + t.children_user + t.children_system
        if not vanished:
            return total


def timed_parts(build: Callable[[str, Any], Any], query: str,
                df: Any) -> tuple[float, float, float]:
    """Seconds to build ``query``'s DataFrame, to run it to the noop sink, and CPU seconds.

    Building is the side's Python code and Spark's analysis of each step (a
    DataFrame is analysed as it is made); running is the write: Spark's
    optimiser, planner, code generation and the job itself. The CPU seconds
    are :func:`cpu_seconds` over both.
    """
    gc.collect()
    c0 = cpu_seconds()
    t0 = time.perf_counter()
    frame = build(query, df)
    t1 = time.perf_counter()
    write_noop(frame)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, cpu_seconds() - c0


# -- checking ---------------------------------------------------------------------

def _micros(dt: Any) -> int:
    return (dt - sq.EPOCH) // sq.MICROSECOND  # type: ignore[no-any-return]


def in_process_view(query: str, rows: list[tuple[Any, ...]]) -> list[Any]:
    """The Spark outputs as the in-process ones are (no window labels), sorted."""
    if query in ("q5", "q7", "q11"):
        rows = [r[1:] for r in rows]  # the label
    return sorted(rows, key=repr)


def in_process(query: str, events: list[Any]) -> list[Any]:
    out = streams_run(query, events)
    if query == "q0":
        out = [tuple(r.values()) for r in sq.event_table(out).to_pylist()]
    elif query == "q1":
        out = [(a, b, p, _micros(dt)) for a, b, p, dt in out]
    return sorted(out, key=repr)


def check(spark: Any, query: str, directory: str, events: list[Any],
          streams_side: Callable[[str, Any], Any] = sq.streams_query) -> str | None:
    """Compare the three sides' outputs (and the in-process ones); a refusal's message."""
    df = spark.read.schema(sq.EVENT_SCHEMA).parquet(directory)
    try:
        frame = streams_side(query, df)
    except (ValueError, TypeError, NotImplementedError) as e:
        return f"{type(e).__name__}: {e}"
    ours = sorted(tuple(r) for r in frame.collect())
    theirs = sorted(tuple(r) for r in sq.pyspark_query(query, df).collect())
    same = sorted(tuple(r) for r in sq.same_functions_query(query, df).collect())
    if same != theirs:
        raise SystemExit(f"{query}: the same-functions outputs differ from PySpark's: "
                         f"{len(same)} against {len(theirs)}")
    if ours != theirs:
        a, b = set(ours), set(theirs)
        raise SystemExit(f"{query}: outputs differ: {len(ours)} from streams, {len(theirs)} "
                         f"from PySpark; first differences {[x for x in ours if x not in b][:3]}"
                         f" / {[x for x in theirs if x not in a][:3]}")
    if in_process_view(query, ours) != in_process(query, events):
        raise SystemExit(f"{query}: the Spark outputs differ from the in-process ones")
    return None


def join_refusal(spark: Any, directory: str) -> str:
    """q8 as a join of two inputs (persons, auctions): what streams says at build time."""
    import queries as q

    from streams import Stream

    df = spark.read.schema(sq.EVENT_SCHEMA).parquet(directory)
    persons = df.where(f"kind = {sq.PERSON}").select("kind", "id", "name", "dt")
    auctions = df.where(f"kind = {sq.AUCTION}").select("kind", "id", "seller", "dt")
    try:
        (Stream.from_spark(persons).union(Stream.from_spark(auctions))
         .timed_window(q.WINDOW, time=sq.event_time, key=sq.owner)
         .map(sq.new_users).flatten().to_dataframe(sq.OUTPUT["q8"]))
    except ValueError as e:
        return f"refused at build time: {e}"
    return "built"


# -- timing ------------------------------------------------------------------------

def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _rounds(values: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in values)


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """An interval that holds the median of the rounds' distribution with ``level`` confidence.

    Distribution-free: the ``j``-th lowest and highest of ``values``, for the
    largest ``j`` that leaves at most ``(1 - level) / 2`` chance on each side
    (a round falls below the median with probability one half, so the count
    below it is binomial). Paired ratios on this machine spread too widely
    for a median alone to say whether a query is above or below 1.0x. With
    fewer than 6 rounds no such ``j`` exists for 95%: the whole range.

    >>> median_interval([0.9, 1.1, 1.0, 0.8, 1.2, 1.05, 0.95])  # 7 rounds: 98% interval
    (0.8, 1.2)
    >>> median_interval([1.0 + i / 100 for i in range(21)])  # 21 rounds: the 6th and 16th
    (1.05, 1.15)
    """
    xs = sorted(values)
    n = len(xs)
    tail = (1 - level) / 2
    j, below = 0, 0.0
    while j < n and below + math.comb(n, j) / 2 ** n <= tail:
        below += math.comb(n, j) / 2 ** n
        j += 1
    if j == 0:
        return xs[0], xs[-1]
    return xs[j - 1], xs[n - j]


def _median(values: list[float]) -> str:
    """The median of ``values`` as a ratio, with its 95% interval."""
    low, high = median_interval(values)
    return f"{statistics.median(values):.2f}x ({low:.2f}-{high:.2f})"


def report(query: str, n_out: int, events: int, builds: list[list[float]],
           runs: list[list[float]], cpus: list[list[float]]) -> None:
    """Print a query's rates and paired ratios (a side not run has empty lists)."""
    totals = [[b + t for b, t in zip(bs, ts, strict=True)]
              for bs, ts in zip(builds, runs, strict=True)]
    ours = totals[0]
    rate = [f"{events / statistics.median(t):,.0f}" if t else "-" for t in totals]
    # Their time over streams' time: streams' rate over theirs.
    vs = [[t / o for o, t in zip(ours, side, strict=True)] if side else [] for side in totals]
    median = [_median(v) if v else "-" for v in vs]
    print(f"{query:6} {n_out:>9,} {rate[0]:>13} {rate[1]:>13} {rate[2]:>13} "
          f"{median[1]:>19} {median[2]:>19}  {_rounds(vs[1])}; {_rounds(vs[2])}", flush=True)
    run_ratio = [t / o for t, o in zip(runs[2], runs[0], strict=True)]
    print(f"{'':6} built in {statistics.median(builds[0]) * 1e3:.0f} ms (PySpark "
          f"{statistics.median(builds[2]) * 1e3:.0f} ms), run in "
          f"{statistics.median(runs[0]) * 1e3:.0f} ms (PySpark "
          f"{statistics.median(runs[2]) * 1e3:.0f} ms): the run alone "
          f"{_median(run_ratio)} PySpark's rate (rounds {_rounds(run_ratio)})",
          flush=True)
    cpu_ratio = [t / o for t, o in zip(cpus[2], cpus[0], strict=True)]
    print(f"{'':6} CPU {statistics.median(cpus[0]) * 1e3:.0f} ms (PySpark "
          f"{statistics.median(cpus[2]) * 1e3:.0f} ms): PySpark's CPU over streams' "
          f"{_median(cpu_ratio)} (rounds {_rounds(cpu_ratio)})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(QUERIES))
    parser.add_argument("--files", type=int, default=4, help="Parquet files of the input")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--layout", choices=("interleaved", "by-kind"), default="interleaved",
                        help="the events in time order, or clustered by kind (see "
                             "write_events)")
    parser.add_argument("--project", action="store_true",
                        help="the streams pipeline reads a projection on the query's columns "
                             "(as before 2026-11-28), not the table as it is")
    parser.add_argument("--in-python", action="store_true",
                        help="the streams pipeline's functions all run in Python, as ones "
                             "it cannot turn into Spark columns do (against the same "
                             "functions hand-written around mapInArrow)")
    parser.add_argument("--no-same-functions", action="store_true",
                        help="time streams and PySpark only (the same-functions side's "
                             "Python workers then do not run between them)")
    args = parser.parse_args()
    builders: tuple[Callable[[str, Any], Any], ...] = SIDES
    if args.project or args.in_python:
        builders = (functools.partial(sq.streams_query, project=True, in_python=args.in_python),
                    *SIDES[1:])
    print(f"load average at start: {loadavg()}")
    events = generate(args.events)
    check_events = events[:CHECK_EVENTS]
    assert check_events == generate(len(check_events))
    root = tempfile.mkdtemp(prefix="nexmark-spark-")
    data, small = os.path.join(root, "events"), os.path.join(root, "check")
    os.makedirs(data)
    os.makedirs(small)
    try:
        write_events(events, data, args.files, args.layout)
        write_events(check_events, small, args.files, args.layout)
        n_bids = sum(type(e).__name__ == "Bid" for e in events)
        del events
        spark = session(args.master)
        df = spark.read.schema(sq.EVENT_SCHEMA).parquet(data)
        print(f"{args.events:,} events ({n_bids:,} bids) in {args.files} Parquet files "
              f"({args.layout}), "
              f"{args.rounds} rounds, Spark {spark.version} {args.master}, sink noop; "
              f"outputs checked equal over the first {len(check_events):,} events")
        print(f"{'query':6} {'outputs':>9} {'streams ev/s':>13} {'same-fn ev/s':>13} "
              f"{'PySpark ev/s':>13} {'vs same-fn':>19} {'vs PySpark':>19}  "
              "rounds (same-fn; PySpark)")
        for query in args.only.split(","):
            refused = check(spark, query, small, check_events, builders[0])
            if refused is not None:
                print(f"{query:6} not run on Spark ({refused})", flush=True)
                continue
            n_out = sq.pyspark_query(query, df).count()
            builds: list[list[float]] = [[], [], []]
            runs: list[list[float]] = [[], [], []]
            cpus: list[list[float]] = [[], [], []]
            sides = [0, 2] if args.no_same_functions else [0, 1, 2]
            for i in sides:  # untimed: the JVM compiles each plan's code once
                write_noop(builders[i](query, df))
            for r in range(args.rounds):
                for i in sides[r % len(sides):] + sides[:r % len(sides)]:
                    b, t, c = timed_parts(builders[i], query, df)
                    builds[i].append(b)
                    runs[i].append(t)
                    cpus[i].append(c)
            report(query, n_out, args.events, builds, runs, cpus)
        if "q8" in args.only.split(","):
            print(f"q8 as a join of two from_spark() inputs: {join_refusal(spark, small)}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average at end: {loadavg()}")


if __name__ == "__main__":
    main()
