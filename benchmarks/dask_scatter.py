"""Dask throughput: streams_dask against streamz and a plain ``client.map``.

All three run ``scatter -> map(f) -> gather`` (or its equivalent) on the same
``LocalCluster(n_workers=2, threads_per_worker=1, processes=True)``, in one
process, rounds interleaved so that machine noise hits every contender alike:

* ``client.map``   - ``client.gather(client.map(f, data, pure=False))``: the
  baseline, one task per element;
* ``streamz``      - ``Stream(asynchronous=True).scatter().map(f).gather()``
  with ``await emit`` per element (streamz's documented usage);
* ``streams sync`` - ``Stream().scatter(batch_size=1000).map(f).gather()``,
  plain ``emit`` then ``close()`` (``batch_size`` asks for batched tasks,
  elements overlapping on the cluster; a plain ``scatter()`` waits in each
  ``emit`` for that element's results, as streamz does);
* ``streams async``- the same with ``Stream(asynchronous=True)``, ``await
  emit`` per element, on an asynchronous client.

Two functions: ``inc`` (cheap) and ``sleep_1ms`` (1 ms of sleep, so two
single-threaded workers can do at most 2,000 elements/s). Each contender
gets its own element count (slow ones fewer, so a round stays short); the
figure compared is elements per second, and every run checks its output.

Run: ``python benchmarks/dask_scatter.py [--rounds 3] [--scale 1.0]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from distributed import Client, LocalCluster

# Run from a checkout: the packages next to this directory, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


#: Fraction of wall time the two worker threads spent working, per streams run
#: (from the run times workers report per batch).
BUSY: dict[tuple[str, str], list[float]] = {}

#: Milliseconds of work per element, per streams run, as the workers measured it:
#: against 1 ms it shows how much the machine's load slowed the sleeps down.
COST: dict[tuple[str, str], list[float]] = {}


def inc(x: int) -> int:
    return x + 1


def sleep_1ms(x: int) -> int:
    time.sleep(0.001)
    return x + 1


def _sleep_rate(calls: int = 300) -> float:
    """How many ``sleep_1ms`` calls per second this process really makes."""
    t = time.perf_counter()
    for _ in range(calls):
        sleep_1ms(0)
    return calls / (time.perf_counter() - t)


def workers_limit(client: Client) -> float:
    """The two workers' real limit for ``sleep_1ms`` (sleep overshoots 1 ms)."""
    return float(sum(client.run(_sleep_rate).values()))


def run_client_map(client: Client, f: Callable[[int], int], n: int) -> float:
    data = list(range(n))
    t = time.perf_counter()
    out = client.gather(client.map(f, data, pure=False))
    dt = time.perf_counter() - t
    assert out == [x + 1 for x in data]
    return n / dt


def run_streams_sync(client: Client, f: Callable[[int], int], n: int) -> float:
    import streams_dask  # noqa: F401
    from streams import Stream

    source: Stream[int] = Stream()
    scatter = source.scatter(client=client, batch_size=1000)
    out = scatter.map(f).gather().sink_to_list()
    t = time.perf_counter()
    for x in range(n):
        source.emit(x)
    source.close()
    dt = time.perf_counter() - t
    assert out == list(range(1, n + 1))
    BUSY.setdefault(("sync", f.__name__), []).append(scatter.work_seconds / (2 * dt))
    COST.setdefault(("sync", f.__name__), []).append(1e3 * scatter.work_seconds / n)
    return n / dt


async def _streams_async(address: str, f: Callable[[int], int], n: int) -> float:
    import streams_dask  # noqa: F401
    from streams import Stream

    async with Client(address, asynchronous=True, set_as_default=False) as client:
        source: Stream[int] = Stream(asynchronous=True)
        scatter = source.scatter(client=client, batch_size=1000)
        out = scatter.map(f).gather().sink_to_list()
        t = time.perf_counter()
        for x in range(n):
            await source.emit(x)
        await source.aclose()
        dt = time.perf_counter() - t
    assert out == list(range(1, n + 1))
    BUSY.setdefault(("async", f.__name__), []).append(scatter.work_seconds / (2 * dt))
    COST.setdefault(("async", f.__name__), []).append(1e3 * scatter.work_seconds / n)
    return n / dt


