"""Sliding and keyed windows on processing time: ``timed_window(size, slide=, key=)``.

Time is a :class:`~streams.VirtualClock`; a schedule is a list of
``(seconds to advance, element)``. The reference computes the windows by
brute force: window ``i`` is ``[i * slide, i * slide + size)`` from the
node's creation, for every ``i`` whose window ends after it.
"""

from __future__ import annotations

import asyncio
import math
import pickle
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import Stream, VirtualClock, use_clock
from streams.metadata import RefCounter
from streams.operators.clock_windows import ClockSlidingWindow
from streams.operators.timed import TimedWindow
from streams.spec import build
from streams.stage import Stage, StageOp, StagePlan, Tick
from streams.window_clock import WindowClock

Schedule = list[tuple[float, Any]]

#: As the windows: a boundary within this many seconds counts as reached.
EPS = 1e-9

#: Steps of half a second and whole ones: float sums stay exact.
steps = st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.5, 3.0, 7.0])
schedules = st.lists(st.tuples(steps, st.sampled_from("abc")), max_size=25).map(
    lambda xs: [(dt, (k, i)) for i, (dt, k) in enumerate(xs)])
shapes = st.integers(1, 6).flatmap(
    lambda size: st.tuples(st.just(size), st.integers(1, size).map(lambda n: size / n)
                           | st.sampled_from([0.5 * size, 0.4 * size, 1.0, 0.75])))


class NoTimers(VirtualClock):
    """Virtual time with nothing to run timers (a producer that never yields)."""

    def call_later(self, delay: float, callback: Any, *args: Any) -> Any:
        raise RuntimeError("no event loop to run timers")


def run(make: Any, schedule: Schedule, end: float = 0.0, timers: bool = True) -> list[Any]:
    """Emit ``schedule`` into ``make(source)``, advance ``end`` more, close."""
    with use_clock(VirtualClock() if timers else NoTimers()) as clock:
        source = Stream()
        out = make(source).sink_to_list()
    for dt, x in schedule:
        clock.advance(dt)
        source.emit(x)
    clock.advance(end)
    source.close()
    return list(out)


def reference(schedule: Schedule, size: float, slide: float, end: float, timers: bool = True,
              keyed: bool = False) -> list[Any]:
    """The windows, by brute force over window indices."""
    arrivals, now = [], 0.0
    for dt, x in schedule:
        now += dt
        arrivals.append((now, x))
    # Timers emit every window ending by the last moment; without them, the
    # arrivals do, up to the last one.
    horizon = now + end if timers else now
    last = now + end

    def window(i: int) -> list[Any]:
        return [x for t, x in arrivals if i * slide - EPS <= t < i * slide + size - EPS]

    def emitted(xs: list[Any]) -> list[Any]:
        if not keyed:
            return [xs]
        by_key: dict[str, list[Any]] = {}
        for x in xs:
            by_key.setdefault(x[0], []).append(x)
        return list(by_key.items())

    out: list[Any] = []
    i = math.floor(-size / slide) + 1  # the first window that ends after the start
    while i * slide + size <= horizon + EPS:
        out += emitted(window(i))
        i += 1
    while i * slide <= last + EPS:  # close(): the open windows that hold something
        if window(i):
            out += emitted(window(i))
        i += 1
    return out


def windows_of(t: float, size: float, slide: float) -> int:
    """How many windows ``[i*slide, i*slide + size)`` contain ``t``."""
    lo = math.floor(t / slide) - math.ceil(size / slide) - 2
    return sum(i * slide - EPS <= t < i * slide + size - EPS
               for i in range(lo, math.floor(t / slide) + 2))


# -- what the windows hold -------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(schedule=schedules, shape=shapes, end=steps, timers=st.booleans(), keyed=st.booleans())
def test_windows_hold_what_the_reference_says(schedule: Schedule, shape: tuple[int, float],
                                              end: float, timers: bool, keyed: bool) -> None:
    size, slide = shape
    key = 0 if keyed else None
    got = run(lambda s: s.timed_window(size, slide=slide, key=key), schedule, end, timers)
    assert got == reference(schedule, size, slide, end, timers, keyed)


