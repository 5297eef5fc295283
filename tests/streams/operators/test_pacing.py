"""delay and rate_limit on a loop: order, failures, cancelled producers, metadata.

Time is a VirtualClock: no sleeps, no wall-clock asserts.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import Stream, VirtualClock
from streams.errors import NodeError
from streams.metadata import RefCounter


class MetadataSink(Stream[Any]):
    """Records each element with the metadata it came with."""

    _local_only = "a test sink"

    def __init__(self, upstream: Stream[Any], seen: list[Any]) -> None:
        self.seen = seen
        Stream.__init__(self, upstream)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        self.seen.append((x, metadata))


def test_delay_sends_behind_an_element_released_on_arrival(clock: VirtualClock) -> None:
    # 'a' is released when 'b' arrives (the producer did not yield past its
    # time): its slow sink is in flight, so the timer sends 'b' behind it,
    # not into the sink at the same time (where 'b' finished first).
    log: list[tuple[str, str]] = []

    async def sink(x: str) -> None:
        log.append(("enter", x))
        await clock.sleep(3.0 if x == "a" else 0.5)
        log.append(("done", x))

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.delay(1.0).sink(sink)
        await source.emit("a")
        clock._now = 1.2  # the producer did not yield past a's time
        emitting = asyncio.ensure_future(source.emit("b"))  # releases 'a'
        await clock.advance_async(5.0)
        await emitting
        closing = asyncio.ensure_future(source.aclose())
        await clock.advance_async(5.0)
        await closing

    asyncio.run(main())
    assert log == [("enter", "a"), ("done", "a"), ("enter", "b"), ("done", "b")]


async def bad(x: Any) -> None:
    await asyncio.sleep(0)
    raise ZeroDivisionError(f"boom on {x!r}")


def test_delay_failure_downstream_of_its_timer_is_raised_at_close(clock: VirtualClock) -> None:
    async def main() -> None:
        source = Stream(asynchronous=True)
        source.delay(1.0).sink(bad, stream_name="bad")
        await source.emit(1)
        await clock.advance_async(2.0)  # sent by the timer: nobody awaits it
        closing = asyncio.ensure_future(source.aclose())
        await clock.advance_async(1.0)
        with pytest.raises(ZeroDivisionError, match="boom on 1"):
            await closing

    asyncio.run(main())


def test_delay_failure_of_a_timer_with_no_loop_is_raised_at_close(clock: VirtualClock) -> None:
    source = Stream()
    out = source.delay(1.0).map(lambda x: 1 / x).sink_to_list()
    source.emit(0)
    source.emit(1)
    clock.advance(1.0)  # both sent by the timer: 1 / 0 fails, 1 / 1 goes on
    assert out == [1.0]
    with pytest.raises(ZeroDivisionError):
        source.close()


def test_rate_limit_delivers_the_element_of_a_cancelled_emit_at_its_turn(
        clock: VirtualClock) -> None:
    # As buffer (and streamz): a producer that stops waiting does not take its
    # element back, and the element keeps its turn; the next one follows it.
    out: list[tuple[float, str]] = []

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.rate_limit(1.0).sink(lambda x: out.append((clock.now(), x)))
        await source.emit("a")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(source.emit("b"), 0)  # the producer gives up
        await clock.advance_async(1.0)
        emitting = asyncio.ensure_future(source.emit("c"))
        await clock.advance_async(1.0)
        await emitting
        await source.aclose()

    asyncio.run(main())
    assert out == [(0.0, "a"), (1.0, "b"), (2.0, "c")]


def test_rate_limit_close_waits_for_waiting_elements_and_raises_unheard_failures(
        clock: VirtualClock) -> None:
    out: list[int] = []

    def sink(x: int) -> None:
        if x == 1:
            raise ZeroDivisionError("boom on 1")
        out.append(x)

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.rate_limit(1.0).sink(sink)
        await source.emit(0)
        waiting = asyncio.ensure_future(source.emit(1))
        await asyncio.sleep(0)
        waiting.cancel()  # nobody will hear of 1's failure but close
        source.emit(2)  # not awaited: close waits for its turn
        closing = asyncio.ensure_future(source.aclose())
        await clock.advance_async(3.0)
        with pytest.raises(NodeError, match="failed on element 1: ZeroDivisionError"):
            await closing

    asyncio.run(main())
    assert out == [0, 2]


def test_rate_limit_passes_metadata_and_holds_its_refs_while_waiting(clock: VirtualClock) -> None:
    seen: list[Any] = []
    done: list[str] = []

    async def main() -> None:
        source = Stream(asynchronous=True)
        MetadataSink(source.rate_limit(1.0), seen)
        ra, rb = RefCounter(cb=lambda: done.append("a")), RefCounter(cb=lambda: done.append("b"))
        await source.emit("a", metadata=[{"ref": ra, "offset": 1}])
        waiting = asyncio.ensure_future(source.emit("b", metadata=[{"ref": rb, "offset": 2}]))
        await asyncio.sleep(0)
        assert done == ["a"]  # 'b' is held, not done with
        await clock.advance_async(1.0)
        await waiting
        assert done == ["a", "b"]

    asyncio.run(main())
    assert [(x, [m["offset"] for m in md]) for x, md in seen] == [("a", [1]), ("b", [2])]
