"""Redis Streams throughput: ``from_redis -> map -> sink_to_redis`` against plain redis-py.

Run by hand (never in the test suite)::

    python benchmarks/redis_io.py [--entries 200000] [--rounds 5]

It starts its own ``redis-server`` on a free loopback port, fills an input
stream, and per round runs, each variant reading the whole input through its
own consumer group and writing to its own output stream:

* ``plain``: a plain redis-py loop making the same calls one by one:
  ``XREADGROUP`` (1,000 entries), one ``XADD`` per entry, ``XACK`` per batch;
* ``plain-pipelined``: the same loop with the ``XADD`` calls and the ``XACK``
  pipelined (a stronger baseline, for information);
* ``streams``: ``Stream.from_redis(...).map(f).sink_to_redis(...)``;
* ``streams+ckpt``: the same with a Checkpointer every 1,000 elements,
  with ``fsync=False`` and with the default ``fsync=True`` (written in the
  pipeline's thread), and with ``fsync=True, background=True`` (one writer
  thread).

It prints per-variant medians of entries/s, and medians of the per-round
ratios (paired, so a noisy machine affects both sides of a ratio alike).
Client and redis-server CPU time per entry are printed too (the server's
from /proc, on Linux): the machine is shared, CPU per entry is what the code
controls, and the two processes share the machine's cores. The load average
is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from streams import Checkpointer, Stream

STREAM = "bench-in"
SMALL = "bench-in-small"
BATCH = 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(directory: str) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
         "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "Ready to accept connections" in line:
            return proc, f"redis://127.0.0.1:{port}/0"
    raise RuntimeError("redis-server did not start")


def transform(fields: dict[str, str]) -> dict[str, Any]:
    return {"n": int(fields["n"]) * 2, "word": fields["word"]}


def fill(url: str, key: str, n: int) -> None:
    r = redis.Redis.from_url(url)
    r.delete(key)
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(key, {"n": i, "word": f"w{i % 97}"})
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    r.close()


def plain(url: str, key: str, group: str, out: str, pipelined: bool) -> int:
    r = redis.Redis.from_url(url, decode_responses=True)
    r.xgroup_create(key, group, id="0")
    n = 0
    while True:
        reply = r.xreadgroup(group, "c", {key: ">"}, count=BATCH)
        if not reply:
            break
        entries = reply[0][1]
        if pipelined:
            pipe = r.pipeline(transaction=False)
            for _, fields in entries:
                pipe.xadd(out, transform(fields))
            pipe.xack(key, group, *[eid for eid, _ in entries])
            pipe.execute()
        else:
            for _, fields in entries:
                r.xadd(out, transform(fields))
            r.xack(key, group, *[eid for eid, _ in entries])
        n += len(entries)
    r.close()
    return n


def with_streams(url: str, group: str, out: str, ckpt: str | None = None,
                 fsync: bool = True, background: bool = False) -> int:
    source = Stream.from_redis(STREAM, group=group, consumer="c", url=url, count=BATCH)
    counted = source.map(transform)
    counted.sink_to_redis(out, url=url, batch=BATCH)
    if ckpt is not None:
        Checkpointer(source, ckpt, every=1000, fsync=fsync, background=background)
    source.start()
    r = redis.Redis.from_url(url)
    n = int(r.xlen(out))
    assert r.xpending(STREAM, group)["pending"] == 0
    r.close()
    return n


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``; NaN if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(run: Callable[[], int], server: int) -> tuple[float, float, float]:
    """(entries/s, client and redis-server CPU microseconds per entry)."""
    s0, c0, t0 = process_cpu(server), time.process_time(), time.perf_counter()
    n = run()
    t1, c1, s1 = time.perf_counter(), time.process_time(), process_cpu(server)
    return n / (t1 - t0), (c1 - c0) / n * 1e6, (s1 - s0) / n * 1e6


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--entries", type=int, default=200_000)
    p.add_argument("--plain-entries", type=int, default=20_000,
                   help="the one-call-per-entry loop is slow: it reads only this many")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    try:
        import hiredis  # noqa: F401
        parser = "hiredis"
    except ImportError:
        parser = "pure Python (install hiredis: redis-py parses replies several times faster)"
    print(f"python {sys.version.split()[0]}, redis-py {redis.__version__}, parser: {parser}")
    print(f"load average at start: {load()}")

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(tmp)
        try:
            admin = redis.Redis.from_url(url)
            fill(url, STREAM, args.entries)
            fill(url, SMALL, args.plain_entries)
            results: dict[str, list[tuple[float, float, float]]] = {}
            for rnd in range(args.rounds):
                variants: dict[str, Callable[[str, str], int]] = {
                    "plain": lambda g, o: plain(url, SMALL, g, o, pipelined=False),
                    "plain-pipelined": lambda g, o: plain(url, STREAM, g, o, pipelined=True),
                    "streams": lambda g, o: with_streams(url, g, o),
                    "streams+ckpt(fsync=False)": lambda g, o: with_streams(
                        url, g, o, ckpt=str(Path(tmp) / f"ck-{g}"), fsync=False),
                    "streams+ckpt(fsync=True)": lambda g, o: with_streams(
                        url, g, o, ckpt=str(Path(tmp) / f"ck-{g}"), fsync=True),
                    "streams+ckpt(fsync=True,bg)": lambda g, o: with_streams(
                        url, g, o, ckpt=str(Path(tmp) / f"ck-{g}"), fsync=True,
                        background=True),
                }
                for i, (name, run) in enumerate(variants.items()):
                    out = f"bench-out-{i}"
                    admin.delete(out)
                    results.setdefault(name, []).append(
                        timed(lambda run=run, g=f"g{rnd}-{i}", out=out: run(g, out), proc.pid))
                    admin.delete(out)
                print(f"round {rnd + 1}: " + ", ".join(
                    f"{k} {v[-1][0]:,.0f}/s" for k, v in results.items()))
            admin.close()
        finally:
            proc.terminate()
            proc.wait()

    print(f"load average at end: {load()}")
    print(f"\n{'variant':28} {'median entries/s':>17} {'client CPU us/entry':>20} "
          f"{'server CPU us/entry':>20}")
    for name, rs in results.items():
        print(f"{name:28} {statistics.median(r[0] for r in rs):>17,.0f} "
              f"{statistics.median(r[1] for r in rs):>20.2f} "
              f"{statistics.median(r[2] for r in rs):>20.2f}")

    def ratio(a: str, b: str) -> float:
        return statistics.median(x[0] / y[0] for x, y in zip(results[a], results[b],
                                                             strict=True))

    print("\nmedian paired ratios (throughput)")
    print(f"  streams / plain                     {ratio('streams', 'plain'):6.2f}x")
    print(f"  streams / plain-pipelined           {ratio('streams', 'plain-pipelined'):6.2f}x")
    for ck in ("streams+ckpt(fsync=False)", "streams+ckpt(fsync=True)",
               "streams+ckpt(fsync=True,bg)"):
        cost = 1 - ratio(ck, "streams")
        print(f"  cost of {ck:27} {cost:6.1%} of throughput")


if __name__ == "__main__":
    main()