async def _streamz(address: str, f: Callable[[int], int], n: int) -> float:
    from streamz import Stream as ZStream

    async with Client(address, asynchronous=True):  # streamz uses the default client
        source = ZStream(asynchronous=True)
        out = source.scatter().map(f).gather().sink_to_list()
        t = time.perf_counter()
        for x in range(n):
            await source.emit(x)
        while len(out) < n:
            await asyncio.sleep(0.001)
        dt = time.perf_counter() - t
    assert sorted(out) == list(range(1, n + 1))
    return n / dt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply element counts")
    args = parser.parse_args()

    def n(count: int) -> int:
        return max(1, int(count * args.scale))

    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        address = cluster.scheduler_address
        contenders: dict[str, Callable[[Callable[[int], int], int], float]] = {
            "client.map": lambda f, k: run_client_map(client, f, k),
            "streamz": lambda f, k: asyncio.run(_streamz(address, f, k)),
            "streams sync": lambda f, k: run_streams_sync(client, f, k),
            "streams async": lambda f, k: asyncio.run(_streams_async(address, f, k)),
        }
        counts: dict[str, dict[str, int]] = {
            "inc": {"client.map": n(3000), "streamz": n(1000),
                    "streams sync": n(100_000), "streams async": n(50_000)},
            "sleep_1ms": {"client.map": n(2000), "streamz": n(500),
                          "streams sync": n(20_000), "streams async": n(20_000)},
        }
        funcs = {"inc": inc, "sleep_1ms": sleep_1ms}
        rates: dict[tuple[str, str], list[float]] = {}
        limits: list[float] = []
        for r in range(args.rounds):
            limits.append(workers_limit(client))
            print(f"round {r + 1} sleep_1ms limit of the two workers, measured: "
                  f"{limits[-1]:.0f} elements/s", flush=True)
            for fname, f in funcs.items():
                for name, run in contenders.items():
                    rate = run(f, counts[fname][name])
                    rates.setdefault((fname, name), []).append(rate)
                    key = (name.split()[-1], fname)
                    note = "" if key not in BUSY else (
                        f"  (workers busy {BUSY[key][-1]:.0%}, "
                        f"{COST[key][-1]:.3f} ms per element)")
                    print(f"round {r + 1} {fname:>9} {name:<14} {rate:10.0f} elements/s"
                          f"{note}", flush=True)
        print()
        print(f"{'function':>9} {'contender':<14} {'n':>7} {'median el/s':>12} "
              f"{'x client.map':>13}")
        for fname in funcs:
            base = statistics.median(rates[(fname, "client.map")])
            for name in contenders:
                med = statistics.median(rates[(fname, name)])
                print(f"{fname:>9} {name:<14} {counts[fname][name]:>7} {med:>12.0f} "
                      f"{med / base:>12.2f}x")
        limit = statistics.median(limits)
        print(f"\nsleep_1ms: nominal limit of two single-threaded workers 2000 elements/s, "
              f"measured on the workers {limit:.0f} (median)")
        for name in ("streams sync", "streams async"):
            med = statistics.median(rates[("sleep_1ms", name)])
            busy = statistics.median(BUSY[(name.split()[1], "sleep_1ms")])
            cost = statistics.median(COST[(name.split()[1], "sleep_1ms")])
            print(f"  {name:<14} {med:6.0f} elements/s = {med / 2000:.0%} of nominal, "
                  f"{med / limit:.0%} of measured; workers busy {busy:.0%} of the time, "
                  f"{cost:.3f} ms of work per element")
    # Other processes on the machine slow the workers' sleeps down: a run is
    # only comparable with runs made at a similar load.
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
