"""Time on a segment: ``timed_window`` closes where it closes in-process.

The client owns the clock (a virtual one here): windows on the workers
close at ticks that ``scatter()`` puts into the stream, so they hold exactly
what the in-process windows hold, empty ones included.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
from operator import add
from typing import Any

import pandas as pd
import pytest
from distributed import Client, LocalCluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams import Stream, VirtualClock


def inc(x: int) -> int:
    return x + 1


def tumbling(head: Stream[Any], lower: Any) -> list[list[Any]]:
    windows = head.map(inc).timed_window(1.0)
    return [lower(windows.map(lambda w: (len(w), sum(w)))).sink_to_list(),
            lower(head.timed_window(2.5).map(tuple)).sink_to_list()]


def sliding(head: Stream[Any], lower: Any) -> list[list[Any]]:
    # 2.5 s every second: windows also start between two ends.
    return [lower(head.map(inc).timed_window(2.5, slide=1.0)).sink_to_list(),
            lower(head.timed_window(2.0, slide=1.0, key=lambda x: x % 3)).sink_to_list()]


def run_windows(clock: VirtualClock, schedule: list[tuple[float, int]],
                lift: Any, lower: Any, build: Any) -> list[Any]:
    source: Stream[Any] = Stream()
    outputs = build(lift(source), lower)
    for dt, x in schedule:
        clock.advance(dt)
        source.emit(x)
    clock.advance(1.7)
    source.close()
    return outputs  # type: ignore[no-any-return]


@pytest.mark.dask
@pytest.mark.parametrize("build", [tumbling, sliding])
@settings(max_examples=7, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=st.lists(st.tuples(st.sampled_from([0.0, 0.0, 0.4, 1.0, 3.2]),
                                   st.integers(0, 9)), max_size=25),
       batch_size=st.integers(1, 5))
def test_processing_time_windows_same_as_in_process(
        client: Client, clock: VirtualClock, build: Any, schedule: list[tuple[float, int]],
        batch_size: int) -> None:
    expected = run_windows(clock, schedule, lambda s: s, lambda n: n, build)
    got = run_windows(clock, schedule,
                      lambda s: s.scatter(client=client, batch_size=batch_size),
                      lambda n: n.gather(), build)
    assert got == expected


@pytest.mark.dask
def test_event_time_window_and_buffer_on_a_segment(client: Client) -> None:
    def run(lift: Any, lower: Any) -> list[Any]:
        source: Stream[Any] = Stream()
        node = lift(source).buffer(4).timed_window(10, time=lambda x: x, lateness=5)
        node.on_error("route")
        late = node.errors.map(lambda r: r.element).sink_to_list()
        out = lower(node).sink_to_list()
        for t in [1, 12, 3, 16, 14, 40, 2, 38]:
            source.emit(t)
        source.close()
        return [out, late]

    expected = run(lambda s: s, lambda n: n)
    assert run(lambda s: s.scatter(client=client, batch_size=2), lambda n: n.gather()) == expected


def example(out: io.StringIO, source: Stream[Any], dask: bool) -> None:
    """The original design's example; in-process when ``dask`` is False."""
    if dask:
        (source.map(json.loads).timed_window(0.05).filter(len).to_dask().scatter()
         .map(pd.DataFrame).map(pd.DataFrame.sum).scan(add).gather()
         .map(str).sink(out.write))
    else:
        (source.map(json.loads).timed_window(0.05).filter(len)
         .map(pd.DataFrame).map(pd.DataFrame.sum).scan(add)
         .map(str).sink(out.write))


@pytest.mark.dask
def test_the_original_example_runs_as_written(cluster: LocalCluster,
                                              clock: VirtualClock) -> None:
    records = [json.dumps({"price": 1.5 * i, "volume": i % 7, "id": i}) for i in range(60)]
    outputs = []
    with Client(cluster):  # to_dask() with no argument uses the default client
        for dask in (False, True):
            out = io.StringIO()
            source: Stream[Any] = Stream()
            example(out, source, dask)
            for i, line in enumerate(records):
                source.emit(line)
                if i % 9 == 8:
                    clock.advance(0.05)
                if i % 20 == 19:
                    clock.advance(0.12)  # empty windows, dropped by filter(len)
            source.close()
            outputs.append(out.getvalue())
    in_process, on_dask = outputs
    assert on_dask == in_process
    # One running total per non-empty window, the last covering every record.
    assert in_process.count("dtype") > 5
    assert on_dask.rstrip().endswith("id        1770.0\ndtype: float64")


def advance_elsewhere(clock: VirtualClock, dt: float) -> None:
    """Advance ``clock`` on another thread (where a synchronous stream's timers run)."""
    timer = threading.Thread(target=clock.advance, args=(dt,))
    timer.start()
    timer.join()


