"""buffer, latest and map_async where streamz's own tests pin their behaviour.

``latest`` emits the newest element of a loop turn, ``map_async`` can stop
on an exception and resume, and an asynchronous ``emit`` on a running loop
returns a resolved Future, so Tornado's ``yield`` does not give the loop a
turn between emits (streamz's ``test_buffer`` counts on it).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import pytest
from tornado import gen

from streams import Stream


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_latest_emits_only_the_newest_element_of_a_loop_turn() -> None:
    async def main() -> list[int]:
        source = Stream(asynchronous=True)
        L = source.latest().sink_to_list()
        source.emit(0)
        await settle()
        for i in range(1, 4):  # one turn: 3 replaces 1 and 2 before the task runs
            source.emit(i)
        await settle()
        await source.aclose()
        return L

    assert asyncio.run(main()) == [0, 3]


def test_awaited_emit_into_latest_waits_until_the_element_is_taken() -> None:
    async def main() -> list[int]:
        source = Stream(asynchronous=True)
        L = source.latest().sink_to_list()
        for i in range(3):
            await source.emit(i)
        await source.aclose()
        return L

    assert asyncio.run(main()) == [0, 1, 2]


def test_emit_on_a_running_loop_returns_a_resolved_future() -> None:
    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(lambda x: None)
        result = source.emit(1)
        assert isinstance(result, asyncio.Future) and result.done()
        await result
        await result  # any number of times, as streamz's

    asyncio.run(main())


def test_tornado_yield_of_emits_does_not_run_the_buffer_between_them() -> None:
    seen: list[int] = []

    @gen.coroutine
    def produce(source: Stream[Any]) -> Any:
        for i in range(5):
            yield source.emit(i)
        held = list(seen)
        yield source.aclose()
        return held

    async def main() -> Any:
        source = Stream(asynchronous=True)
        source.buffer(10).sink(seen.append)
        return await produce(source)

    assert asyncio.run(main()) == []  # all five were held: no loop turn between them
    assert seen == [0, 1, 2, 3, 4]


def test_map_async_stop_on_exception_holds_elements_and_resumes_on_start(
        caplog: pytest.LogCaptureFixture) -> None:
    async def flaky(x: int) -> int:
        if x == 2:
            raise RuntimeError("fails on 2")
        return x

    async def main() -> tuple[list[int], list[int]]:
        source = Stream.from_iterable(itertools.count())
        mapped = source.map_async(flaky, stop_on_exception=True)
        L = mapped.sink_to_list()
        source.start()
        await settle()
        before = list(L)
        assert mapped.work_task is None and source.stopped
        mapped.start()  # resumes what was held, then restarts the source
        for _ in range(100):
            await asyncio.sleep(0)
            if len(L) >= 6:
                break
        source.stop()
        await settle()
        return before, L

    with caplog.at_level(logging.WARNING, logger="streams"):
        before, after = asyncio.run(main())
    assert before == [0, 1]
    assert after[:5] == [0, 1, 3, 4, 5]  # 2 failed (logged); nothing else lost
    assert "fails on 2" in caplog.text
    with pytest.raises(TypeError, match="stop_on_exception"):
        Stream().map_async(flaky, stop_on_exception="yes")
