"""join() in a Dask segment gives the in-process result; lookup() is refused there.

Both sides of the join branch from one ``scatter()``: the segment's ordered
stage runs the core's join over each batch in order, its state carried from
batch to batch, so batch boundaries may fall anywhere.
"""

from __future__ import annotations

from typing import Any

import pytest
from distributed import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams_dask  # noqa: F401 - registers scatter()
from streams import Stream

# An element: (side, key, event time).
events = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 30)),
                  max_size=30)


def is_left(x: tuple[int, int, int]) -> bool:
    return x[0] == 0


def is_right(x: tuple[int, int, int]) -> bool:
    return x[0] == 1


def late_of(record: Any) -> tuple[str, Any]:
    return ("late", record.element)


def build(head: Stream[Any], leave: Any, out: list[Any]) -> None:
    joined = head.filter(is_left).join(head.filter(is_right), key=1, within=3, time=2,
                                       lateness=2).on_error("route")
    leave(joined).sink(out.append)
    joined.errors.map(late_of).sink(out.append)  # applied here, where results arrive


def run(xs: list[Any], lift: Any, leave: Any) -> list[Any]:
    source: Stream[Any] = Stream()
    out: list[Any] = []
    build(lift(source), leave, out)
    for x in xs:
        source.emit(x)
    source.close()
    return out


@pytest.mark.dask
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(xs=events, batch_size=st.integers(1, 7))
def test_join_on_dask_equals_in_process(client: Client, xs: list[Any], batch_size: int) -> None:
    expected = run(xs, lambda s: s, lambda n: n)
    got = run(xs, lambda s: s.scatter(client=client, batch_size=batch_size),
              lambda n: n.gather())
    assert sorted(map(repr, got)) == sorted(map(repr, expected))
    # Pairs come back in the in-process order (late records travel apart).
    assert [x for x in got if x[0] != "late"] == [x for x in expected if x[0] != "late"]


@pytest.mark.dask
def test_join_on_dask_pairs_across_batches_and_reports_late_elements(client: Client) -> None:
    xs = [(0, 1, 10), (1, 2, 11), (1, 1, 12), (0, 2, 20), (1, 2, 19), (0, 1, 9), (1, 1, 21)]
    got = run(xs, lambda s: s.scatter(client=client, batch_size=2), lambda n: n.gather())
    assert got == run(xs, lambda s: s, lambda n: n) == [
        ((0, 1, 10), (1, 1, 12)),
        ((0, 2, 20), (1, 2, 19)),
        ("late", (0, 1, 9)),   # below the watermark, 19 - 2: its partners may be gone
    ]