@pytest.mark.dask
def test_a_tick_goes_in_when_the_thread_inside_the_runner_lets_go(
        client: Client, clock: VirtualClock) -> None:
    # A synchronous stream's timers run on the shared loop thread, while the
    # producer (or distributed's callback thread) may be inside the runner: a
    # tick put among its pending elements then could be cut off with a batch.
    source: Stream[Any] = Stream()
    entry = source.scatter(client=client, batch_size=4)
    out = entry.timed_window(1.0).gather().sink_to_list()
    source.emit(1)
    runner, ticks = entry._runner, entry._ticks
    assert runner is not None and ticks is not None
    with runner.lock:  # as the producer does, inside the runner
        before = list(runner.pending)
        advance_elsewhere(clock, 1.5)
        assert runner.pending == before  # the tick did not cut in
        assert ticks.closing()
    assert not ticks.closing()  # taken as the lock was let go, with no element to wait for
    source.emit(2)
    source.close()
    assert out == [[1], [2]]


@pytest.mark.dask
@pytest.mark.parametrize("batch_size", [None, 4], ids=["plain", "batched"])
def test_a_window_that_closes_while_the_producer_is_quiet_comes_out_then(
        client: Client, clock: VirtualClock, batch_size: int | None) -> None:
    # A plain scatter() (streamz's) delivers each element's results before
    # emit returns; a tick's results came out only with the next element.
    source: Stream[Any] = Stream()
    entry = source.scatter(client=client, batch_size=batch_size)
    out = entry.timed_window(0.5).gather().sink_to_list()
    source.emit(1)
    source.emit(2)
    clock.advance(0.5)
    if batch_size is not None:  # delivered as they finish: on distributed's thread
        entry.flush()
    assert out == [[1, 2]]
    clock.advance(0.5)
    source.close()
    assert out == [[1, 2], []]


@pytest.mark.dask
@pytest.mark.parametrize("then", ["emit", "close"])
def test_a_window_the_timer_closed_that_fails_downstream_is_raised_to_the_producer(
        client: Client, clock: VirtualClock, then: str) -> None:
    # The timer delivers a plain scatter()'s window while the producer is
    # quiet; its failure has no caller there, so the producer's next call
    # raises it (in-process: the close), and nothing is lost silently.
    def total(w: list[int]) -> int:
        if not w:
            raise ZeroDivisionError("an empty window")
        return sum(w)

    source: Stream[Any] = Stream()
    out = source.scatter(client=client).timed_window(0.5).gather().map(total).sink_to_list()
    source.emit(1)
    clock.advance(0.5)
    clock.advance(0.5)  # an empty window: total() fails on the timer's thread
    with pytest.raises(Exception, match="an empty window"):
        if then == "emit":
            source.emit(2)
        else:
            source.close()
    assert out == [1]


@pytest.mark.dask
@pytest.mark.parametrize("first", ["an element", "the time"])
def test_an_asynchronous_stream_ticks_on_its_own_loop_before_later_elements(
        cluster: LocalCluster, clock: VirtualClock, first: str) -> None:
    # Its timers may fire on another thread (a pipeline built where no loop
    # ran arms them on the shared loop thread). A tick that came goes before
    # every element emitted after it, even one emitted before the loop had a
    # turn to run the timer's call; and before the runner started.
    async def main() -> list[Any]:
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as client:
            source: Stream[Any] = Stream(asynchronous=True)
            entry = source.scatter(client=client, batch_size=4)
            out = entry.timed_window(1.0).gather().sink_to_list()
            if first == "an element":
                await source.emit(1)
                await entry.flush()  # nothing in flight: no task drives the runner
            advance_elsewhere(clock, 1.5)  # the loop gets no turn until emit(2) is in
            await source.emit(2)
            await source.aclose()
            return out

    expected = [[1], [2]] if first == "an element" else [[], [2]]
    assert asyncio.run(main()) == expected


@pytest.mark.dask
@pytest.mark.parametrize("fed", ["under the next asyncio.run()", "synchronously, after it"])
def test_a_window_built_under_one_loop_closes_on_its_timer_when_fed_later(
        client: Client, fed: str) -> None:
    # The windows' timer was armed on the loop the graph was built under,
    # which closed with it: the first element arms it again, so the window
    # closes while the producer is quiet, as in-process (the real clock,
    # a 10 ms window: the test waits for the window, not for a time).
    asynchronous = fed.startswith("under")
    came = threading.Event()
    box: dict[str, Any] = {}

    async def build() -> None:
        source: Stream[int] = Stream(asynchronous=asynchronous)
        windows = source.scatter(client=client).timed_window(0.01).gather()
        windows.sink(lambda w: came.set() if w else None)
        box["source"] = source

    async def feed() -> bool:
        await box["source"].emit(1)
        seen = await asyncio.to_thread(came.wait, 30)
        await box["source"].aclose()
        return seen

    asyncio.run(build())  # its timer goes with this loop
    if asynchronous:
        assert asyncio.run(feed())
    else:
        box["source"].emit(1)
        assert came.wait(30)
        box["source"].close()
