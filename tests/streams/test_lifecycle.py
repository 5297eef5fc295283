"""Lifecycle edge cases: closing, destroying and changing a graph that runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import NodeError, Stream, StreamClosedError, VirtualClock, use_clock
from streams.fusion import compiled


def test_compiled_code_stops_at_a_closed_node() -> None:
    source = Stream()
    m = source.map(lambda x: x + 1)
    out = m.sink_to_list()
    source.emit(0)  # compiles
    m.close()
    with pytest.raises(StreamClosedError, match=r"map\(<lambda>\) is closed"):
        source.emit(1)
    assert out == [1]


def test_close_ends_every_branch_even_when_one_fails() -> None:
    source = Stream()
    source.collect().map(lambda t: 1 / 0)
    held = source.partition(2).sink_to_list()
    for i in range(3):
        source.emit(i)
    with pytest.raises(NodeError, match="ZeroDivisionError"):
        source.close()
    assert held == [(0, 1), (2,)]


@pytest.mark.parametrize(("make", "elements_of", "bad", "sent"), [
    (lambda s: s.timed_window(10, time=lambda x: x, lateness=100), list, {1}, [[15], [25]]),
    (lambda s: s.timed_window(10, time=lambda x: x, lateness=100, key=lambda x: "k"),
     lambda w: w[1], {1}, [[15], [25]]),
    (lambda s: s.timed_window(20, slide=10, time=lambda x: x, lateness=100), list, {1},
     [[15, 25], [25]]),  # [0, 20) holds 1 and 15
    (lambda s: s.session_window(3, time=lambda x: x, lateness=100), list, {1}, [[15], [25]]),
    # Processing time, windows of 100 every 50: 1 came at 0, 15 and 25 at 60.
    (lambda s: s.timed_window(100, slide=50), list, {1, 15}, [[15, 25]]),
    (lambda s: s.partition(5, key=lambda x: x % 10), list, {1}, [[15, 25]]),
], ids=["tumbling", "keyed", "sliding", "session", "clock", "partition"])
def test_a_downstream_failure_at_close_sends_the_other_windows_then_raises(
        make: Any, elements_of: Any, bad: set[int], sent: list[list[int]],
        clock: VirtualClock) -> None:
    def check(window: Any) -> Any:
        if bad <= set(elements_of(window)):
            raise RuntimeError("no such window")
        return window

    source = Stream()
    out = make(source).map(check).sink_to_list()
    source.emit(1)
    clock.advance(60)
    source.emit(15)
    source.emit(25)
    before = len(out)
    with pytest.raises(NodeError, match="no such window"):
        source.close()  # no later closing: what the failure leaves goes now
    assert [list(elements_of(w)) for w in out[before:]] == sent


def test_close_reaches_the_error_stream() -> None:
    source = Stream()
    node = source.map(int).on_error("route")
    bad = node.errors.map(lambda r: r.element).partition(2).sink_to_list()
    for v in ["1", "x", "y", "z"]:
        source.emit(v)
    source.close()
    assert bad == [("x", "y"), ("z",)]


def test_removing_the_last_open_upstream_closes_the_node() -> None:
    a, b = Stream(), Stream()
    out = a.union(b).partition(5).sink_to_list()
    a.emit(1)
    a.close()
    b.destroy()
    assert out == [(1,)]


def test_destroy_from_given_upstreams_only() -> None:
    a, b = Stream(), Stream()
    u = a.union(b)
    out = u.sink_to_list()
    u.destroy([a])
    a.emit(1)
    b.emit(2)
    assert out == [2]


def test_streamz_style_update_returning_a_list() -> None:
    class Twice(Stream):
        def update(self, x, who=None, metadata=None):
            return [self._emit(x), self._emit(x)]

    source = Stream()
    out = Twice(source).sink_to_list()
    assert source.emit(1) is None
    assert out == [1, 1]


def test_overridden_emit_sees_every_element() -> None:
    class Tagged(Stream):
        def _emit(self, x, metadata=None):
            return super()._emit(("tag", x))

    source = Tagged()
    out = source.map(lambda t: t[1]).sink_to_list()
    tags = source.sink_to_list()
    source.emit(1)
    assert tags == [("tag", 1)] and out == [1]


def test_a_subclass_overriding_emit_sees_the_elements_from_upstream() -> None:
    # As streamz: its default update emits through _emit.
    seen = []

    class Tap(Stream):
        def _emit(self, x, metadata=None):
            seen.append(x)
            return super()._emit(x, metadata)

    source = Stream()
    out = Tap(source).sink_to_list()
    source.emit(1)
    source.emit(2)
    assert seen == [1, 2] and out == [1, 2]
    assert Tap._local_only is None  # no update of its author's: engines may run it


@pytest.mark.parametrize("predicate", [None, lambda x: x])
def test_a_truth_test_that_raises_follows_the_policy(predicate) -> None:
    class Ambiguous:
        def __bool__(self) -> bool:
            raise ValueError("truth value is ambiguous")

    source = Stream()
    out = source.filter(predicate).on_error("route")
    errors = out.errors.sink_to_list()
    out.sink_to_list()
    source.emit(Ambiguous())
    assert len(errors) == 1 and isinstance(errors[0].exception, ValueError)


def test_flatten_of_a_failing_generator_follows_the_policy() -> None:
    def gen():
        yield 1
        raise KeyError("boom")

    source = Stream()
    node = source.flatten().on_error("skip")
    out = node.sink_to_list()
    source.emit(gen())
    assert out == [1]


def test_building_a_graph_compiles_nothing() -> None:
    # Invalidation costs nothing while no code is compiled: building large
    # graphs stays linear (it walked the whole graph per node before).
    compiled.clear()
    source = Stream()
    for _ in range(2000):
        source.map(str)
    assert len(compiled) == 0
    source.emit(1)
    assert len(compiled) == 1


def test_a_graph_change_recompiles_only_upstream_code() -> None:
    source = Stream()
    left = source.map(str)
    right = source.map(repr)
    left.sink_to_list()
    right.emit(1)
    source.emit(1)
    assert right in compiled and source in compiled
    left.map(len)  # changes left: source's code inlines it; right's does not
    assert source not in compiled and right in compiled


def test_from_iterable_failure_keeps_offset_and_can_resume() -> None:
    src = Stream.from_iterable(range(6))
    out = src.map(lambda x: 10 // (x - 3)).on_error("raise").sink_to_list()
    with pytest.raises(NodeError):
        src.start()
    # 0, 1, 2 went through; 3 failed, so a resumed run starts with it again.
    assert src.offset == 3 and out == [-4, -5, -10]
    assert src.stopped


def test_start_true_without_a_loop_is_refused() -> None:
    with pytest.raises(ValueError, match="start=True needs a running event loop"):
        Stream.from_iterable([1, 2], start=True)


def test_pluck_of_an_empty_list_gives_empty_tuples() -> None:
    source = Stream()
    out = source.pluck([]).sink_to_list()
    source.emit((1, 2))
    assert out == [()]


@pytest.mark.parametrize("items", [list(range(10)), range(10)], ids=["list", "range"])
def test_from_iterable_started_again_resumes_at_its_offset(items: Any) -> None:
    # It began the list again from 0 while offset went on counting: a
    # checkpoint then recorded items never emitted.
    src = Stream.from_iterable(items)
    out = src.sink_to_list()
    src.sink(lambda x: src.stop() if x == 4 else None)
    src.start()
    assert src.offset == 5 and out == [0, 1, 2, 3, 4]
    src.start()
    assert src.offset == 10 and out == list(range(10))


def test_from_iterable_over_an_iterator_goes_on_where_it_stands() -> None:
    src = Stream.from_iterable(iter(range(10)))
    out = src.sink_to_list()
    src.sink(lambda x: src.stop() if x == 4 else None)
    src.start()
    src.start()
    assert out == list(range(10)) and src.offset == 10


def test_a_source_started_again_while_its_stopped_run_ends_runs_once() -> None:
    # Two runs produced at once: the stopped one went on when start() set
    # stopped back to False, and every item came twice.
    async def main() -> tuple[list[int], bool]:
        gate = asyncio.Event()
        out: list[int] = []

        async def slow(x: int) -> None:
            await gate.wait()
            out.append(x)

        source = Stream.from_iterable(range(5), asynchronous=True)
        source.sink(slow)
        first = source.start()
        for _ in range(3):  # the run is in the sink with 0
            await asyncio.sleep(0)
        source.stop()
        second = source.start()
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, second), 60)
        return out, first.done()

    out, ended = asyncio.run(main())
    assert out == [0, 1, 2, 3, 4] and ended


def test_a_periodic_source_started_again_at_once_ticks_once_a_period() -> None:
    import itertools

    clock = VirtualClock()
    counter = itertools.count()
    with use_clock(clock):
        source = Stream.from_periodic(lambda: next(counter), poll_interval=1.0)
    out = source.sink_to_list()

    async def main() -> bool:
        first = source.start()
        await clock.advance_async(2.5)  # ticks at 0, 1, 2
        source.stop()
        second = source.start()  # the first run is in its sleep until 3
        await clock.advance_async(3.0)
        old_ended = first.done()
        source.stop()
        await clock.advance_async(2.0)
        await second
        return old_ended

    assert asyncio.run(main())
    assert out == [0, 1, 2, 3, 4, 5]
