"""Operators that hold elements on a loop, under every interleaving Hypothesis finds.

A producer emits 0, 1, 2... each either awaited or not (the Future-like
result kept), with a drawn number of loop turns after each; the sink (and
``map_async``'s function) suspends a drawn number of times per element (never,
sometimes, always); then ``aclose()`` races whatever is still in flight.
Hangs are detected by a budget of loop turns, not by a clock: the run fails
if ``aclose()`` and every emit have not finished within it. Nothing may be
lost, doubled or reordered (``latest`` may skip, by design, but keeps the
last element, and the first one unless a second arrived before the loop
turned, as streamz's does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams import Stream

# Far more loop turns than any run needs (each element costs a few turns per
# suspension): running out of them means something waits forever.
TURNS = 20_000


def suspend(k: int) -> Any:
    async def turns() -> None:
        for _ in range(k):
            await asyncio.sleep(0)

    return turns()


schedules = st.lists(
    st.tuples(st.booleans(),                   # emit awaited?
              st.integers(0, 3),               # loop turns after the emit
              st.integers(0, 3),               # the sink's suspensions for it
              st.integers(0, 3)),              # map_async's function's suspensions
    min_size=1, max_size=12)


async def emit_and_close(source: Stream[Any], awaited: list[bool],
                         after: Callable[[int], Awaitable[None]], tick: Callable[[], None],
                         out: list[Any]) -> None:
    """The producer: emit 0, 1, 2... then ``aclose()``, racing what is in flight.

    Element ``i`` is awaited if ``awaited[i]`` (else its result is kept and
    awaited after ``aclose()``), then ``after(i)`` is awaited. Fails if it
    has not all finished within ``TURNS`` loop turns (``tick()`` after each
    turn), ``out`` (what the sink got) in the message.
    """
    unawaited = []

    async def produce() -> None:
        for i, wait in enumerate(awaited):
            pending = source.emit(i)
            if wait:
                await pending
            else:
                unawaited.append(pending)
            await after(i)
        await source.aclose()
        for p in unawaited:
            await p

    task = asyncio.ensure_future(produce())
    for _ in range(TURNS):
        if task.done():
            break
        await asyncio.sleep(0)
        tick()
    else:
        task.cancel()
        raise AssertionError(f"hung: delivered {out} of {len(awaited)}")
    task.result()


def run(build: Callable[[Stream[Any], Callable[[int], Any]], Any],
        schedule: list[tuple[bool, int, int, int]]) -> list[int]:
    """Run ``schedule`` through ``build(source, sink)``; return what the sink got."""
    out: list[int] = []
    sink_turns = {i: s for i, (_, _, s, _) in enumerate(schedule)}

    async def sink(x: int) -> None:
        await suspend(sink_turns[x])
        out.append(x)

    async def main() -> None:
        source: Stream[Any] = Stream(asynchronous=True)
        build(source, sink)
        await emit_and_close(source, [awaited for awaited, _, _, _ in schedule],
                             lambda i: suspend(schedule[i][1]), lambda: None, out)

    asyncio.run(main())
    return out


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 4), schedule=schedules)
def test_buffer_loses_nothing_and_never_hangs(n: int, schedule: Any) -> None:
    got = run(lambda source, sink: source.buffer(n).sink(sink), schedule)
    assert got == list(range(len(schedule)))


@settings(max_examples=150, deadline=None)
@given(parallelism=st.integers(1, 3), schedule=schedules)
def test_map_async_loses_nothing_and_never_hangs(parallelism: int, schedule: Any) -> None:
    func_turns = {i: f for i, (_, _, _, f) in enumerate(schedule)}

    async def func(x: int) -> int:
        await suspend(func_turns[x])
        return x

    got = run(lambda source, sink: source.map_async(func, parallelism=parallelism).sink(sink),
              schedule)
    assert got == list(range(len(schedule)))


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 3), schedule=schedules)
def test_buffer_into_map_async_loses_nothing(n: int, schedule: Any) -> None:
    async def func(x: int) -> int:
        await suspend(x % 3)
        return x

    got = run(lambda source, sink: source.buffer(n).map_async(func, parallelism=2).sink(sink),
              schedule)
    assert got == list(range(len(schedule)))


@settings(max_examples=150, deadline=None)
@given(schedule=schedules)
def test_latest_keeps_first_and_last_in_order(schedule: Any) -> None:
    got = run(lambda source, sink: source.latest().sink(sink), schedule)
    assert got == sorted(set(got))
    assert got[-1] == len(schedule) - 1
    awaited, turns, _, _ = schedule[0]
    if awaited or turns or len(schedule) == 1:  # the loop turned before 1 arrived
        assert got[0] == 0


def test_buffer_1_awaited_emits_then_close_delivers_everything() -> None:
    # The worker returns in the loop turn that wakes the producer; its
    # done-callback clears it a turn later: the producer must not wait for that.
    async def main() -> list[int]:
        source: Stream[Any] = Stream(asynchronous=True)
        out = source.buffer(1).sink_to_list()
        for i in range(4):
            await source.emit(i)
        await source.aclose()
        return out

    assert asyncio.run(main()) == [0, 1, 2, 3]


# -- operators that hold elements for a time, on a virtual clock -----------

# Emits are awaited here: an element emitted without ``await`` reaches a
# coroutine sink only when its Future-like result is awaited, so a later
# awaited emit overtakes it (the core's behaviour for any coroutine sink, not
# these operators').
timed_schedules = st.lists(
    st.tuples(st.just(True),                              # emit awaited
              st.sampled_from([0.0, 0.25, 0.5, 1.5]),     # virtual seconds after it
              st.integers(0, 2)),                          # the sink's suspensions
    min_size=1, max_size=10)


def run_timed(build: Callable[[Stream[Any], Callable[[Any], Any]], Any],
              schedule: list[tuple[bool, float, int]]) -> list[Any]:
    """:func:`run` for timed operators: a ticker moves the virtual clock while anything waits."""
    from streams import VirtualClock, use_clock

    out: list[Any] = []
    turns_of = [k for _, _, k in schedule]

    async def sink(x: Any) -> None:
        await suspend(turns_of[len(out) % len(turns_of)])
        out.append(x)

    async def main() -> None:
        with use_clock(VirtualClock()) as clock:
            source: Stream[Any] = Stream(asynchronous=True)
            build(source, sink)

        async def advance(i: int) -> None:
            dt = schedule[i][1]
            if dt:
                await clock.advance_async(dt)

        def tick() -> None:
            clock.advance(0.125)  # whoever waits on the clock gets its time

        await emit_and_close(source, [awaited for awaited, _, _ in schedule], advance, tick,
                             out)

    asyncio.run(main())
    return out


def flat(windows: list[Any]) -> list[Any]:
    return [x for w in windows for x in w]


@settings(max_examples=100, deadline=None)
@given(schedule=timed_schedules)
def test_delay_loses_nothing(schedule: Any) -> None:
    got = run_timed(lambda source, sink: source.delay(1.0).sink(sink), schedule)
    assert got == list(range(len(schedule)))


@settings(max_examples=100, deadline=None)
@given(schedule=timed_schedules)
def test_rate_limit_loses_nothing(schedule: Any) -> None:
    got = run_timed(lambda source, sink: source.rate_limit(0.5).sink(sink), schedule)
    assert got == list(range(len(schedule)))


@settings(max_examples=100, deadline=None)
@given(schedule=timed_schedules)
def test_timed_window_loses_nothing(schedule: Any) -> None:
    got = run_timed(lambda source, sink: source.timed_window(1.0).sink(sink), schedule)
    assert flat(got) == list(range(len(schedule)))


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 3), schedule=timed_schedules)
def test_partition_with_timeout_loses_nothing(n: int, schedule: Any) -> None:
    got = run_timed(lambda source, sink: source.partition(n, timeout=1.0).sink(sink),
                    schedule)
    assert flat(got) == list(range(len(schedule)))


@settings(max_examples=100, deadline=None)
@given(schedule=timed_schedules)
def test_zip_with_itself_through_a_buffer_loses_nothing(schedule: Any) -> None:
    def build(source: Stream[Any], sink: Callable[[Any], Any]) -> None:
        source.zip(source.buffer(2)).sink(sink)

    got = run_timed(build, schedule)
    assert got == [(i, i) for i in range(len(schedule))]
