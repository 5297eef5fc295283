"""The stateless step before a keyed one: run in each part only when it is pure.

Each part of a keyed round keeps the key groups it owns of what it
computed; a step before it that each part runs over the whole batch must
give them all the same elements (see :mod:`streams_dask.pure_steps`).
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, get_task_stream

import streams_dask  # noqa: F401
from streams import Stream
from streams_dask import chain
from streams_dask.pure_steps import pure_function, pure_step

pytestmark = pytest.mark.dask

NEXMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "nexmark"


@pytest.fixture
def parts_run_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whenever the chain has a prefix, its parts run it (never judged too costly),
    whatever the timings of a loaded machine."""
    monkeypatch.setattr(chain, "PREFIX_JUDGED_AFTER", float("inf"))


def salted(x: int) -> tuple[int, int]:
    """A hot key spread over 8 sub-keys at random (key salting)."""
    return (random.randrange(8), x)


def count(n: int, pair: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    """The elements of a key, numbered (a keyed scan emits ``(key, output)``)."""
    return n + 1, (n + 1, pair[1])


def task_names(tasks: Any) -> list[str]:
    return [str(t["key"]) for t in tasks.data]


def test_a_random_key_before_a_keyed_scan_keeps_every_element_once(
        client: Client, parts_run_the_prefix: None) -> None:
    # Each of the two parts drew its own keys: elements one part gave
    # another's group were lost, and counted twice where both kept them.
    source: Stream[Any] = Stream()
    out = (source.scatter(client=client, batch_size=50).map(salted)
           .scan(count, start=0, key=0, returns_state=True).gather().sink_to_list())
    with get_task_stream(client) as tasks:
        for x in range(400):
            source.emit(x)
        source.close()
    assert sorted(x for _, (_, x) in out) == list(range(400))
    # Per key, counts 1, 2, ... in input order: one state per key, no element twice.
    for key in range(8):
        mine = [nx for k, nx in out if k == key]
        assert [n for n, _ in mine] == list(range(1, len(mine) + 1))
        assert [x for _, x in mine] == sorted(x for _, x in mine)
    # Run once per batch, in a task of its own, whose result both parts take.
    assert any(n.startswith("run_prefix") for n in task_names(tasks))


def recorded(x: int, log: str) -> tuple[int, int]:
    """A step with a side effect (an API call, a metric): one line per call."""
    with open(log, "a") as f:
        f.write(f"{x}\n")
    return (x % 4, x)


def add_second(total: int, kx: tuple[int, int]) -> int:
    return total + kx[1]


def test_a_side_effect_before_a_keyed_scan_runs_once_per_element(
        client: Client, parts_run_the_prefix: None, tmp_path: Path) -> None:
    log = tmp_path / "calls.txt"
    results = []
    for on_dask in (False, True):
        log.unlink(missing_ok=True)
        source: Stream[Any] = Stream()
        head = source.scatter(client=client, batch_size=20) if on_dask else source
        node = head.map(recorded, str(log)).scan(add_second, start=0, key=0)
        out = (node.gather() if on_dask else node).sink_to_list()
        for x in range(100):
            source.emit(x)
        source.close()
        results.append((out, Counter(log.read_text().split())))
    (out, calls), (dask_out, dask_calls) = results
    assert dask_out == out
    assert dask_calls == calls == Counter(str(x) for x in range(100))


def test_a_pure_step_before_a_keyed_scan_still_runs_in_each_part(
        client: Client, parts_run_the_prefix: None) -> None:
    source: Stream[Any] = Stream()
    node = source.map(lambda x: (x % 5, x)).filter(lambda kx: kx[1] % 3 != 0).pluck(1)
    expected = node.map(lambda x: (x % 5, x)).scan(add_second, start=0, key=0).sink_to_list()
    dask_source: Stream[Any] = Stream()
    dask_out = (dask_source.scatter(client=client, batch_size=25).map(lambda x: (x % 5, x))
                .filter(lambda kx: kx[1] % 3 != 0).pluck(1).map(lambda x: (x % 5, x))
                .scan(add_second, start=0, key=0).gather().sink_to_list())
    with get_task_stream(client) as tasks:
        for x in range(100):
            source.emit(x)
            dask_source.emit(x)
        source.close()
        dask_source.close()
    assert dask_out == expected
    assert not any(n.startswith("run_prefix") for n in task_names(tasks))


def test_nexmarks_steps_before_its_keyed_windows_are_pure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # benchmarks/nexmark/dask_run.py filters with is_bid before a keyed window:
    # run in each part, it costs no transfer (its keyed q5's speed).
    monkeypatch.syspath_prepend(str(NEXMARK))
    loaded = set(sys.modules)
    try:
        import dask_run  # type: ignore[import-not-found]
        import queries  # type: ignore[import-not-found]

        head = dask_run.keyed_counts(Stream()).upstream.upstream
        assert pure_step(head.describe()) and head.describe().func is queries.is_bid
        for f in (queries.is_bid, queries.q2_selected, queries.is_person_or_auction,
                  queries.event_time, queries.owner, queries.bidder, dask_run.auction):
            assert pure_function(f), f.__name__
    finally:  # the benchmark's modules (``events``, ``queries``...) are no one else's
        for name in set(sys.modules) - loaded:
            del sys.modules[name]


TABLE = {"a": 1}
LIMIT = 100
SALT = (random.randrange(8) for _ in iter(int, 1))
calls: list[int] = []


def _store_global(x: int) -> int:
    global calls
    calls = [x]
    return x


def _mutates_in_place(x: int) -> int:
    seen = calls
    seen += [x]
    return x


def _nested(x: list[int]) -> list[int]:
    return [y + 1 for y in x]


def _generator(x: int) -> Any:
    yield x


def _closure(factor: Any) -> Any:
    return lambda x: x * factor


def _item_store(x: dict[str, int]) -> dict[str, int]:
    x["seen"] = 1
    return x


def _shadowed_len(x: list[int]) -> int:
    return len(x)


@pytest.mark.parametrize(("func", "pure"), [
    (abs, True),
    (lambda e: type(e) is int and isinstance(e, int), True),
    (lambda kv: (kv[0] % 8, max(len(kv[1]), 1), LIMIT, f"{kv[0]}"), True),
    (lambda kv: (kv[0], TABLE["a"]), False),  # a global dict: another process's may differ
    (lambda kv: (len(sys.modules) % 8, kv), False),  # a module's state, per process
    (lambda kv: ((kv[0], any(SALT)), kv), False),  # a global generator any() would run
    (_closure(3), True),
    (salted, False),  # random
    (lambda x: (time.time(), x), False),  # the clock
    (print, False),
    (lambda x: x.strip(), False),  # a method: its object's state is unknown
    (lambda x: max(x, key=abs), False),  # a keyword could pass a function to call
    (lambda x: sorted(x), False),
    (lambda x: hash(x), False),  # differs from process to process
    (_store_global, False),
    (_mutates_in_place, False),
    (_item_store, False),
    (_nested, False),
    (_generator, False),
    (_closure([3]), False),  # closes over a mutable value
    (recorded, False),
    (pytest.approx, False),  # not a plain function
], ids=lambda v: getattr(v, "__name__", None) if callable(v) else None)
def test_pure_function_accepts_only_provably_pure_steps(func: Any, pure: bool) -> None:
    assert pure_function(func) is pure


def test_a_global_that_shadows_a_pure_builtin_is_not_trusted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert pure_function(_shadowed_len)
    monkeypatch.setitem(globals(), "len", lambda x: random.random())
    assert not pure_function(_shadowed_len)
