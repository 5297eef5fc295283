"""Same results on every backend: one list of pipelines, one ``backend`` fixture.

Every pipeline is run on the backend (in-process fused, on Dask, on Spark)
and compared with the reference, the same pipeline in-process with fusion
off. Hypothesis draws the inputs and the batch size, so batch boundaries
fall everywhere, inside stateful steps too. A pipeline lists the backends
that can run it: a ``to_spark()`` segment is one linear chain with at most one
keyed stage, so branching pipelines run in-process and on Dask only (branches
and unions of Spark-resident segments, ``from_spark()``, are checked against
the in-process run in tests/streams_spark/test_spark_subgraph.py).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams import NodeError, Stream, VirtualClock, use_clock
from streams.fusion import unfused

from .conftest import Backend

Out = Callable[[str, Stream[Any]], None]
ALL = frozenset({"in-process", "dask", "spark"})
LOCAL_AND_DASK = frozenset({"in-process", "dask"})

ints = st.lists(st.integers(-20, 50), max_size=14)
#: Event times that never go back further than the windows' lateness.
times = st.lists(st.integers(0, 40), max_size=14).map(sorted)
#: 3 and 9 first: 0.9 is a gap of 0.6 after 0.3, though 0.3 + 0.6 < 0.9 in floats.
tenths_times = st.lists(st.integers(20, 40), max_size=8).map(lambda xs: [3, 9, *sorted(xs)])


def inc(x: int) -> int:
    return x + 1


def tenth(x: int) -> int:
    return 10 // x  # fails on 0


@dataclass(frozen=True)
class Case:
    """A pipeline: ``build(head, leave, out)`` below the segment's entry ``head``."""

    build: Callable[[Stream[Any], Callable[[Stream[Any]], Stream[Any]], Out], None]
    backends: frozenset[str] = ALL
    inputs: st.SearchStrategy[list[int]] = ints
    #: A run on Spark that needs a Structured Streaming query (keyed state,
    #: event time) costs seconds: fewer examples.
    slow_on_spark: bool = False


def linear(make: Callable[[Stream[Any]], Stream[Any]], **kw: Any) -> Case:
    """A case with one output: the chain ``make`` builds."""
    return Case(lambda h, leave, out: out("out", leave(make(h))), **kw)


def beats(best: int, x: int) -> tuple[int | None, list[int]]:
    """Emit x when it beats the best so far; forget the best after a 0."""
    if x == 0:
        return None, [0]
    return (x, [x]) if x > best else (best, [])


def _branches(h: Stream[Any], leave: Callable[[Stream[Any]], Stream[Any]], out: Out) -> None:
    a = h.map(inc)
    b = h.filter(lambda x: x % 2 == 0)
    out("zip", leave(a.zip(b, "literal")))
    out("union", leave(a.union(b, h.map(str))))
    out("a", leave(a))


def _errors(policy: str) -> Case:
    def build(h: Stream[Any], leave: Callable[[Stream[Any]], Stream[Any]], out: Out) -> None:
        node = h.map(tenth).on_error(policy)  # type: ignore[arg-type]
        out("out", leave(node.map(inc)))
        if policy == "route":
            out("error", node.errors.map(lambda r: (r.element, type(r.exception).__name__)))
    return Case(build)


def _interval_join(h: Stream[Any], leave: Callable[[Stream[Any]], Stream[Any]],
                   out: Out) -> None:
    # Even elements join odd ones with the same remainder mod 3 at most 4 apart;
    # inputs in any order, so some are late (routed, in order with the pairs).
    joined = h.filter(lambda x: x % 2 == 0).join(
        h.filter(lambda x: x % 2 == 1), key=lambda x: x % 3, within=4, time=lambda x: x,
        lateness=3).on_error("route")
    out("pair", leave(joined))
    out("late", joined.errors.map(lambda r: r.element))


