"""Timed operators on a synchronous stream: ``delay``, ``partition(timeout=)``, ``timed_window``.

Their timers run on the shared loop thread while the producer emits from
its own, so each element takes the node's lock. Each graph is fed
1,000,000 integers by ``emit`` with no loop running; its peer is a plain
loop doing the node's bookkeeping (hold each element with its due time; cut
groups of 7; read the clock and append to the open window) in the same
process. Rounds are interleaved; medians of the
best-of-round times and paired ratios (streams / plain) are printed.

Run: ``python benchmarks/timed_ops.py [--n 1000000] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import Any


def noop(x: Any) -> None:
    return None


def _fed(build: Callable[[Any], Any], n: int) -> None:
    """``n`` ints emitted into ``build(source)``, its output to a sink that does nothing."""
    from streams import Stream

    source: Stream[int] = Stream()
    node = build(source)
    node.sink(noop)
    emit = source.emit
    for i in range(n):
        emit(i)
    node.destroy()  # held: dropped, the timer cancelled


def streams_delay(n: int) -> None:
    _fed(lambda s: s.delay(10), n)


def plain_delay(n: int) -> None:
    held: deque[tuple[float, int]] = deque()
    now = time.monotonic
    for i in range(n):
        held.append((now() + 10, i))


def streams_partition(n: int) -> None:
    _fed(lambda s: s.partition(7, timeout=10), n)


def plain_partition(n: int) -> None:
    group: list[int] = []
    now = time.monotonic
    started = 0.0
    for i in range(n):
        if not group:
            started = now()
        group.append(i)
        if len(group) == 7:
            noop(tuple(group))
            group = []
    del started


def streams_window(n: int) -> None:
    _fed(lambda s: s.timed_window(10), n)


def plain_window(n: int) -> None:
    window: list[int] = []
    now = time.monotonic
    deadline = now() + 10
    for i in range(n):
        if now() >= deadline:
            noop(window)
            window, deadline = [], deadline + 10
        window.append(i)


def bench(title: str, contenders: dict[str, Callable[[int], None]], n: int, rounds: int
          ) -> None:
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            t0 = time.perf_counter()
            run(n)
            times[name].append(time.perf_counter() - t0)
    plain = times["plain"]
    print(title)
    for name, ts in times.items():
        ratio = statistics.median(t / p for t, p in zip(ts, plain, strict=True))
        print(f"  {name:8} median {statistics.median(ts):8.4f} s  "
              f"{n / statistics.median(ts):12,.0f} elements/s  {ratio:5.2f}x plain's time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    bench("delay(10)", {"plain": plain_delay, "streams": streams_delay}, args.n, args.rounds)
    bench("partition(7, timeout=10)", {"plain": plain_partition, "streams": streams_partition},
          args.n, args.rounds)
    bench("timed_window(10)", {"plain": plain_window, "streams": streams_window}, args.n,
          args.rounds)


if __name__ == "__main__":
    main()
