"""Nexmark queries in one process: streams against bytewax 0.21.

Queries (Nexmark's, on the seeded events of ``events.py``): q0 pass-through,
q1 currency map, q2 filter, q5 hot items (sliding window 10 s every 2 s),
q7 highest bid (tumbling 10 s), q8 new users (persons and the auctions they
opened, per tumbling 10 s window and person), q11 bids per bidder session
(gap 10 s). Both contenders call the same functions (``queries.py``) on the
same event objects, with their own operators; bytewax gets its fast path
(input batches of 1,000, unordered windows: the events come in order).
Each query's outputs are compared across contenders before any timing.

Each contender first runs once untimed, and the outputs are compared
then; in the timed rounds each output is dropped as soon as its run ends,
so every run starts from the same heap (the events and the modules). Per
round the contenders run one after the other, and rounds rotate which goes
first (as ``spark_run.py``'s do): a run's time depends on the run before
it (on 2026-12-06, 1M events, q1's streams run took 184 ms after the plain
loop's and 171 ms after bytewax's), and a fixed order gave one contender
the same neighbour every round. Medians and the paired per-round ratio
(bytewax time / streams time: how many times faster streams is) are
printed. For q0, q1 and q2 a hand-written loop over
the events, with the functions' expressions written in, runs in the same
rounds too: what no engine can beat in Python, so "plain loop: bytewax
Nx its time" is the most any engine can be faster than bytewax there.

Run: ``python benchmarks/nexmark/run.py [--events 1000000] [--rounds 3] [--only q5,q7]``
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import queries as q
from events import START, generate

QUERIES = ("q0", "q1", "q2", "q5", "q7", "q8", "q11")


# -- streams -----------------------------------------------------------------

def streams_run(query: str, events: list[Any]) -> list[Any]:
    from streams import Stream

    source = Stream.from_iterable(events)
    if query == "q0":
        node = source
    elif query == "q1":
        node = source.filter(q.is_bid).map(q.euro)
    elif query == "q2":
        node = source.filter(q.q2_selected).map(q.q2_fields)
    elif query == "q5":
        node = (source.filter(q.is_bid)
                .timed_window(q.WINDOW, slide=q.SLIDE, time=q.event_time).map(q.hot_item))
    elif query == "q7":
        node = source.filter(q.is_bid).timed_window(q.WINDOW, time=q.event_time).map(
            q.highest_bid)
    elif query == "q8":
        node = (source.filter(q.is_person_or_auction)
                .timed_window(q.WINDOW, time=q.event_time, key=q.owner)
                .map(q.new_users).flatten())
    elif query == "q11":
        node = (source.filter(q.is_bid)
                .session_window(q.SESSION_GAP, time=q.event_time, key=q.bidder)
                .map(q.session_count))
    else:
        raise ValueError(query)
    out = node.sink_to_list()
    source.start()  # no loop running: the whole input, then close (windows flush)
    return out


# -- bytewax -----------------------------------------------------------------

def _window_values(kv: tuple[str, tuple[int, list[Any]]]) -> list[Any]:
    return kv[1][1]


def bytewax_run(query: str, events: list[Any]) -> list[Any]:
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    flow = Dataflow(f"nexmark_{query}")
    out: list[Any] = []
    inp = op.input("in", flow, TestingSource(events, batch_size=1000))
    # A replay: the watermark follows the events only. With the system clock
    # (bytewax's default), time spent processing moves the watermark on and
    # turns in-order events late, which bytewax then drops.
    clock = win.EventClock(ts_getter=q.event_time, wait_for_system_duration=timedelta(0),
                           now_getter=lambda: START)
    window = timedelta(seconds=q.WINDOW)
    tumbling = win.TumblingWindower(length=window, align_to=START)
    if query == "q0":
        node = inp
    elif query == "q1":
        node = op.map("euro", op.filter("bids", inp, q.is_bid), q.euro)
    elif query == "q2":
        node = op.map("fields", op.filter("selected", inp, q.q2_selected), q.q2_fields)
    elif query == "q5":
        keyed = op.key_on("all", op.filter("bids", inp, q.is_bid), lambda _: "all")
        sliding = win.SlidingWindower(length=window, offset=timedelta(seconds=q.SLIDE),
                                      align_to=START)
        windows = win.collect_window("w", keyed, clock, sliding, ordered=False).down
        node = op.map("hot", windows, lambda kv: q.hot_item(_window_values(kv)))
    elif query == "q7":
        keyed = op.key_on("all", op.filter("bids", inp, q.is_bid), lambda _: "all")
        windows = win.collect_window("w", keyed, clock, tumbling, ordered=False).down
        node = op.map("highest", windows, lambda kv: q.highest_bid(_window_values(kv)))
    elif query == "q8":
        keyed = op.key_on("owner", op.filter("pa", inp, q.is_person_or_auction),
                          lambda e: str(q.owner(e)))
        windows = win.collect_window("w", keyed, clock, tumbling, ordered=False).down
        node = op.flat_map("new", windows,
                           lambda kv: q.new_users((kv[0], _window_values(kv))))
    elif query == "q11":
        keyed = op.key_on("bidder", op.filter("bids", inp, q.is_bid),
                          lambda b: str(q.bidder(b)))
        sessions = win.SessionWindower(gap=timedelta(seconds=q.SESSION_GAP))
        windows = win.collect_window("w", keyed, clock, sessions, ordered=False).down
        node = op.map("count", windows,
                      lambda kv: q.session_count((kv[0], _window_values(kv))))
    else:
        raise ValueError(query)
    op.output("out", node, TestingSink(out))
    run_main(flow)
    return out


# -- a hand-written loop, the reference for the stateless queries ------------

def plain_run(query: str, events: list[Any]) -> list[Any]:
    Bid = q.Bid
    out: list[Any] = []
    if query == "q0":
        for e in events:
            out.append(e)
    elif query == "q1":
        for e in events:
            if type(e) is Bid:
                out.append((e.auction, e.bidder, e.price * 0.908, e.dt))
    elif query == "q2":
        for e in events:
            if type(e) is Bid and e.auction % 123 == 0:
                out.append((e.auction, e.price))
    else:
        raise ValueError(query)
    return out


PLAIN = ("q0", "q1", "q2")


# -- comparison and timing ---------------------------------------------------

def comparable(query: str, out: list[Any]) -> list[Any]:
    """Outputs as a sorted list: engines emit windows of different keys in other orders."""
    if query == "q11":  # bytewax's keys are strings
        out = [(str(k), n) for k, n in out]
    return sorted(out, key=repr)


def timed(run: Callable[[str, list[Any]], list[Any]], query: str,
          events: list[Any]) -> tuple[float, int]:
    """Seconds ``run`` takes over ``events``, and its number of outputs (dropped after)."""
    gc.collect()
    t0 = time.perf_counter()
    out = run(query, events)
    return time.perf_counter() - t0, len(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(QUERIES))
    args = parser.parse_args()
    events = generate(args.events)
    import bytewax.operators  # noqa: F401  (imports are not timed)

    import streams  # noqa: F401
    print(f"{args.events:,} events ({sum(type(e).__name__ == 'Bid' for e in events):,} bids), "
          f"{args.rounds} rounds")
    print(f"{'query':6} {'outputs':>9} {'streams ev/s':>13} {'bytewax ev/s':>13} "
          f"{'streams faster':>15}")
    for query in args.only.split(","):
        runs: dict[str, Callable[[str, list[Any]], list[Any]]] = {
            "streams": streams_run, "bytewax": bytewax_run}
        if query in PLAIN:
            runs["plain"] = plain_run
        # Untimed: the outputs compared, each contender's code warmed up.
        out_s, out_b = streams_run(query, events), bytewax_run(query, events)
        if query in PLAIN and plain_run(query, events) != out_s:
            raise SystemExit(f"{query}: the plain loop's outputs differ")
        a, b = comparable(query, out_s), comparable(query, out_b)
        if a != b:
            raise SystemExit(f"{query}: outputs differ: {len(a)} from streams, "
                             f"{len(b)} from bytewax; first differences "
                             f"{[x for x in a if x not in set(b)][:3]} / "
                             f"{[x for x in b if x not in set(a)][:3]}")
        n_out = len(out_s)
        del out_s, out_b, a, b
        times: dict[str, list[float]] = {name: [] for name in runs}
        names = list(runs)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                t, n = timed(runs[name], query, events)
                if n != n_out:
                    raise SystemExit(f"{query}: {name} gave {n} outputs, not {n_out}")
                times[name].append(t)
        ours, theirs, plain = times["streams"], times["bytewax"], times.get("plain", [])
        ratios = [b / s for b, s in zip(theirs, ours, strict=True)]
        print(f"{query:6} {n_out:>9,} {args.events / statistics.median(ours):>13,.0f} "
              f"{args.events / statistics.median(theirs):>13,.0f} "
              f"{statistics.median(ratios):>14.2f}x", flush=True)
        print(f"{'':6} rounds: " + " ".join(f"{ratio:.2f}x" for ratio in ratios), flush=True)
        if plain:
            vs_bytewax = [b / p for b, p in zip(theirs, plain, strict=True)]
            vs_streams = [s / p for s, p in zip(ours, plain, strict=True)]
            print(f"{'':6} plain loop {args.events / statistics.median(plain):,.0f} ev/s: "
                  f"bytewax {statistics.median(vs_bytewax):.2f}x its time (rounds "
                  + " ".join(f"{v:.2f}" for v in vs_bytewax)
                  + f"), streams {statistics.median(vs_streams):.2f}x (rounds "
                  + " ".join(f"{v:.2f}" for v in vs_streams) + ")", flush=True)


if __name__ == "__main__":
    main()