def _with_late(make: Callable[[Stream[Any]], Stream[Any]],
               backends: frozenset[str] = ALL) -> Case:
    """A case whose node's late elements (``node.late``) are a second output."""
    def build(h: Stream[Any], leave: Callable[[Stream[Any]], Stream[Any]], out: Out) -> None:
        node = make(h)
        out("out", leave(node))
        out("late", node.late)
    return Case(build, backends=backends)


def _on_a_still_clock(make: Callable[[Stream[Any]], Stream[Any]]) -> Case:
    """A processing-time window on a clock that never moves: close() flushes it all."""
    def build(h: Stream[Any], leave: Callable[[Stream[Any]], Stream[Any]], out: Out) -> None:
        with use_clock(VirtualClock()):
            node = make(h)
        out("out", leave(node))
    return Case(build)


def _ttl_count(n: int, kx: tuple[int, int]) -> tuple[int, list[Any]]:
    return n + 1, [(kx[0], n + 1)] if kx[1] % 4 == 0 else []


CASES: dict[str, Case] = {
    "chain": linear(lambda h: h.map(inc).filter(lambda x: x % 2).map(lambda x: (x, 3))
                    .starmap(operator.mul).remove(lambda x: x % 9 == 0).filter(None)),
    "flatten_pluck": linear(lambda h: h.map(lambda x: [x] * (x % 3)).flatten()
                            .map(lambda x: (x, -x, x * 2)).pluck([2, 0])
                            .starmap(operator.sub)),
    "pluck": linear(lambda h: h.map(lambda x: {"v": x, "w": -x}).pluck("w")),
    "scan": linear(lambda h: h.scan(operator.add)),
    "scan_start_with_state": linear(lambda h: h.map(inc).accumulate(
        operator.add, start=10, with_state=True)),
    "scan_returns_state": linear(lambda h: h.accumulate(
        lambda s, x: (s + x, s * x), start=1, returns_state=True)),
    "keyed_scan": linear(lambda h: h.map(lambda x: (x % 3, x))
                         .scan(lambda s, x: s + x[1], start=0, key=0)
                         .starmap(lambda k, total: 10 * total + k), slow_on_spark=True),
    "partition": linear(lambda h: h.partition(3)),
    "partition_key": linear(lambda h: h.partition(2, key=lambda x: x % 2)),
    "partition_unique": linear(lambda h: h.partition_unique(3, key=lambda x: x % 4)),
    "sliding_window": linear(lambda h: h.sliding_window(2)),
    "sliding_window_full": linear(lambda h: h.sliding_window(3, return_partial=False)),
    "unique": linear(lambda h: h.unique(maxsize=4)),
    "unique_unhashable": linear(lambda h: h.map(lambda x: [x % 5])
                                .unique(hashable=False).map(tuple)),
    "frequencies": linear(lambda h: h.map(lambda x: x % 4).frequencies()
                          .map(lambda d: sorted(d.items()))),
    "slice": linear(lambda h: h.slice(1, 10, 2)),
    "stateful_map": linear(lambda h: h.stateful_map(beats, start=-100)),
    "stateful_map_keyed": linear(lambda h: h.map(lambda x: (x % 3, x)).stateful_map(
        lambda best, kx: ((kx[1], [kx]) if kx[1] > best else (best, [])), start=-100, key=0),
        slow_on_spark=True),
    "buffer": linear(lambda h: h.buffer(3).map(inc)),
    "event_time_window": linear(lambda h: h.timed_window(10, time=lambda x: x, lateness=5),
                                inputs=times, slow_on_spark=True),
    "sliding_event_time": _with_late(lambda h: h.timed_window(6, slide=2, time=lambda x: x,
                                                              lateness=5)),
    "sliding_keyed": _with_late(lambda h: h.map(lambda x: (x % 3, x)).timed_window(
        6, slide=3, time=1, lateness=8, key=0)),
    # With node.late sunk, a window runs as its node on Spark (element by
    # element); without, as Spark's window()/session_window() under its
    # watermark, which moves between micro-batches: in-order times there.
    "tumbling_late_stream": _with_late(lambda h: h.timed_window(10, time=lambda x: x,
                                                                lateness=4)),
    "sliding_spark_window": linear(lambda h: h.timed_window(6, slide=2, time=lambda x: x),
                                   inputs=times, slow_on_spark=True),
    "sliding_keyed_spark_window": linear(lambda h: h.map(lambda x: (x % 3, x)).timed_window(
        6, slide=3, time=1, key=0).map(lambda kw: (kw[0], len(kw[1]))), inputs=times,
        slow_on_spark=True),
    "session_spark_window": linear(lambda h: h.session_window(2, time=lambda x: x),
                                   inputs=times, slow_on_spark=True),
    "session_keyed_spark_window": linear(lambda h: h.map(lambda x: (x % 2, x)).session_window(
        3, time=1, key=0), inputs=times, slow_on_spark=True),
    # Windows with their bounds, in seconds to the microsecond on every engine
    # (times in thirds of a second have none of their own).
    "bounds_sliding_spark_window": linear(lambda h: h.timed_window(
        1.5, slide=0.5, time=lambda x: x / 4, bounds=True), inputs=times, slow_on_spark=True),
    "bounds_session_keyed_spark_window": linear(lambda h: h.map(lambda x: (x % 2, x / 3))
                                                .session_window(1, time=1, key=0, bounds=True)
                                                .map(lambda kw: (kw[0], kw[1].start, kw[1].end,
                                                                 len(kw[1].elements))),
                                                inputs=times, slow_on_spark=True),
    # Tenths of a second: 6 * 0.1 is 0.6000000000000001, yet 0.6 is in [0.6, 0.9)
    # and not in [0.3, 0.6) on every engine, as Spark's window() cuts it.
    "tenths_sliding_spark_window": linear(lambda h: h.timed_window(
        0.3, slide=0.1, time=lambda x: x / 10), inputs=times, slow_on_spark=True),
    # 0.9 is a gap of 0.6 after 0.3, though 0.3 + 0.6 is 0.8999999999999999:
    # one session on every engine, as Spark's session_window() cuts it.
    "tenths_session": linear(
        lambda h: h.session_window(0.6, time=lambda x: x / 10), slow_on_spark=True,
        inputs=tenths_times),
    "tenths_session_keyed": linear(
        lambda h: h.map(lambda x: (x % 2, x / 10)).session_window(
            0.6, time=1, lateness=0.5, key=0), slow_on_spark=True, inputs=tenths_times),
    "bounds_session_keyed": _with_late(lambda h: h.map(lambda x: (x % 2, x / 3)).session_window(
        1, time=1, lateness=3, key=0, bounds=True)),
    "bounds_sliding_keyed": _with_late(lambda h: h.map(lambda x: (x % 3, x / 4)).timed_window(
        1.5, slide=0.75, time=1, lateness=2, key=0, bounds=True)),
    # Ticks on a moving clock: tests/streams_dask/test_time.py and
    # tests/streams_spark/test_spark_timed_window.py.
    "clock_sliding_window": _on_a_still_clock(lambda h: h.timed_window(6, slide=2)),
    "clock_keyed_window": _on_a_still_clock(lambda h: h.map(lambda x: (x % 3, x))
                                            .timed_window(5, slide=2, key=0)),
    "session": _with_late(lambda h: h.session_window(3, time=lambda x: x, lateness=5)),
    "session_keyed": _with_late(lambda h: h.map(lambda x: (x % 2, x)).session_window(
        4, time=1, lateness=10, key=0)),
    "scan_ttl": linear(lambda h: h.map(lambda x: (x % 3, x)).scan(
        lambda s, x: s + x[1], start=0, key=0, ttl=10, time=1)),
    "stateful_map_ttl": linear(lambda h: h.map(lambda x: (x % 3, x)).stateful_map(
        _ttl_count, start=0, key=0, ttl=8, time=1, on_expire=lambda k, n: [("gone", k, n)])),
    # A NaN key (a missing value) is one key on every engine, each element's
    # NaN a new object (repr: a NaN equals no NaN, the outputs' lists neither).
    "nan_keys_scan": linear(lambda h: h.map(lambda x: (float("nan") if x % 3 == 0 else x % 3, x))
                            .scan(lambda s, x: s + x[1], start=0, key=0), slow_on_spark=True),
    "nan_keys_session": linear(lambda h: h.map(lambda x: (float("nan") if x % 2 else 0.5, x))
                               .session_window(3, time=1, key=0).map(repr), inputs=times,
                               slow_on_spark=True),
    "stages": linear(lambda h: h.map(inc).map(lambda x: x * 2).scan(operator.add)
                     .map(str).partition(2)),
    "branches": Case(_branches, backends=LOCAL_AND_DASK),
    "interval_join": Case(_interval_join, backends=LOCAL_AND_DASK),
    "errors_skip": _errors("skip"),
    "errors_route": _errors("route"),
}


