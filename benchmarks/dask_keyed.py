"""Dask keyed state: does a keyed ``scan`` get faster with more workers?

``scatter(batch_size=...) -> scan(f, key=...) -> gather()`` runs its keyed
stage by key group, one task per worker thread (``streams_dask.key_groups``).
The same stream of (key, value) pairs runs on a ``LocalCluster`` of one and
of two single-threaded worker processes, rounds interleaved; the peer is the
same fold written by hand for Dask: the pairs split by key into one chunk per
worker, ``client.map`` of the fold over the chunks (no ordering, no state
carried between batches: the best case for the cluster).

``f`` costs about ``--work`` microseconds of Python per element, so that the
work, not the transport, is what more workers can share. Every run checks
its output against the in-process fold.

Run: ``python benchmarks/dask_keyed.py [--elements 40000] [--keys 1000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from distributed import Client, LocalCluster

# Run from a checkout: the packages next to this directory, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import streams_dask  # noqa: F401
from streams import Stream

#: Loop turns of ``busy`` per element (set from ``--work``).
TURNS = 400


def busy(total: int, kv: tuple[int, int]) -> int:
    """The fold: add the value, after some pure-Python work."""
    acc = 0
    for i in range(TURNS):
        acc += i * kv[1] % 7
    return total + kv[1] + acc % 2


def fold_chunk(chunk: list[tuple[int, int]], turns: int) -> dict[int, int]:
    """The hand-written peer: one chunk of keys folded in one task."""
    global TURNS
    TURNS = turns
    totals: dict[int, int] = {}
    for kv in chunk:
        totals[kv[0]] = busy(totals.get(kv[0], 0), kv)
    return totals


def run_streams(client: Client, pairs: list[tuple[int, int]], expected: dict[int, int]
                ) -> float:
    source: Stream[Any] = Stream()
    out = (source.scatter(client=client, batch_size=2000)
           .scan(busy, start=0, key=0).gather().sink_to_list())
    t = time.perf_counter()
    for kv in pairs:
        source.emit(kv)
    source.close()
    dt = time.perf_counter() - t
    assert dict(out) == expected and len(out) == len(pairs)
    return len(pairs) / dt


def run_client_map(client: Client, pairs: list[tuple[int, int]], expected: dict[int, int],
                   workers: int) -> float:
    t = time.perf_counter()
    chunks: list[list[tuple[int, int]]] = [[] for _ in range(workers)]
    for kv in pairs:
        chunks[kv[0] % workers].append(kv)
    results = client.gather(client.map(fold_chunk, chunks, [TURNS] * workers, pure=False))
    dt = time.perf_counter() - t
    merged: dict[int, int] = {}
    for r in results:
        merged.update(r)
    assert merged == expected
    return len(pairs) / dt


def main() -> None:
    global TURNS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=40_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--work", type=float, default=50.0, help="microseconds per element")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    # Calibrate the loop to about --work microseconds per element.
    t = time.perf_counter()
    busy(0, (0, 3))
    TURNS = max(1, int(TURNS * args.work * 1e-6 / (time.perf_counter() - t)))
    pairs = [(i * 7919 % args.keys, i % 100) for i in range(args.elements)]
    expected: dict[int, int] = {}
    for kv in pairs:
        expected[kv[0]] = busy(expected.get(kv[0], 0), kv)
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    print(f"{args.elements} elements, {args.keys} keys, {TURNS} loop turns per element",
          flush=True)
    clusters = {n: LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                dashboard_address=":0") for n in (1, 2)}
    clients = {n: Client(c, set_as_default=False) for n, c in clusters.items()}
    try:
        rates: dict[str, list[float]] = {}
        for r in range(args.rounds):
            for n, client in clients.items():
                for name, rate in (
                        (f"streams, {n} worker(s)", run_streams(client, pairs, expected)),
                        (f"client.map by hand, {n} worker(s)",
                         run_client_map(client, pairs, expected, n))):
                    rates.setdefault(name, []).append(rate)
                    print(f"round {r + 1} {name:<32} {rate:10.0f} elements/s", flush=True)
        print()
        for name, values in rates.items():
            print(f"{name:<32} median {statistics.median(values):10.0f} elements/s")
        for who in ("streams", "client.map by hand"):
            ratios = [two / one for one, two in zip(rates[f"{who}, 1 worker(s)"],
                                                    rates[f"{who}, 2 worker(s)"], strict=True)]
            print(f"{who}: 2 workers vs 1, paired per round: "
                  f"{', '.join(f'{x:.2f}' for x in ratios)}; median {statistics.median(ratios):.2f}x")
        ratios = [s / h for s, h in zip(rates["streams, 2 worker(s)"],
                                        rates["client.map by hand, 2 worker(s)"], strict=True)]
        print(f"streams vs client.map by hand on 2 workers: median "
              f"{statistics.median(ratios):.2f}x the rate")
    finally:
        for client in clients.values():
            client.close()
        for cluster in clusters.values():
            cluster.close()
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
