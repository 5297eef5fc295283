"""Elements emitted without ``await``: closing waits for their work, and raises its failure.

``emit`` on an asynchronous stream returns a Future; an element emitted
without awaiting it is never lost: ``aclose()`` waits for its work before the
nodes below close, and raises a failure of it nobody read from that Future.
A synchronous emit on a running loop (a notebook cell) likewise has its
failure raised by ``close()``. Ordering comes from events, never sleeps.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest

from streams import Stream


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


class Gate:
    """A coroutine step that holds each element until the test opens it."""

    def __init__(self) -> None:
        self.entered: list[Any] = []
        self.done: list[Any] = []
        self.open = asyncio.Event()

    async def __call__(self, x: Any) -> Any:
        self.entered.append(x)
        await self.open.wait()
        self.done.append(x)
        return x


def unread_futures(loop: asyncio.AbstractEventLoop) -> list[str]:
    """Record what asyncio reports as never retrieved on ``loop``."""
    reported: list[str] = []
    loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
    return reported


def test_aclose_waits_for_an_async_map_of_elements_emitted_without_await() -> None:
    async def main() -> None:
        gate = Gate()

        async def inc(x: int) -> int:
            return await gate(x) + 10

        source = Stream(asynchronous=True)
        L = source.map(inc).sink_to_list()
        for i in range(3):
            source.emit(i)  # fire and forget, as with streamz
        closing = asyncio.ensure_future(source.aclose())
        await settle()
        assert gate.entered == [0, 1, 2] and not closing.done()
        gate.open.set()
        await closing
        assert L == [10, 11, 12]

    asyncio.run(main())


def test_aclose_waits_for_coroutine_sinks_of_elements_emitted_without_await() -> None:
    async def main() -> Gate:
        gate = Gate()
        source = Stream(asynchronous=True)
        source.sink(gate)
        for i in range(3):
            source.emit(i)
        closing = asyncio.ensure_future(source.close())  # close() too, awaited later
        await settle()
        assert not closing.done()
        gate.open.set()
        await closing
        assert gate.done == [0, 1, 2]
        return gate

    assert asyncio.run(main()).done == [0, 1, 2]  # nothing left for asyncio.run to cancel


def test_a_failure_nobody_read_is_raised_by_aclose_and_one_read_is_not() -> None:
    out: list[int] = []

    async def sink(x: int) -> None:
        await asyncio.sleep(0)
        if x in (1, 3):
            raise ValueError(f"bad {x}")
        out.append(x)

    async def main() -> list[str]:
        reported = unread_futures(asyncio.get_running_loop())
        source = Stream(asynchronous=True)
        source.sink(sink)
        source.emit(0)
        with pytest.raises(ValueError, match="bad 1"):
            await source.emit(1)  # read here: not raised again at close
        for i in (2, 3, 4):
            source.emit(i)
        with pytest.raises(ValueError, match="bad 3"):
            await source.aclose()
        gc.collect()
        await settle()
        return reported

    assert asyncio.run(main()) == []  # and not reported again when collected
    assert out == [0, 2, 4]


def test_a_failure_after_its_producer_stopped_waiting_is_raised_by_aclose(
        caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()

    async def failing(x: int) -> None:
        await release.wait()
        raise ValueError(f"bad {x}")

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(failing)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(source.emit(1), timeout=0)  # the producer gives up
        release.set()
        with pytest.raises(ValueError, match="bad 1"):
            await source.aclose()

    with caplog.at_level(logging.ERROR, logger="streams"):
        asyncio.run(main())
    assert "no longer awaited" in caplog.text  # logged at once, as before


def test_a_sink_closing_its_own_source_waits_for_the_others_not_itself() -> None:
    async def main() -> list[Any]:
        gate = Gate()
        out: list[Any] = []
        source = Stream(asynchronous=True)

        async def sink(x: Any) -> None:
            if x == "end":
                await source.aclose()  # from this element's own work
                out.append("closed")
            else:
                out.append(await gate(x))

        source.sink(sink)
        source.emit(0)
        source.emit("end")
        await settle()
        assert out == []  # the close waits for element 0...
        gate.open.set()
        await settle()  # ...and not for the element that closes
        return out

    assert asyncio.run(main()) == [0, "closed"]


def test_zip_waits_for_an_upstream_still_finishing_its_unawaited_emits() -> None:
    async def main() -> None:
        gate = Gate()
        a = Stream(asynchronous=True)
        b = Stream(asynchronous=True)
        L = a.zip(b).map(gate).sink_to_list()
        await b.emit("x")  # held by zip
        a.emit(1)  # paired: (1, "x") waits at the gate, a's work in flight
        await settle()
        assert gate.entered == [(1, "x")]
        closing_a = asyncio.ensure_future(a.aclose())
        await settle()
        await b.aclose()  # a still finishing: zip stays open for its element
        gate.open.set()
        await closing_a
        assert L == [(1, "x")]

    asyncio.run(main())


def test_a_sink_failure_under_the_synchronous_api_on_a_loop_is_raised_by_close(
        caplog: pytest.LogCaptureFixture) -> None:
    async def bad(x: int) -> None:
        await asyncio.sleep(0)
        raise ValueError(f"sink failed on {x}")

    async def main() -> None:
        source = Stream()  # the synchronous API on a running loop, as in Jupyter
        source.sink(bad)
        scheduled = source.emit(1)  # as a notebook cell: the result is not read
        await asyncio.wait([scheduled])
        with pytest.raises(ValueError, match="sink failed on 1"):
            source.close()

    with caplog.at_level(logging.ERROR, logger="streams"):
        asyncio.run(main())
    assert caplog.text.count("work scheduled by a synchronous emit failed") == 1  # at once


def test_a_close_queued_behind_failing_synchronous_emits_raises_the_one_nobody_read(
        caplog: pytest.LogCaptureFixture) -> None:
    gates = [Gate(), Gate()]

    async def sink(x: int) -> None:
        await gates[x](x)
        raise ValueError(f"sink failed on {x}")

    async def main() -> None:
        source = Stream()
        source.sink(sink)
        first = source.emit(0)
        source.emit(1)
        gates[0].open.set()
        with pytest.raises(ValueError, match="on 0"):
            await first  # read: the close does not raise it again
        closing = source.close()  # queued behind element 1, still at its gate
        await settle()
        assert gates[1].entered == [1] and not closing.done()
        gates[1].open.set()
        with pytest.raises(ValueError, match="on 1"):
            await closing

    with caplog.at_level(logging.ERROR, logger="streams"):
        asyncio.run(main())
    # Each failure logged once, when it happened; not again as the close's.
    assert caplog.text.count("work scheduled by a synchronous emit failed") == 2


def test_finished_work_leaves_no_task_and_no_read_failure_behind(
        caplog: pytest.LogCaptureFixture) -> None:
    async def sink(x: int) -> None:
        await asyncio.sleep(0)
        if x % 2:
            raise ValueError(f"bad {x}")

    from streams.in_flight import in_flight

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.sink(sink)
        for _ in range(3):  # bursts of failures, each read by the producer
            handed = [source.emit(i) for i in range(1000)]
            await asyncio.gather(*handed, return_exceptions=True)
        work = in_flight(source)
        assert work is not None and not work.tasks
        assert len(work.failures) <= 1000  # those read are dropped as more come
        for _ in range(40):  # nobody reads these: one is raised at close, the others logged
            for _ in range(50):
                source.emit(1)
            await settle()
        assert len(work.failures) < 300  # not 2,000
        with pytest.raises(ValueError, match="bad 1"):
            await source.aclose()
        assert not work.tasks and not work.failures

    with caplog.at_level(logging.ERROR, logger="streams"):
        asyncio.run(main())
    assert "an earlier failure is kept for close" in caplog.text
    assert "after the failure raised at close" in caplog.text


def test_a_synchronous_emit_on_a_loop_goes_through_when_its_caller_stops_waiting(
        caplog: pytest.LogCaptureFixture) -> None:
    # emit() handed out the element's own Task: a caller that gave up waiting
    # (wait_for timing out) cancelled the element's work, and it vanished
    # without a word. An asynchronous stream's element goes through.
    gate = Gate()
    failing = Gate()

    async def sink(x: str) -> None:
        await (failing if x == "c" else gate)(x)
        if x == "c":
            raise ValueError("sink failed on c")

    async def main() -> list[Any]:
        source = Stream()  # the synchronous API on a running loop, as in Jupyter
        source.sink(sink)
        seen = source.map(str.upper).sink_to_list()
        source.emit("a")  # the sink holds it: what follows queues behind
        for x in ("b", "c"):
            source.emit(x).cancel()  # the caller stops waiting, as wait_for's timeout does
        source.emit("d")
        gate.open.set()
        await settle()
        failing.open.set()
        with pytest.raises(ValueError, match="on c"):  # nobody awaits it any more
            await source.close()
        return seen

    with caplog.at_level(logging.ERROR, logger="streams"):
        seen = asyncio.run(main())
    assert gate.done == ["a", "b", "d"] and failing.done == ["c"]
    assert seen == ["A", "B", "C", "D"]
    assert caplog.text.count("work scheduled by a synchronous emit failed") == 1
