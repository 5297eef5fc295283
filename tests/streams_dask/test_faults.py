"""Killed workers: nothing lost, nothing duplicated; a separately started cluster.

The second half starts ``dask scheduler`` and two ``dask worker`` processes
(no nanny, so a killed worker stays dead) on loopback ports, runs against
them, kills one worker in the middle of a stream, and tears them down.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from operator import add
from pathlib import Path
from typing import Any

import pytest
from distributed import Client

import streams_dask  # noqa: F401
from streams import Stream
from tests.processes import free_port, stop_process

ROOT = Path(__file__).resolve().parents[2]


def triple(x: int) -> int:
    return 3 * x


def pipeline(head: Stream[Any], lower: Any, out: list[Any]) -> None:
    mapped = head.map(triple).filter(lambda x: x % 2 == 0)
    lower(mapped.scan(add)).sink(lambda x: out.append(("sum", x)))
    lower(mapped.partition(4)).sink(lambda x: out.append(("part", x)))


def in_process(data: list[int]) -> list[Any]:
    out: list[Any] = []
    source: Stream[Any] = Stream()
    pipeline(source, lambda n: n, out)
    for x in data:
        source.emit(x)
    source.close()
    return out


def run_killing_one_worker(client: Client, data: list[int],
                           kill: Any) -> list[Any]:
    """Run on Dask; kill a worker once results sit in its memory, unread."""
    out: list[Any] = []
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client, batch_size=4, max_in_flight=8)
    pipeline(scatter, lambda n: n.gather(), out)
    killed = False
    for x in data:
        source.emit(x)
        runner = scatter._runner
        assert runner is not None
        if not killed:
            held = [f for f, _ in runner.in_flight] + (
                runner.chain.futures() if runner.chain is not None else [])
            held += [item for item, _, _ in runner.waiting if not isinstance(item, list)]
            owners = {w for ws in client.who_has(held).values() for w in ws}
            if owners:
                kill(sorted(owners)[0])
                killed = True
    assert killed, "no result was held on a worker to lose"
    source.close()
    return out


@pytest.mark.dask
def test_killing_a_local_worker_process_loses_nothing(client: Client) -> None:
    data = list(range(160))
    pids = client.run(os.getpid)

    killed: list[int] = []

    def kill(address: str) -> None:
        os.kill(pids[address], signal.SIGKILL)  # the nanny starts a new one
        killed.append(pids[address])

    assert run_killing_one_worker(client, data, kill) == in_process(data)
    (pid,) = killed
    assert pid not in client.run(os.getpid).values()


@pytest.fixture(scope="module")
def external() -> Iterator[tuple[str, dict[str, subprocess.Popen[bytes]]]]:
    """``dask scheduler`` and two ``dask worker`` processes, torn down after."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    # The ``dask`` command of this interpreter (not a shim that would run
    # another Python): it must import the same streams packages.
    dask = [str(Path(sys.executable).with_name("dask"))]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["scheduler"] = subprocess.Popen(
            [*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
             "--no-dashboard"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(2):
            procs[f"worker{i}"] = subprocess.Popen(
                [*dask, "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                 "--no-nanny", "--no-dashboard", "--name", f"w{i}"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        yield address, procs
    finally:
        # Workers first: a worker whose scheduler is gone keeps retrying.
        for name in sorted(procs, key=lambda n: n == "scheduler"):
            stop_process(procs[name], timeout=15)


@pytest.mark.dask
def test_separately_started_cluster_and_a_killed_worker(
        external: tuple[str, dict[str, subprocess.Popen[bytes]]]) -> None:
    address, procs = external
    data = list(range(200))
    with Client(address, set_as_default=False, timeout=60) as client:
        client.wait_for_workers(2, timeout=60)
        by_name = {info["name"]: addr
                   for addr, info in client.scheduler_info()["workers"].items()}
        pid_of = {by_name[f"w{i}"]: procs[f"worker{i}"].pid for i in range(2)}
        victims: list[str] = []

        def kill(worker: str) -> None:
            os.kill(pid_of[worker], signal.SIGKILL)
            victims.append(worker)

        got = run_killing_one_worker(client, data, kill)
        (victim,) = victims
        assert procs[next(k for k, v in procs.items() if v.pid == pid_of[victim])].wait(
            timeout=30) != 0
        assert got == in_process(data)
