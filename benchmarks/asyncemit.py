"""Async emit: backpressure cost, timed windows under a tight producer, bounded memory.

Three measurements, all in this process, rounds interleaved so machine noise
hits every contender alike; medians and paired ratios are printed, nothing
is asserted:

1. ``map -> async sink`` driven by ``await source.emit(x)`` over 100,000
   elements, against a plain asyncio loop awaiting the same coroutine
   (``await sink(f(x))``) and against streamz. Two sinks: one that awaits
   (yields to the loop) on every call, one that awaits on one call in 100.
2. ``timed_window(0.01)`` fed 200,000 elements by a tight ``await emit``
   loop that never yields: windows emitted versus elapsed / interval, and
   whether every element came out once, in order. streamz for comparison.
3. A fast producer into ``buffer(1000) -> slow async sink`` over 1,000,000
   elements: peak RSS growth, sampled by the producer every 1,000 elements
   (no thread). A plain ``asyncio.Queue(maxsize=1000)`` pipeline for
   comparison, and an unbounded queue to show what no backpressure costs.

Run: ``python benchmarks/asyncemit.py [--rounds 5] [--no-streamz] [--only 1,2,3]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import warnings
from collections.abc import Callable, Coroutine
from typing import Any


def rss() -> int:
    """This process's resident set size in bytes (Linux /proc; psutil elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil  # not a dependency: only where /proc is missing

        return int(psutil.Process().memory_info().rss)


N_EMIT = 100_000
N_WINDOW = 200_000
N_BUFFER = 1_000_000
INTERVAL = 0.01


def f(x: int) -> int:
    return x + 1


async def every(x: int) -> None:
    await asyncio.sleep(0)


async def one_in_100(x: int) -> None:
    if x % 100 == 0:
        await asyncio.sleep(0)


# -- 1. map -> async sink ------------------------------------------------------------

async def plain_loop(sink: Callable[[int], Coroutine[Any, Any, None]], n: int) -> float:
    t = time.perf_counter()
    for i in range(n):
        await sink(f(i))
    return time.perf_counter() - t


async def streams_emit(sink: Callable[[int], Coroutine[Any, Any, None]], n: int) -> float:
    from streams import Stream

    source: Stream[int] = Stream(asynchronous=True)
    source.map(f).sink(sink)
    emit = source.emit
    t = time.perf_counter()
    for i in range(n):
        await emit(i)
    return time.perf_counter() - t


async def streamz_emit(sink: Callable[[int], Coroutine[Any, Any, None]], n: int) -> float:
    import streamz

    source = streamz.Stream(asynchronous=True)
    source.map(f).sink(sink)
    emit = source.emit
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # streamz drops the coroutines
        for i in range(n):
            await emit(i)
    return time.perf_counter() - t


def bench_emit(rounds: int, with_streamz: bool) -> None:
    print(f"1. map -> async sink, {N_EMIT:,} elements, await emit ({rounds} rounds)")
    for sink in (every, one_in_100):
        times: dict[str, list[float]] = {"plain asyncio": [], "streams": [], "streamz": []}
        for _ in range(rounds):
            times["plain asyncio"].append(asyncio.run(plain_loop(sink, N_EMIT)))
            times["streams"].append(asyncio.run(streams_emit(sink, N_EMIT)))
            if with_streamz:
                times["streamz"].append(asyncio.run(streamz_emit(sink, N_EMIT)))
        _report(f"sink awaits {'every call' if sink is every else 'one call in 100'}", times)


def _report(title: str, times: dict[str, list[float]]) -> None:
    base = times["plain asyncio"]
    print(f"   {title}")
    for name, ts in times.items():
        if not ts:
            continue
        ratios = [t / b for t, b in zip(ts, base, strict=True)]
        print(f"     {name:14s} median {statistics.median(ts):8.4f} s   "
              f"ratio to plain (median of paired) {statistics.median(ratios):6.2f}x")


# -- 2. timed_window under a tight producer ---------------------------------------------

async def streams_window(n: int) -> tuple[int, float, bool]:
    from streams import Stream

    source: Stream[int] = Stream(asynchronous=True)
    windows = source.timed_window(INTERVAL).sink_to_list()
    t = time.perf_counter()
    for i in range(n):
        await source.emit(i)
    elapsed = time.perf_counter() - t
    await source.aclose()
    flat = [x for w in windows for x in w]
    return len(windows), elapsed, flat == list(range(n))