@settings(max_examples=100, deadline=None)
@given(schedule=schedules, shape=shapes, end=steps)
def test_every_element_is_in_exactly_the_windows_open_when_it_arrived(
        schedule: Schedule, shape: tuple[int, float], end: float) -> None:
    size, slide = shape
    out = run(lambda s: s.timed_window(size, slide=slide), schedule, end)
    now, arrived = 0.0, {}
    for dt, x in schedule:
        now += dt
        arrived[x] = now
    counts = {x: sum(w.count(x) for w in out) for x in arrived}
    # Nothing is lost at close: every element is in all of its windows.
    assert counts == {x: windows_of(t, size, slide) for x, t in arrived.items()}
    # Windows come in time order: a window's elements arrived no earlier
    # than the previous window's first one.
    firsts = [arrived[w[0]] for w in out if w]
    assert firsts == sorted(firsts)


@settings(max_examples=100, deadline=None)
@given(schedule=schedules, size=st.sampled_from([0.5, 1.0, 2.5]), end=steps,
       timers=st.booleans())
def test_a_slide_equal_to_the_size_is_the_tumbling_window(schedule: Schedule, size: float,
                                                          end: float, timers: bool) -> None:
    tumbling = run(lambda s: s.timed_window(size), schedule, end, timers)
    assert run(lambda s: s.timed_window(size, slide=size), schedule, end, timers) == tumbling


def test_empty_windows_are_emitted_without_a_key_and_skipped_with_one() -> None:
    schedule: Schedule = [(0.0, ("a", 0)), (5.0, ("b", 1))]
    plain = run(lambda s: s.timed_window(2, slide=1), schedule)
    # [-1, 1), [0, 2), three empty ones, then [4, 6) and [5, 7) at close
    assert plain == [[("a", 0)], [("a", 0)], [], [], [], [("b", 1)], [("b", 1)]]
    keyed = run(lambda s: s.timed_window(2, slide=1, key=0), schedule)
    assert keyed == [("a", [("a", 0)])] * 2 + [("b", [("b", 1)])] * 2


def test_a_slide_that_does_not_divide_the_size() -> None:
    # Windows of 5 every 2: [-4, 1), [-2, 3), [0, 5), [2, 7), [4, 9)...
    schedule: Schedule = [(0.5, 0.5), (1.0, 1.5), (2.0, 3.5), (1.0, 4.5)]
    out = run(lambda s: s.timed_window(5, slide=2), schedule, end=5.0)
    assert out == [[0.5], [0.5, 1.5], [0.5, 1.5, 3.5, 4.5], [3.5, 4.5], [4.5]]


def test_float_sizes_count_each_element_in_size_over_slide_windows() -> None:
    # 0.3 / 0.1 is 2.9999999999999996: still three windows per element.
    schedule: Schedule = [(0.05, i) if i == 0 else (0.1, i) for i in range(20)]
    out = run(lambda s: s.timed_window(0.3, slide=0.1), schedule, end=1.0)
    assert all(sum(w.count(i) for w in out) == 3 for i in range(20))


def test_a_window_closes_on_arrival_when_no_timer_runs() -> None:
    with use_clock(NoTimers()) as clock:
        source = Stream()
        out = source.timed_window(2, slide=1).sink_to_list()
    source.emit(1)
    clock.advance(3.0)
    assert out == []
    source.emit(2)  # [-1, 1), [0, 2) and [1, 3) have ended
    assert out == [[1], [1], []]


