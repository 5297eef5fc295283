"""Pending work of several branches: one failing does not lose the others'."""

from __future__ import annotations

import asyncio

import pytest

from streams import Stream


def test_a_failing_coroutine_branch_does_not_lose_the_next_branch() -> None:
    # Each branch's pending work is awaited even after one fails; the first
    # failure is raised once all are done (the later branch's coroutine was
    # never awaited: its element lost, with a "never awaited" warning).
    out: list[int] = []

    async def bad(x: int) -> None:
        raise ZeroDivisionError(f"boom on {x}")

    async def good(x: int) -> None:
        await asyncio.sleep(0)
        out.append(x)

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(bad)
        source.sink(good)
        with pytest.raises(ZeroDivisionError, match="boom on 1"):
            await source.emit(1)

    asyncio.run(main())
    assert out == [1]
