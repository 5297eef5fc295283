"""Every worker killed at once while a stateful stage runs: the stream recovers.

The nannies restart the workers at new addresses. A stateful stage's part
tasks are pinned, loosely, to the workers they started on; a task that
was on the cluster when the last of them died waits in ``no-worker``, and
distributed would hand it to a new worker only if it were one of those it
is pinned to (see ``streams_dask.placement``). Without the plugin that
frees such tasks, ``emit`` waited for ever: the timeout mark turns that
into a failure.

The workers kill themselves: the step of the stateful stage that meets a
given element kills every worker process, its own last, so that its round
is on the cluster when they die, whatever the timing of the client. A
marker file makes it do so once: the recomputed step goes on.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, LocalCluster

import streams_dask  # noqa: F401
from streams import Stream
from tests.dask_threads import dask_threads

pytestmark = [pytest.mark.dask, pytest.mark.timeout(120)]

ELEMENTS = 1000
KILL_AT = 300


@pytest.fixture(scope="module")
def restarting() -> Iterator[LocalCluster]:
    """Two single-threaded worker processes, each under a nanny that restarts
    it; this module's own, since its tests kill them."""
    with dask_threads(), LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      host="127.0.0.1", dashboard_address=":0") as cluster:
        yield cluster


class KillsEveryWorkerOnce:
    """``f(acc, x)``, but at element ``at`` (the first time only) SIGKILLs every
    worker process, the one running it last."""

    def __init__(self, f: Callable[[Any, Any], Any], at: int, pids: list[int],
                 marker: Path) -> None:
        self.f, self.at, self.pids, self.marker = f, at, pids, marker

    def __call__(self, acc: Any, x: Any) -> Any:
        if (x[1] if isinstance(x, tuple) else x) == self.at:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass  # recomputed on a new worker: killed already
            else:
                for pid in sorted(self.pids, key=lambda p: p == os.getpid()):
                    os.kill(pid, signal.SIGKILL)
        return self.f(acc, x)


def add(acc: int, x: int) -> int:
    return acc + x


def add_second(acc: int, pair: tuple[int, int]) -> int:
    return acc + pair[1]


def keyed(x: int) -> tuple[int, int]:
    return (x % 5, x)


def plain_scan(head: Stream[Any], f: Callable[[Any, Any], Any]) -> Stream[Any]:
    return head.scan(f)


def keyed_scan(head: Stream[Any], f: Callable[[Any, Any], Any]) -> Stream[Any]:
    return head.map(keyed).scan(f, start=0, key=0)


PIPELINES = {"scan": (plain_scan, add), "keyed scan": (keyed_scan, add_second)}


def in_process(name: str) -> list[Any]:
    build, f = PIPELINES[name]
    source: Stream[Any] = Stream()
    out = build(source, f).sink_to_list()
    for x in range(ELEMENTS):
        source.emit(x)
    source.close()
    return out


def worker_pids(client: Client) -> list[int]:
    client.wait_for_workers(2, timeout=120)  # a hang guard only
    return sorted(client.run(os.getpid).values())


@pytest.mark.parametrize("name", list(PIPELINES))
def test_every_worker_killed_under_a_stateful_stage_loses_nothing(
        restarting: LocalCluster, tmp_path: Path, name: str) -> None:
    build, f = PIPELINES[name]
    with dask_threads(), Client(restarting, set_as_default=False) as client:
        pids = worker_pids(client)
        killer = KillsEveryWorkerOnce(f, KILL_AT, pids, tmp_path / "killed")
        source: Stream[Any] = Stream()
        scatter = source.scatter(client=client, batch_size=50)
        out = build(scatter, killer).gather().sink_to_list()
        for x in range(ELEMENTS):
            source.emit(x)
        source.close()
        assert (tmp_path / "killed").exists()
        assert set(worker_pids(client)).isdisjoint(pids)  # every worker is a new one
    assert out == in_process(name)


@pytest.mark.parametrize("name", list(PIPELINES))
def test_every_worker_killed_under_an_asynchronous_stream_loses_nothing(
        restarting: LocalCluster, tmp_path: Path, name: str) -> None:
    build, f = PIPELINES[name]

    async def main() -> tuple[list[Any], list[int], list[int]]:
        async with Client(restarting.scheduler_address, asynchronous=True,
                          set_as_default=False) as client:
            await client.wait_for_workers(2, timeout=120)
            pids = sorted((await client.run(os.getpid)).values())
            killer = KillsEveryWorkerOnce(f, KILL_AT, pids, tmp_path / "killed")
            source: Stream[Any] = Stream(asynchronous=True)
            scatter = source.scatter(client=client, batch_size=50)
            out = build(scatter, killer).gather().sink_to_list()
            for x in range(ELEMENTS):
                await source.emit(x)
            await source.aclose()
            await client.wait_for_workers(2, timeout=120)
            return out, pids, sorted((await client.run(os.getpid)).values())

    with dask_threads():
        out, before, after = asyncio.run(main())
    assert (tmp_path / "killed").exists()
    assert set(after).isdisjoint(before)
    assert out == in_process(name)
