"""What an asynchronous ``emit`` hands its producer: branches run together, and giving up
waiting loses nothing.

Concurrency is controlled with events, never with sleeps.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from streams import Stream


def test_the_coroutine_sinks_of_one_element_s_branches_run_together() -> None:
    # As in streamz: await emit takes the slowest branch's time, not their
    # sum. Each sink here waits for the other to have started: one after
    # the other, the first would wait for ever.
    started = {"a": asyncio.Event(), "b": asyncio.Event()}
    done: list[str] = []

    def sink(me: str, other: str) -> Any:
        async def run(x: int) -> None:
            started[me].set()
            await started[other].wait()
            done.append(me)
        return run

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(sink("a", "b"))
        source.map(str).sink(sink("b", "a"))  # through a step: a branch of its own
        await asyncio.wait_for(source.emit(1), timeout=30)  # a guard, not a timing

    asyncio.run(main())
    assert sorted(done) == ["a", "b"]


def test_successive_elements_held_by_a_node_still_reach_a_coroutine_sink_in_order() -> None:
    # close() sends what a window held, one element after the other: not together.
    seen: list[Any] = []

    async def sink(x: Any) -> None:
        seen.append(("in", x))
        await asyncio.sleep(0)
        seen.append(("out", x))

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.partition(3).flatten().sink(sink)
        await source.emit(1)
        await source.emit(2)
        await source.close()

    asyncio.run(main())
    assert seen == [("in", 1), ("out", 1), ("in", 2), ("out", 2)]


def test_a_producer_that_stops_waiting_does_not_take_the_element_with_it() -> None:
    # asyncio.wait_for timing out cancels what it awaits; the element still
    # goes through (streamz: [1, 2]; before, the sink was cancelled: [2]).
    release = asyncio.Event()
    out: list[int] = []

    async def slow(x: int) -> None:
        await release.wait()
        out.append(x)

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(slow)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(source.emit(1), timeout=0)
        release.set()
        await source.emit(2)
        await source.close()

    asyncio.run(main())
    assert out == [1, 2]


def test_a_failure_nobody_awaits_any_more_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()

    async def failing(x: int) -> None:
        await release.wait()
        raise ValueError(f"bad {x}")

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(failing)
        handed = source.emit(1)
        handed.cancel()  # the producer gave up
        release.set()
        for _ in range(10):
            await asyncio.sleep(0)

    with caplog.at_level(logging.ERROR, logger="streams"):
        asyncio.run(main())
    assert "no longer awaited" in caplog.text and "bad 1" in caplog.text


def test_a_branch_stopping_its_source_while_another_branch_waits_does_not_deadlock() -> None:
    # stop() returns the run's end; a sink returning it awaits it. From the
    # run's own element that awaits nothing (the run ends after it), also in
    # the task a branch's coroutine runs in; before, it waited for the run,
    # which waited for the branch.
    out: list[int] = []

    async def slow(x: int) -> None:
        await asyncio.sleep(0)
        out.append(x)

    async def main() -> None:
        source = Stream.from_iterable(range(10), asynchronous=True)
        source.sink(slow)
        source.sink(lambda x: source.stop() if x == 3 else None)
        await asyncio.wait_for(source.start(), timeout=30)  # a guard, not a timing

    asyncio.run(main())
    assert out == [0, 1, 2, 3]


def test_a_task_a_sink_starts_waits_for_the_run_to_end_when_it_stops_it() -> None:
    # Only the run's own work skips waiting for its end; a controller task
    # the graph starts (copying the run's context) waits, as it did.
    log: list[Any] = []

    async def main() -> None:
        source = Stream.from_iterable(range(3), asynchronous=True)
        release = asyncio.Event()
        tasks: list[Any] = []

        async def controller() -> None:
            await source.stop()
            log.append(("stopped", source._task is not None and source._task.done()))

        async def sink(x: int) -> None:
            if x == 0:
                tasks.append(asyncio.ensure_future(controller()))
                await asyncio.sleep(0)
                release.set()
            await release.wait()
            log.append(("sink", x))

        source.sink(sink)
        await asyncio.wait_for(source.start(), timeout=30)
        for _ in range(10):
            await asyncio.sleep(0)

    asyncio.run(main())
    assert log == [("sink", 0), ("stopped", True)]


def test_system_exit_in_a_coroutine_sink_ends_the_loop() -> None:
    async def leave(x: int) -> None:
        raise SystemExit(3)

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(leave)
        source.emit(1)  # not awaited: still the program's exit
        for _ in range(10):
            await asyncio.sleep(0)

    with pytest.raises(SystemExit):
        asyncio.run(main())


def test_branches_started_together_are_cancelled_together() -> None:
    started: list[str] = []
    cancelled: list[str] = []

    def sink(name: str) -> Any:
        async def run(x: int) -> None:
            started.append(name)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(name)
                raise
        return run

    async def main() -> None:
        source = Stream.from_iterable([1], asynchronous=True)
        source.sink(sink("a"))
        source.map(str).sink(sink("b"))
        run = source.start()
        for _ in range(10):
            await asyncio.sleep(0)
        run.cancel()  # the run's element is in both branches: both go
        for _ in range(10):
            await asyncio.sleep(0)

    asyncio.run(main())
    assert sorted(started) == sorted(cancelled) == ["a", "b"]
