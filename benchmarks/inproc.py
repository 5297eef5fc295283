"""In-process throughput: streams against a plain loop, streamz and reactivex.

Pipeline: ``map(x*2+1) -> filter(x%3!=0) -> scan(add, start=0) -> sink(list.append)``
over 1,000,000 integers, plus a fan-out graph (one source, three sink
branches). Every contender calls the same Python functions. Rounds are
interleaved so machine noise hits all contenders alike; medians and paired
ratios (contender / plain loop, per round) are printed.

Run: ``python benchmarks/inproc.py [--n 1000000] [--rounds 7]``
"""

from __future__ import annotations

import argparse
import operator
import statistics
import time
from collections.abc import Callable

N = 1_000_000


def f(x: int) -> int:
    return x * 2 + 1


def p(x: int) -> bool:
    return x % 3 != 0


add = operator.add


def g(x: int) -> int:
    return x - 1


def q(x: int) -> bool:
    return x % 5 != 0


# -- the chain -------------------------------------------------------------

def plain_chain(data: list[int]) -> list[int]:
    out: list[int] = []
    append = out.append
    acc = 0
    for x in data:
        y = f(x)
        if p(y):
            acc = add(acc, y)
            append(acc)
    return out


def streams_emit_chain(data: list[int]) -> list[int]:
    from streams import Stream

    out: list[int] = []
    source: Stream[int] = Stream()
    source.map(f).filter(p).scan(add, start=0).sink(out.append)
    emit = source.emit
    for x in data:
        emit(x)
    return out


def streams_iterable_chain(data: list[int]) -> list[int]:
    from streams import Stream

    out: list[int] = []
    source = Stream.from_iterable(data)
    source.map(f).filter(p).scan(add, start=0).sink(out.append)
    source.start()
    return out


def streamz_chain(data: list[int]) -> list[int]:
    import streamz

    out: list[int] = []
    source = streamz.Stream()
    source.map(f).filter(p).scan(add, start=0).sink(out.append)
    emit = source.emit
    for x in data:
        emit(x)
    return out


def reactivex_chain(data: list[int]) -> list[int]:
    import reactivex as rx
    from reactivex import operators as ops

    out: list[int] = []
    rx.from_iterable(data).pipe(ops.map(f), ops.filter(p), ops.scan(add, 0)).subscribe(out.append)
    return out


# -- one source, three sink branches ------------------------------------------

def plain_fanout(data: list[int]) -> tuple[list[int], ...]:
    a: list[int] = []
    b: list[int] = []
    c: list[int] = []
    acc = 0
    for x in data:
        y = f(x)
        if p(y):
            a.append(y)
        acc = add(acc, x)
        b.append(acc)
        z = g(x)
        if q(z):
            c.append(z)
    return a, b, c


def streams_emit_fanout(data: list[int]) -> tuple[list[int], ...]:
    from streams import Stream

    a: list[int] = []
    b: list[int] = []
    c: list[int] = []
    source: Stream[int] = Stream()
    source.map(f).filter(p).sink(a.append)
    source.scan(add, start=0).sink(b.append)
    source.map(g).filter(q).sink(c.append)
    emit = source.emit
    for x in data:
        emit(x)
    return a, b, c


def streams_iterable_fanout(data: list[int]) -> tuple[list[int], ...]:
    from streams import Stream

    a: list[int] = []
    b: list[int] = []
    c: list[int] = []
    source = Stream.from_iterable(data)
    source.map(f).filter(p).sink(a.append)
    source.scan(add, start=0).sink(b.append)
    source.map(g).filter(q).sink(c.append)
    source.start()
    return a, b, c


def streamz_fanout(data: list[int]) -> tuple[list[int], ...]:
    import streamz

    a: list[int] = []
    b: list[int] = []
    c: list[int] = []
    source = streamz.Stream()
    source.map(f).filter(p).sink(a.append)
    source.scan(add, start=0).sink(b.append)
    source.map(g).filter(q).sink(c.append)
    emit = source.emit
    for x in data:
        emit(x)
    return a, b, c


def bench(title: str, contenders: dict[str, Callable[[list[int]], object]],
          data: list[int], rounds: int) -> None:
    expected = None
    for name, fn in contenders.items():
        got = fn(data[:10_000])
        if expected is None:
            expected = got
        assert got == expected, f"{name} gives a different result"
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn(data)
            times[name].append(time.perf_counter() - t0)
    base = times["plain loop"]
    print(f"\n{title} ({len(data):,} elements, {rounds} rounds)")
    print(f"{'contender':<28}{'median s':>10}{'x loop (paired median)':>26}")
    for name, ts in times.items():
        ratio = statistics.median(t / b for t, b in zip(ts, base, strict=True))
        print(f"{name:<28}{statistics.median(ts):>10.3f}{ratio:>26.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=N)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    data = list(range(args.n))
    bench("map -> filter -> scan -> sink", {
        "plain loop": plain_chain,
        "streams (emit loop)": streams_emit_chain,
        "streams (from_iterable)": streams_iterable_chain,
        "streamz (emit loop)": streamz_chain,
        "reactivex (from_iterable)": reactivex_chain,
    }, data, args.rounds)
    bench("one source, three sink branches", {
        "plain loop": plain_fanout,
        "streams (emit loop)": streams_emit_fanout,
        "streams (from_iterable)": streams_iterable_fanout,
        "streamz (emit loop)": streamz_fanout,
    }, data, args.rounds)


if __name__ == "__main__":
    main()
