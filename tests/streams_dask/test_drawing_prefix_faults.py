"""A worker killed while a step that draws at random feeds a stateful stage.

The step before the stateful stage is not pure (it salts keys at random), so
it runs once per batch and every part of the stateful stage takes its
output. Were that output a task Dask could run again, a worker that dies
would have it recomputed for the parts it held, with other draws: their
states would disagree with the events already delivered, and elements would
be lost or counted twice. The client holds the output instead (see
``streams_dask.worker.Drawn``): recomputed parts take the same elements.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
from collections.abc import Callable
from typing import Any

import pytest
from distributed import Client

import streams_dask  # noqa: F401
from streams import Stream
from streams_dask import chain

pytestmark = pytest.mark.dask

ELEMENTS = 400


def salted(x: int) -> tuple[int, int]:
    """A hot key spread over 8 sub-keys at random (key salting)."""
    return (random.randrange(8), x)


def count(n: int, pair: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    """The elements of a key, numbered."""
    return n + 1, (n + 1, pair[1])


def drawn(x: int) -> tuple[int, int]:
    """An element with a random amount."""
    return (x, random.randrange(1000))


def running_total(acc: tuple[int, int, int], pair: tuple[int, int]) -> tuple[int, int, int]:
    """The amounts summed: (element, its amount, the total so far)."""
    return (pair[0], pair[1], acc[2] + pair[1])


def run_killing_a_worker(client: Client, build: Callable[[Stream[Any]], Stream[Any]]
                         ) -> list[Any]:
    """Run ``build`` on Dask; once five rounds are held on the workers only (no
    anchor since), kill the worker holding the first part's latest state."""
    pids = client.run(os.getpid)
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client, batch_size=8, max_in_flight=4)
    out = build(scatter).gather().sink_to_list()
    killed: list[str] = []
    for x in range(ELEMENTS):
        source.emit(x)
        runner = scatter._runner
        assert runner is not None and runner.chain is not None
        links = runner.chain.links
        if not killed and runner.chain.since_anchor >= 5 and links is not None:
            links[0].result()  # in the memory of a worker
            (victim, *_) = client.who_has(links[:1])[links[0].key]
            os.kill(pids[victim], signal.SIGKILL)  # the nanny starts a new one
            killed.append(victim)
    source.close()
    assert killed, "no round was held on a worker to lose"
    client.wait_for_workers(2, timeout=120)  # the next test has both again
    return out


def test_salted_keys_of_a_keyed_scan_are_each_counted_once_when_a_worker_dies(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # No anchor before the end: the parts' states since the start are
    # recomputed from the rounds' inputs.
    monkeypatch.setattr(chain, "ANCHOR_EVERY", 1000)
    out = run_killing_a_worker(client, lambda s: s.map(salted).scan(
        count, start=0, key=0, returns_state=True))
    assert sorted(x for _, (_, x) in out) == list(range(ELEMENTS))
    # Per key, counts 1, 2, ... in input order: one state per key, fed each
    # of its elements once.
    for key in range(8):
        mine = [nx for k, nx in out if k == key]
        assert [n for n, _ in mine] == list(range(1, len(mine) + 1)), key
        assert [x for _, x in mine] == sorted(x for _, x in mine), key


def test_a_running_total_of_random_amounts_stays_consistent_when_a_worker_dies(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # The same for a stage that runs as one part: its state, recomputed,
    # must be the total of the amounts already delivered.
    monkeypatch.setattr(chain, "ANCHOR_EVERY", 1000)
    out = run_killing_a_worker(client, lambda s: s.map(drawn).scan(
        running_total, start=(-1, 0, 0)))
    assert [x for x, _, _ in out] == list(range(ELEMENTS))
    totals = [0] + [total for _, _, total in out]
    assert [b - a for a, b in itertools.pairwise(totals)] == [amount for _, amount, _ in out]
