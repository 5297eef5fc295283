"""Nexmark q5 on Dask, keyed by auction: does it get faster with a second worker?

q5 (hot items) as a keyed stage: bids counted per auction per sliding window
(10 s every 2 s) by ``timed_window(..., key=auction)``, which Dask runs by key
group, one task per worker thread, each told the stream's watermark
(``streams_dask.window_groups``); then, on the client, each window's top
auction (the most bids, the lowest id on ties). The graph:

    scatter(batch_size) -> filter(is_bid)
      -> timed_window(10, slide=2, time=event_time, key=auction) -> map(bid_count)
      -> gather() -> the window's top auction

A keyed window is emitted as ``(auction, bids)``, without its bounds: the top
step finds each output's window from the order a keyed window emits its
windows in (for one auction, by end) and its first bid (:func:`tops`).

The same events run on a ``LocalCluster`` of one and of two single-threaded
worker processes, rounds interleaved, and in-process (the same graph without
``scatter``/``gather``) as a reference. Every Dask run's window outputs must
equal the in-process run's, element for element and in order, and the tops
must equal the unkeyed q5 of ``run.py`` (one window of all bids, ``hot_item``).

Run: ``python benchmarks/nexmark/dask_run.py [--events 200000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# Worker processes import these modules (events, queries) and the packages of
# this checkout, as this process does.
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(HERE), str(HERE.parent.parent), os.environ.get("PYTHONPATH", "")])

import queries as q  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402
from events import START, Bid, generate  # noqa: E402
from run import streams_run  # noqa: E402

import streams_dask  # noqa: E402, F401
from streams import Stream  # noqa: E402

MS = timedelta(milliseconds=1)
WINDOW_MS, SLIDE_MS = q.WINDOW * 1000, q.SLIDE * 1000


def auction(b: Bid) -> int:
    return b.auction


def bid_count(auction_bids: tuple[int, list[Bid]]) -> tuple[int, int, int]:
    """A keyed window as (auction, bids, its first bid's time in ms from the start)."""
    a, bids = auction_bids
    return (a, len(bids), (bids[0].dt - START) // MS)


def _first_window(ms: int) -> int:
    """The first window ``[i * slide, i * slide + size)`` holding time ``ms``."""
    return (ms - WINDOW_MS) // SLIDE_MS + 1


def tops(counts: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """Each window's top auction and its count, by window (as ``hot_item``).

    An auction's windows are emitted in the order of their ends, and only
    those holding its bids: its next window is the first after the last one
    that holds its first bid.
    """
    last: dict[int, int] = {}
    best: dict[int, tuple[int, int]] = {}
    for a, n, first_ms in counts:
        i = last[a] = max(last.get(a, -1 << 62) + 1, _first_window(first_ms))
        top = best.get(i)
        if top is None or n > top[1] or (n == top[1] and a < top[0]):
            best[i] = (a, n)
    return [best[i] for i in sorted(best)]


def keyed_counts(head: Stream[Any]) -> Stream[Any]:
    return (head.filter(q.is_bid)
            .timed_window(q.WINDOW, slide=q.SLIDE, time=q.event_time, key=auction)
            .map(bid_count))


def run(events: list[Any], client: Client | None = None, batch_size: int = 0
        ) -> tuple[float, list[Any]]:
    """Events per second, the keyed windows' outputs and the tops (on Dask with ``client``)."""
    source: Stream[Any] = Stream()
    if client is None:
        out = keyed_counts(source).sink_to_list()
    else:
        scattered = source.scatter(client=client, batch_size=batch_size)
        out = keyed_counts(scattered).gather().sink_to_list()
    t = time.perf_counter()
    for e in events:
        source.emit(e)
    source.close()
    top = tops(out)
    return len(events) / (time.perf_counter() - t), [out, top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=5000)
    args = parser.parse_args()
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    events = generate(args.events)
    reference_rate, expected = run(events)
    hot = streams_run("q5", events)  # unkeyed q5: one window of all bids
    assert expected[1] == hot, "the keyed counts' tops differ from q5's hot items"
    print(f"{args.events} events, {len(expected[0])} keyed windows, {len(hot)} windows; "
          f"in-process {reference_rate:,.0f} events/s", flush=True)
    with ExitStack() as stack:
        runs: dict[int, Callable[[], tuple[float, list[Any]]]] = {}
        for n in (1, 2):
            cluster = stack.enter_context(LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0"))
            client = stack.enter_context(Client(cluster, set_as_default=False))
            runs[n] = lambda c=client: run(events, c, args.batch_size)
            runs[n]()  # warm: workers import the modules, build the stage
        rates: dict[int, list[float]] = {1: [], 2: []}
        for r in range(args.rounds):
            order = (1, 2) if r % 2 == 0 else (2, 1)
            for n in order:
                rate, got = runs[n]()
                assert got == expected, f"{n} worker(s): the outputs differ from in-process"
                rates[n].append(rate)
                print(f"round {r + 1} Dask, {n} worker(s) {rate:12,.0f} events/s", flush=True)
        print()
        for n, values in rates.items():
            print(f"Dask, {n} worker(s): median {statistics.median(values):,.0f} events/s")
        ratios = [two / one for one, two in zip(rates[1], rates[2], strict=True)]
        print(f"2 workers vs 1, paired per round: {', '.join(f'{x:.2f}' for x in ratios)}; "
              f"median {statistics.median(ratios):.2f}x (target 1.5x)")
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
