"""Coroutine steps keep streamz's refs held; timed nodes keep order while a caller finishes.

streamz-style checkpointing commits an element when its ``RefCounter``
reaches zero: a coroutine ``map``/``filter``/``map_async`` must hold the ref
while its call runs, and pass the metadata on, as their synchronous forms
do. And with no loop running, the work an element left pending downstream
of ``delay``, ``partition(timeout=)`` or ``timed_window`` is run by its
synchronous caller after the node let go of its lock: a timer on another
thread must send the next element after that work, not past it.

Threads meet on Events; time is a VirtualClock (no sleeps, no wall-clock asserts).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from streams import RefCounter, Stream, VirtualClock

#: How long a test waits for the other thread before failing instead of hanging.
HANG = 30.0


class Metadata(Stream[Any]):
    """Emits the metadata each element arrives with (streamz's test helper)."""

    def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
        return self._emit(metadata) if metadata else None


# -- refs held by coroutine steps -------------------------------------------


STEPS: dict[str, Callable[[Stream[Any], Callable[..., Any]], Stream[Any]]] = {
    "map": lambda s, f: s.map(f),
    "filter": lambda s, f: s.filter(f),
    "map_async": lambda s, f: s.map_async(f),
}


@pytest.mark.parametrize(("step", "on_a_loop"), [
    ("map", True), ("map", False), ("filter", True), ("filter", False),
    ("map_async", False),  # on a loop it held them already
], ids=lambda v: {True: "on a loop", False: "no loop"}.get(v, v))
def test_a_coroutine_step_holds_the_ref_while_it_runs_and_passes_the_metadata_on(
        step: str, on_a_loop: bool) -> None:
    # Before: map dropped the metadata, and map and filter held no ref while
    # the coroutine ran (map_async neither, with no loop): the ref reached 0,
    # when a streamz source commits, before the element was processed.
    released: list[str] = []
    ref = RefCounter(cb=lambda: released.append("ref"))
    failed_ref = RefCounter(cb=lambda: released.append("failed_ref"))
    seen_while_running: list[tuple[int, list[str]]] = []

    async def call(x: int) -> int:
        await asyncio.sleep(0)
        if x == 3:
            raise ValueError(x)
        seen_while_running.append((ref.count, list(released)))
        return x + 1

    source = Stream(asynchronous=on_a_loop)
    node = STEPS[step](source, call).on_error("skip")
    out = Metadata(node.partition(2)).sink_to_list()

    def checks_after(x: int) -> None:
        if x == 1:
            assert seen_while_running == [(1, [])]  # held by the step while its call ran
            assert ref.count == 1 and released == []  # now held by partition
        elif x == 3:  # its call failed (skipped): released at once
            assert failed_ref.count == 0 and released == ["failed_ref"]

    feed = [(1, [{"ref": ref}]), (3, [{"ref": failed_ref}]), (2, None)]
    if on_a_loop:
        async def main() -> None:
            for x, metadata in feed:
                await source.emit(x, metadata=metadata)
                checks_after(x)

        asyncio.run(main())
    else:
        for x, metadata in feed:
            source.emit(x, metadata=metadata)
            checks_after(x)
    assert out == [[{"ref": ref}]]  # the metadata went on with the element
    assert ref.count == 0 and released == ["failed_ref", "ref"]


# -- order behind a synchronous caller's work --------------------------------


class LoopThread:
    """A thread running a loop, as streams-loop does, that calls ``fire()`` there.

    The loop then goes on turning until ``finished`` is set, so that work
    queued on it runs.
    """

    def __init__(self, fire: Callable[[], Any], finished: threading.Event) -> None:
        self.fired = threading.Event()
        self.error: BaseException | None = None

        async def main() -> None:
            fire()
            # Turns of the loop, not time: an element sent past the one still
            # being written runs its coroutine sink in these.
            for _ in range(20):
                await asyncio.sleep(0)
            self.fired.set()
            await asyncio.get_running_loop().run_in_executor(None, finished.wait, HANG)

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as e:  # reported by join()
                self.error = e
                self.fired.set()

        self.thread = threading.Thread(target=run, name="a-loop", daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(HANG)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


#: Each timed node, and what it sends for 0 (at time 0) then 1 (at time 1).
TIMED: dict[str, tuple[Callable[[Stream[Any]], Stream[Any]], list[Any]]] = {
    "delay": (lambda s: s.delay(1.0), [0, 1]),
    "partition(timeout=)": (lambda s: s.partition(5, timeout=1.0), [(0,), (1,)]),
    "timed_window": (lambda s: s.timed_window(1.0), [[0], [1]]),
}


@pytest.mark.parametrize("name", TIMED)
def test_a_timer_on_another_thread_waits_for_the_work_its_synchronous_caller_runs(
        clock: VirtualClock, name: str) -> None:
    # Before: the element's arrival sent 0 to a coroutine sink, left for its
    # caller to run after the node's lock was let go; the timer, on a loop
    # thread meanwhile, found nothing in flight and sent 1 past it: [1, 0].
    make, expected = TIMED[name]
    writing, written, finished = threading.Event(), threading.Event(), threading.Event()
    out: list[Any] = []

    async def write(y: Any) -> None:
        if not writing.is_set():  # the first: it takes until the test lets it go
            writing.set()
            assert written.wait(HANG)
        out.append(y)
        if len(out) == 2:
            finished.set()

    source = Stream()
    node = make(source)
    node.sink(write)
    source.emit(0)  # at 0: held until 1
    clock._now = 1.0  # the timer is late (the loop thread is busy)
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            source.emit(1)  # sends 0 on arrival; its write runs here, lock let go
        except BaseException as e:
            failures.append(e)

    producer = threading.Thread(target=produce, name="producer", daemon=True)
    producer.start()
    try:
        assert writing.wait(HANG)
        clock._now = 2.0
        timer = LoopThread(lambda: node._on_timer(1.0), finished)  # its late timer: 1 is due
        assert timer.fired.wait(HANG)
        assert out == []  # 1 waits behind 0, still being written
    except BaseException:
        finished.set()  # a failure leaves no thread waiting
        raise
    finally:
        written.set()
        producer.join(HANG)
    timer.join()
    assert not failures
    assert out == expected
    source.close()
    assert out == expected


def test_a_timer_in_the_callers_own_thread_sends_after_the_work_that_caller_runs(
        clock: VirtualClock) -> None:
    # A virtual clock advanced inside an emit (by another branch) fires the
    # timer in the very thread that runs the pending work once the emit is
    # back from its branches. Waiting for it there would never end; sending
    # past it put 1 and 2 before 0.
    out: list[Any] = []

    async def write(x: Any) -> None:
        out.append(x)

    def advance_at(x: Any) -> None:
        if x == 2:
            clock.advance(1.0)  # 1 and 2 come due

    source = Stream()
    source.delay(1.0).sink(write)
    source.sink(advance_at)  # after delay: its update has returned
    source.emit(0)
    clock._now = 0.5
    source.emit(1)
    clock._now = 1.0  # 0's timer is late
    source.emit(2)  # sends 0 on arrival, then the other branch fires the timer
    assert out == [0, 1, 2]


@pytest.mark.parametrize("on_a_loop", [True, False], ids=["on a loop", "no loop"])
def test_a_coroutine_sink_holds_the_ref_until_its_coroutine_ends(on_a_loop: bool) -> None:
    # Before: the sink let the ref go when its call returned the coroutine,
    # so a streamz source committed the element before it was written.
    released: list[str] = []
    ref = RefCounter(cb=lambda: released.append("ref"))
    seen_while_running: list[tuple[int, list[str]]] = []

    async def write(x: int) -> None:
        await asyncio.sleep(0)
        seen_while_running.append((ref.count, list(released)))

    source = Stream(asynchronous=on_a_loop)
    source.sink(write)
    if on_a_loop:
        async def main() -> None:
            await source.emit(1, metadata=[{"ref": ref}])

        asyncio.run(main())
    else:
        source.emit(1, metadata=[{"ref": ref}])
    assert seen_while_running == [(1, [])]
    assert ref.count == 0 and released == ["ref"]
