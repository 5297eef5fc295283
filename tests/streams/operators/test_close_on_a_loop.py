"""close() and aclose() of an asynchronous stream while work is in flight.

A buffer whose sink is held by a gate keeps the close waiting; a partition
below it holds an element that only the close flushes. Nothing held may be
lost: not when ``aclose()`` is cancelled half-way, not when ``close()`` is
called without being awaited.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest

from streams import Stream


async def turns(n: int = 50) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def gated_graph(gate: asyncio.Event, fail_on: Any = None) -> tuple[Stream[Any], Stream[Any],
                                                                   list[Any]]:
    """source -> buffer(10) -> (a sink waiting on ``gate``, partition(3) -> list)."""

    async def slow(x: Any) -> None:
        await gate.wait()
        if x == fail_on:
            raise ZeroDivisionError(f"boom on {x!r}")

    source = Stream(asynchronous=True)
    buf = source.buffer(10)
    buf.sink(slow)
    part = buf.partition(3)
    return source, part, part.sink_to_list()


def test_a_cancelled_aclose_is_finished_by_the_next_one() -> None:
    async def main() -> tuple[list[Any], bool]:
        gate = asyncio.Event()
        source, part, out = gated_graph(gate)
        for i in range(4):
            await source.emit(i)
        closing = asyncio.ensure_future(source.aclose())
        await turns(5)
        closing.cancel()  # asyncio.wait_for(source.aclose(), timeout) expired
        with pytest.raises(asyncio.CancelledError):
            await closing
        gate.set()
        await asyncio.wait_for(source.aclose(), 10)  # waits for the close under way
        return out, part._closed

    assert asyncio.run(main()) == ([(0, 1, 2), (3,)], True)


def test_a_failure_of_a_close_whose_aclose_was_cancelled_is_raised_by_the_next() -> None:
    async def main() -> None:
        gate = asyncio.Event()
        source, _, _ = gated_graph(gate, fail_on=1)
        for i in range(3):
            await source.emit(i)
        closing = asyncio.ensure_future(source.aclose())
        await turns(5)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        gate.set()
        await turns()
        with pytest.raises(ZeroDivisionError, match="boom on 1"):
            await asyncio.wait_for(source.aclose(), 10)
        await source.aclose()  # told once: the stream is closed

    asyncio.run(main())


def test_close_not_awaited_still_closes_and_returns_a_future() -> None:
    async def main() -> tuple[Any, list[Any], bool]:
        gate = asyncio.Event()
        source, part, out = gated_graph(gate)
        for i in range(4):
            await source.emit(i)
        result = source.close()  # not awaited, as an emit's result need not be
        gate.set()
        await turns()
        return result, out, part._closed

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" included
        result, out, closed = asyncio.run(main())
        is_future = isinstance(result, asyncio.Future)
        del result
        gc.collect()
    assert is_future
    assert out == [(0, 1, 2), (3,)]
    assert closed
