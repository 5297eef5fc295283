"""A step whose output follows the hash seed (a set's order) is not run by each part.

The parts of a keyed round may each run the stateless step before them only
if it gives them all the same elements (``streams_dask.pure_steps``). The
order of a set of strings depends on the process's hash seed, which workers
started without a nanny do not share: parts that each ran
``list({a, b})[0]`` disagreed about keys, losing some elements and counting
others twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import Client

import streams_dask  # noqa: F401
from streams import Stream
from streams_dask import chain
from streams_dask.pure_steps import pure_function
from tests.processes import free_port, stop_process

ROOT = Path(__file__).resolve().parents[2]

ORDERS = frozenset({"page", "user"})

# The steps below take a set's first element as ``list(s)[0]`` on purpose
# (RUF015): it is the form the purity check must refuse.


def first_of_set(pair: tuple[str, str]) -> str:
    return list({pair[0], pair[1]})[0]  # noqa: RUF015


def first_of_constant_set(x: int) -> tuple[str, int]:
    return (tuple({"a", "b", "c"})[0], x)  # noqa: RUF015


def first_of_global_set(x: int) -> tuple[str, int]:
    return (list(ORDERS)[0], x)  # noqa: RUF015


def member_of_global_set(x: str) -> bool:
    return x in ORDERS


def _closure(values: Any) -> Any:
    return lambda x: (list(values)[x % 2], x)


@pytest.mark.parametrize(("func", "pure"), [
    (first_of_set, False),
    (first_of_constant_set, False),
    (first_of_global_set, False),
    (_closure(frozenset({"a", "b"})), False),
    (lambda x: {x, "a"}, False),  # an output that holds a set
    (lambda x: x in {"a", "b"}, True),  # membership: the same in any order
    (lambda pair: pair[0] not in {pair[1], "a"}, True),
    (member_of_global_set, True),
    (lambda x: (x, ("a", "b")), True),
], ids=lambda v: getattr(v, "__name__", None) if callable(v) else None)
def test_a_set_is_pure_only_for_a_membership_test(func: Any, pure: bool) -> None:
    assert pure_function(func) is pure


@pytest.fixture(scope="module")
def seeds_apart() -> Iterator[str]:
    """``dask scheduler`` and two ``dask worker --no-nanny`` with hash seeds 1 and 2."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    dask = str(Path(sys.executable).with_name("dask"))  # this interpreter's
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for seed in ("1", "2"):
            procs.append(subprocess.Popen(
                [dask, "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                 "--no-nanny", "--no-dashboard"], env=dict(env, PYTHONHASHSEED=seed),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield address
    finally:
        # Workers first: a worker whose scheduler is gone keeps retrying.
        for proc in reversed(procs):
            stop_process(proc, timeout=15)


def keyed_by_first_of_set(pair: tuple[str, str, int]) -> tuple[str, int]:
    return (list({pair[0], pair[1]})[0], pair[2])  # noqa: RUF015


def number(n: int, kx: tuple[str, int]) -> tuple[int, tuple[int, int]]:
    return n + 1, (n + 1, kx[1])


@pytest.mark.dask
def test_workers_with_other_hash_seeds_agree_on_keys_from_a_set(
        seeds_apart: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A step taken as pure would run in each part (never judged too costly).
    monkeypatch.setattr(chain, "PREFIX_JUDGED_AFTER", float("inf"))
    items = [(f"user{i}", f"page{i % 7}", i) for i in range(200)]
    with Client(seeds_apart, set_as_default=False, timeout=60) as client:
        client.wait_for_workers(2, timeout=60)
        seeds = client.run(lambda: hash("user1"))
        assert len(set(seeds.values())) == 2, "the workers share a hash seed"
        source: Stream[Any] = Stream()
        out = (source.scatter(client=client, batch_size=50).map(keyed_by_first_of_set)
               .scan(number, start=0, key=0, returns_state=True).gather().sink_to_list())
        for x in items:
            source.emit(x)
        source.close()
    assert sorted(x for _, (_, x) in out) == list(range(200))
    for key in {k for k, _ in out}:
        assert [n for k, (n, _) in out if k == key] == list(
            range(1, sum(k == key for k, _ in out) + 1)), key