async def streamz_window(n: int) -> tuple[int, float, bool]:
    import streamz

    source = streamz.Stream(asynchronous=True)
    windows = source.timed_window(INTERVAL).sink_to_list()
    t = time.perf_counter()
    for i in range(n):
        await source.emit(i)
    elapsed = time.perf_counter() - t
    await asyncio.sleep(2 * INTERVAL)  # let its timer loop run once more
    flat = [x for w in windows for x in w]
    return len([w for w in windows if w]), elapsed, flat == list(range(n))


def bench_window(rounds: int, with_streamz: bool) -> None:
    print(f"2. timed_window({INTERVAL}) fed {N_WINDOW:,} elements by a tight await-emit loop")
    contenders: list[tuple[str, Callable[[int], Coroutine[Any, Any, Any]]]] = [
        ("streams", streams_window)]
    if with_streamz:
        contenders.append(("streamz", streamz_window))
    for name, run in contenders:
        results = [asyncio.run(run(N_WINDOW)) for _ in range(rounds)]
        ratios = [w / (e / INTERVAL) for w, e, _ in results]
        print(f"     {name:8s} windows {[w for w, _, _ in results]}  "
              f"expected ~{[round(e / INTERVAL) for _, e, _ in results]}  "
              f"median windows/(elapsed/interval) {statistics.median(ratios):.3f}  "
              f"all once in order: {all(ok for _, _, ok in results)}")
    if with_streamz:
        print("     (streamz counted: non-empty windows)")


# -- 3. bounded memory -------------------------------------------------------------------

async def slow_sink(x: int) -> None:
    await asyncio.sleep(0)


async def streams_buffer(n: int) -> tuple[float, float, int]:
    from streams import Stream

    done = 0

    async def sink(x: int) -> None:
        nonlocal done
        await asyncio.sleep(0)
        done += 1

    source: Stream[int] = Stream(asynchronous=True)
    source.buffer(1000).sink(sink)
    before = peak = rss()
    t = time.perf_counter()
    for i in range(n):
        await source.emit(i)
        if i % 1000 == 0:
            peak = max(peak, rss())
    await source.aclose()
    peak = max(peak, rss())
    return (peak - before) / 2**20, time.perf_counter() - t, done


async def queue_buffer(n: int, maxsize: int = 1000) -> tuple[float, float, int]:
    queue: asyncio.Queue[int | None] = asyncio.Queue(maxsize=maxsize)
    done = 0

    async def consumer() -> None:
        nonlocal done
        while (x := await queue.get()) is not None:
            await slow_sink(x)
            done += 1

    task = asyncio.ensure_future(consumer())
    before = peak = rss()
    t = time.perf_counter()
    for i in range(n):
        await queue.put(i)
        if i % 1000 == 0:
            peak = max(peak, rss())
    await queue.put(None)
    await task
    return (peak - before) / 2**20, time.perf_counter() - t, done


def bench_buffer() -> None:
    print(f"3. fast producer -> buffer(1000) -> slow async sink, {N_BUFFER:,} elements")
    contenders: list[tuple[str, Callable[[int], Coroutine[Any, Any, Any]]]] = [
        ("streams", streams_buffer),
        ("asyncio.Queue(1000)", queue_buffer),
        # No bound: shows what the measurement sees when nothing pushes back.
        ("asyncio.Queue()", lambda n: queue_buffer(n, maxsize=0)),
    ]
    for name, run in contenders:
        growth, elapsed, done = asyncio.run(run(N_BUFFER))
        print(f"     {name:20s} peak RSS growth {growth:6.1f} MB   time {elapsed:6.2f} s   "
              f"delivered {done:,}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-streamz", action="store_true")
    ap.add_argument("--only", default="1,2,3")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if "1" in only:
        bench_emit(args.rounds, not args.no_streamz)
    if "2" in only:
        bench_window(max(1, args.rounds // 2), not args.no_streamz)
    if "3" in only:
        bench_buffer()


if __name__ == "__main__":
    main()
