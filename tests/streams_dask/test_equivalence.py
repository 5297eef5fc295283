"""A segment on Dask gives exactly what the same nodes give in-process.

Each pipeline is built twice from one description: in-process, and with
its middle between ``scatter()`` and ``gather()``. Hypothesis varies the
input, the batch size and the bound on tasks in flight, so batch
boundaries fall everywhere, including inside stateful steps.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import add, mul
from typing import Any

import pytest
from distributed import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams import Stream

Lift = Callable[[Stream[Any]], Stream[Any]]
Pipeline = Callable[[Stream[Any], Lift, Callable[[str, Stream[Any]], None]], None]


def inc(x: int) -> int:
    return x + 1


def chain(h: Stream[Any], down: Lift, out: Callable[[str, Stream[Any]], None]) -> None:
    node = (h.map(inc).filter(lambda x: x % 2).map(lambda x: (x, 3)).starmap(mul)
            .remove(lambda x: x % 9 == 0).filter(None))
    out("a", down(node))


def flatten_pluck(h: Stream[Any], down: Lift, out: Callable[[str, Stream[Any]], None]) -> None:
    pairs = h.map(lambda x: [x] * (x % 3)).flatten().map(lambda x: (x, -x, x * 2))
    out("a", down(pairs.pluck(1)))
    out("b", down(pairs.pluck([2, 0])))


def scans(h: Stream[Any], down: Lift, out: Callable[[str, Stream[Any]], None]) -> None:
    out("plain", down(h.scan(add)))
    out("start", down(h.map(inc).accumulate(add, start=10, with_state=True)))
    out("pairs", down(h.accumulate(lambda s, x: (s + x, s * x), start=1, returns_state=True)))
    out("keyed", down(h.map(lambda x: (x % 3, x)).scan(lambda s, x: s + x[1], start=0, key=0)))


def windows(h: Stream[Any], down: Lift, out: Callable[[str, Stream[Any]], None]) -> None:
    out("p", down(h.partition(3)))
    out("pk", down(h.partition(2, key=lambda x: x % 2)))
    out("sw", down(h.sliding_window(2)))
    out("sw3", down(h.sliding_window(3, return_partial=False)))


def branches(h: Stream[Any], down: Lift, out: Callable[[str, Stream[Any]], None]) -> None:
    a = h.map(inc)
    b = h.filter(lambda x: x % 2 == 0)
    out("zip", down(a.zip(b, "lit")))
    out("union", down(a.union(b, h.map(str))))
    out("a", down(a))


def stages(h: Stream[Any], down: Lift, out: Callable[[str, Stream[Any]], None]) -> None:
    node = h.map(inc).map(lambda x: x * 2).scan(add).map(str).partition(2)
    out("a", down(node))


PIPELINES: dict[str, Pipeline] = {
    "chain": chain,
    "flatten_pluck": flatten_pluck,
    "scans": scans,
    "windows": windows,
    "branches": branches,
    "stages": stages,
}


def run(pipeline: Pipeline, data: list[int], lift: Lift | None = None,
        lower: Lift | None = None) -> list[Any]:
    source: Stream[Any] = Stream()
    events: list[Any] = []

    def out(tag: str, node: Stream[Any]) -> None:
        node.sink(lambda x: events.append((tag, x)))

    head = lift(source) if lift else source
    pipeline(head, lower or (lambda n: n), out)
    for x in data:
        source.emit(x)
    source.close()
    return events


@pytest.mark.dask
@pytest.mark.parametrize("name", sorted(PIPELINES))
@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.integers(-20, 50), max_size=30),
       batch_size=st.integers(1, 6), max_in_flight=st.integers(1, 4))
def test_same_results_as_in_process(client: Client, name: str, data: list[int],
                                    batch_size: int, max_in_flight: int) -> None:
    pipeline = PIPELINES[name]
    expected = run(pipeline, data)
    got = run(pipeline, data,
              lift=lambda s: s.to_dask(client).scatter(batch_size=batch_size,
                                                       max_in_flight=max_in_flight),
              lower=lambda n: n.gather())
    assert got == expected