def test_a_keyed_window_takes_no_tick_for_empty_windows_after_the_clock_jumps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A day without elements (a machine asleep, a timer that could not run) costs a keyed
    1 ms window no tick once what it held is out: it emits no empty window."""
    ticks = []
    original = ClockSlidingWindow._tick
    monkeypatch.setattr(ClockSlidingWindow, "_tick", lambda self, emit: ticks.append(
        self._step) or original(self, emit))
    with use_clock(NoTimers()) as clock:
        source = Stream()
        out = source.timed_window(0.002, slide=0.001, key=0).sink_to_list()
    source.emit(("a", 1))
    clock.advance(86_400.0)
    source.emit(("a", 2))
    clock.advance(0.0025)
    source.close()
    assert out == [("a", [("a", 1)]), ("a", [("a", 1)]), ("a", [("a", 2)]),
                   ("a", [("a", 2)])]
    assert len(ticks) < 10


def test_tick_moves_the_windows_as_the_clock_would() -> None:
    with use_clock(VirtualClock()):
        source = Stream()
        node = source.timed_window(5, slide=2)
        out = node.sink_to_list()
    source.emit(1)
    node.tick()  # at 1: [-4, 1) ends
    node.tick()  # at 2: [2, 7) starts
    source.emit(2)
    node.tick()  # at 3: [-2, 3) ends
    assert out == [[1], [1, 2]]


def test_windows_from_the_timer_reach_a_coroutine_sink_in_order() -> None:
    out: list[Any] = []

    async def main() -> None:
        clock = VirtualClock()
        with use_clock(clock):
            source = Stream(asynchronous=True)

            async def slow(w: list[int]) -> None:
                await clock.sleep(0.5)
                out.append(w)

            source.timed_window(2, slide=1).sink(slow)
        await source.emit(1)
        await clock.advance_async(1.0)  # [-1, 1) emitted; the sink is busy until 1.5
        waiting = asyncio.ensure_future(source.emit(2))
        await asyncio.sleep(0)
        assert not waiting.done()  # backpressure: the producer waits for the sink
        await clock.advance_async(0.5)
        await waiting
        await clock.advance_async(0.5)  # [0, 2) emitted
        closing = asyncio.ensure_future(source.aclose())
        await asyncio.sleep(0)
        assert not closing.done()  # close waits for the work in flight
        for _ in range(4):
            await clock.advance_async(0.5)
        await closing

    asyncio.run(main())
    assert out == [[1], [1, 2], [2]]  # [1, 3) flushed at close


# -- arguments, description, errors ------------------------------------------------------


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda s: s.timed_window(2, slide=3), ValueError, r"timed_window\(\): slide=3 is longer"),
    (lambda s: s.timed_window(2, slide=0), ValueError, r"timed_window\(\): slide must be > 0"),
    (lambda s: s.timed_window(2, slide="x"), ValueError, r"cannot read slide 'x'"),
    # A duration read from a string is checked as a number is: zero would
    # divide by zero at the first element, infinity would never tick.
    (lambda s: s.timed_window(2, slide="0s"), ValueError, r"slide must be > 0 seconds, got '0s'"),
    (lambda s: s.timed_window("0ms"), ValueError, r"interval must be > 0 seconds, got '0ms'"),
    (lambda s: s.timed_window("1e999s"), ValueError, r"interval must be > 0 seconds"),
    (lambda s: s.timed_window("2s", slide="3s"), ValueError,
     r"slide='3s' is longer than the window \(2 s\)"),
    (lambda s: s.rate_limit("0ms"), ValueError, r"rate_limit\(\): interval must be > 0"),
    (lambda s: s.delay("0s"), ValueError, r"delay\(\): interval must be > 0"),
    (lambda s: s.timed_window(2, slide=1, lateness=1), ValueError,
     r"timed_window\(\): lateness= needs time="),
    (lambda s: s.timed_window(2, key=0, lateness=1), ValueError, r"lateness= needs time="),
])
def test_bad_arguments_fail_when_the_graph_is_built(make: Any, error: type[Exception],
                                                    message: str) -> None:
    with pytest.raises(error, match=message):
        make(Stream())


@pytest.mark.parametrize("make", [
    lambda s: s.timed_window("2s", slide="500ms"),
    lambda s: s.timed_window(3, key=lambda x: x % 2),
    lambda s: s.timed_window(5, slide=2, key=0, stream_name="w"),
])
def test_the_description_builds_the_node_back(make: Any) -> None:
    node = make(Stream())
    spec = node.describe()
    assert type(node) is ClockSlidingWindow and spec.operator == "timed_window"
    assert spec.traits.ticked and spec.traits.stateful and spec.traits.key is None
    assert spec.traits.event_time is None
    rebuilt = build(spec, [Stream()])
    assert type(rebuilt) is ClockSlidingWindow
    assert rebuilt.describe().params == spec.params
    assert isinstance(Stream().timed_window(2), TimedWindow)  # tumbling stays as it was


def test_an_unhashable_or_failing_key_is_this_nodes_error() -> None:
    with use_clock(VirtualClock()) as clock:
        source = Stream()
        node = source.timed_window(2, key=0).on_error("route")
        errors = node.errors.sink_to_list()
        out = node.sink_to_list()
    source.emit(([1], 2))
    source.emit(5)
    source.emit(("a", 1))
    clock.advance(2)
    assert [type(r.exception) for r in errors] == [TypeError, TypeError]
    assert out == [("a", [("a", 1)])]


# -- state -------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(schedule=schedules, shape=shapes, end=steps,
       kind=st.sampled_from(["sliding", "keyed", "tumbling"]), data=st.data())
def test_a_snapshot_restored_into_a_new_node_goes_on_the_same(
        schedule: Schedule, shape: tuple[int, float], end: float, kind: str,
        data: st.DataObject) -> None:
    """Sliding, keyed and tumbling windows (TimedWindow, without slide= or key=) alike."""
    size, slide = shape

    def make(s: Stream[Any]) -> Stream[Any]:
        if kind == "tumbling":
            return s.timed_window(size)
        return s.timed_window(size, slide=slide, key=0 if kind == "keyed" else None)

    expected = run(make, schedule, end)
    cut = data.draw(st.integers(0, len(schedule)), label="cut")

    with use_clock(VirtualClock()) as clock:
        source = Stream()
        first = make(source)
        out1 = first.sink_to_list()
    for dt, x in schedule[:cut]:
        clock.advance(dt)
        source.emit(x)
    state = pickle.loads(pickle.dumps(first.snapshot()))
    emitted = len(out1)
    clock.advance(0.5)  # the first run goes on a little, then dies
    source.emit(("z", -1))

    # The new run starts later, on another clock: time while down does not count.
    with use_clock(VirtualClock(start=1000.0)) as clock:
        source = Stream()
        second = make(source)
        out2 = second.sink_to_list()
    second.restore(state)
    for dt, x in schedule[cut:]:
        clock.advance(dt)
        source.emit(x)
    clock.advance(end)
    source.close()
    assert out1[:emitted] + out2 == expected


def test_metadata_is_held_until_the_last_window_of_its_element_is_emitted() -> None:
    with use_clock(VirtualClock()) as clock:
        source = Stream()
        node = source.timed_window(3, slide=1)
        seen: list[Any] = []
        node.sink(lambda w: seen.append(w))
    ref = RefCounter()
    source.emit("x", metadata=[{"ref": ref}])
    assert ref.count == 1
    clock.advance(2)  # [-2, 1) and [-1, 2) emitted; [0, 3) still holds "x"
    assert seen == [["x"], ["x"]] and ref.count == 1
    clock.advance(1)
    assert seen == [["x"], ["x"], ["x"]] and ref.count == 0


def test_close_releases_the_metadata_of_what_it_flushes() -> None:
    with use_clock(VirtualClock()):
        source = Stream()
        out = source.timed_window(3, slide=1, key=0).sink_to_list()
    ref = RefCounter()
    source.emit(("a", 1), metadata=[{"ref": ref}])
    source.close()
    assert out == [("a", [("a", 1)])] * 3 and ref.count == 0


# -- on an engine: ticks instead of the clock --------------------------------------------


def _on_a_stage(make: Any, schedule: Schedule, end: float, batch: int) -> list[Any]:
    """Run the node as an engine does: a rebuilt stage, fed elements and ticks.

    The stage is restored from the previous batch's state before each batch
    (as Spark carries state between micro-batches), and its results go on
    in order.
    """
    with use_clock(VirtualClock()) as clock:
        source = Stream()
        node = make(source)
        events: list[Any] = []
        ticks = WindowClock(lambda ids: events.extend(Tick(i) for i in ids))
        ticks.add(node)
    spec = node.describe()
    plan = StagePlan("clock-windows", source.describe().id, (spec.id,),
                     (StageOp(spec, (-1,)),))
    out: list[Any] = []
    states = None
    for dt, x in schedule:
        clock.advance(dt)
        due: list[int] = []
        ticks.due(due)
        events.extend(Tick(i) for i in due)
        events.append(x)
        if len(events) >= batch:
            result = Stage(plan).run(events, states)
            states = result.states
            out += [v for _, v in result.events]
            events.clear()
    clock.advance(end)
    ticks.stop()
    result = Stage(plan).run(events, states, close=True)
    return out + [v for _, v in result.events]


@settings(max_examples=100, deadline=None)
@given(schedule=schedules, shape=shapes, end=steps, keyed=st.booleans(),
       batch=st.integers(1, 5))
def test_a_stage_fed_ticks_gives_what_the_node_gives_in_process(
        schedule: Schedule, shape: tuple[int, float], end: float, keyed: bool,
        batch: int) -> None:
    size, slide = shape
    key = 0 if keyed else None

    def make(s: Stream[Any]) -> Stream[Any]:
        return s.timed_window(size, slide=slide, key=key)

    assert _on_a_stage(make, schedule, end, batch) == run(make, schedule, end)



WINDOWS = {"tumbling": lambda s: s.timed_window(1.0),
           "sliding": lambda s: s.timed_window(2.0, slide=1.0)}


def _windows(window: Callable[[Stream[Any]], Stream[Any]], two_threads: bool) -> list[Any]:
    """``a`` at 0 s, the clock moved to 2 s, ``b`` then, and close: the windows sent.

    With ``two_threads`` the clock moves in a thread of its own, whose timer
    sends the first window; ``b`` arrives, from a loop's thread, while that
    window is still on its way downstream.
    """
    with use_clock(VirtualClock()) as clock:
        source: Stream[str] = Stream()
        on_its_way, go_on = threading.Event(), threading.Event()
        timer_thread: list[threading.Thread] = []

        def hand_over(w: Any) -> Any:
            if threading.current_thread() in timer_thread and not on_its_way.is_set():
                on_its_way.set()
                go_on.wait()
            return w

        out = window(source).map(hand_over).sink_to_list()
        source.emit("a")
        if not two_threads:
            clock.advance(2)
            source.emit("b")
        else:
            timer_thread.append(threading.Thread(target=clock.advance, args=(2,)))
            timer_thread[0].start()
            on_its_way.wait()

            async def arrive() -> None:
                sent = source.emit("b")  # on a loop: never waits for the node here
                go_on.set()
                if sent is not None:
                    await sent

            asyncio.run(arrive())
            timer_thread[0].join()
        source.close()
    return out


@pytest.mark.parametrize("kind", WINDOWS)
def test_an_element_arriving_while_the_timer_sends_a_window_waits_for_it(kind: str) -> None:
    # A synchronous producer's timer fires on the shared loop thread: the
    # element that comes meanwhile must neither send the same interval
    # again nor a later window ahead of the timer's.
    assert _windows(WINDOWS[kind], True) == _windows(WINDOWS[kind], False)