def run(case: Case, xs: list[int], backend: Backend | None, size: int) -> list[Any]:
    """What reaches the outputs, in order; a raised error is recorded in its place."""
    source: Stream[Any] = Stream()
    events: list[Any] = []

    def out(tag: str, node: Stream[Any]) -> None:
        node.sink(lambda x: events.append((tag, x)))

    head = backend.enter(source, size) if backend else source
    case.build(head, backend.leave if backend else (lambda n: n), out)
    for x in xs:
        source.emit(x)
    source.close()
    return events


def reference(case: Case, xs: list[int]) -> list[Any]:
    with unfused():
        return run(case, xs, None, 1)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(CASES))
def test_same_results_as_the_reference(backend: Backend, name: str) -> None:
    case = CASES[name]
    if backend.name not in case.backends:
        pytest.skip(f"{name}: refused on a {backend.name} segment (see the case)")
    examples = {"in-process": 40, "dask": 6, "spark": 1 if case.slow_on_spark else 2}

    @settings(max_examples=examples[backend.name], deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(xs=case.inputs, size=st.integers(1, 6) if backend.name != "spark"
           else st.integers(3, 8))
    def check(xs: list[int], size: int) -> None:
        assert run(case, xs, backend, size) == reference(case, xs)

    check()


def _run_raising(backend: Backend, xs: list[int], size: int) -> tuple[list[Any], list[Any]]:
    """Outputs, and the errors raised (element, notes of others), emitting on after each."""
    source: Stream[Any] = Stream()
    outputs: list[Any] = []
    raised: list[Any] = []
    backend.leave(backend.enter(source, size).map(tenth).map(inc)).sink(outputs.append)
    for x in [*xs, None]:
        try:
            source.emit(x) if x is not None else source.close()
        except NodeError as e:
            assert isinstance(e.__cause__, ZeroDivisionError)
            others = [n for n in getattr(e, "__notes__", ()) if "more error(s)" in n]
            raised.append((e.element, len(others)))
    return outputs, raised


@pytest.mark.timeout(900)
def test_raise_delivers_every_other_result_and_raises_for_each_failure(
        backend: Backend) -> None:
    xs = [5, 0, 2, 1, 0, 10, 3]
    expected = [3, 6, 11, 2, 4]
    outputs, raised = _run_raising(backend, xs, 3)  # the failures in two batches
    assert outputs == expected
    assert raised == [(0, 0), (0, 0)]
    if backend.name == "in-process":
        return
    # Both in the last batch: close() delivers everything, raises the first
    # and notes the other.
    outputs, raised = _run_raising(backend, xs, 8)
    assert outputs == expected
    assert raised == [(0, 1)]
