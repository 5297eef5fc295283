"""Custom sources written to streamz's protocol: a subclass overrides ``_run`` or ``run``.

As in streamz, ``start()`` runs them on a loop: the loop thread in a plain
script, a task on a running loop; ``stop()`` ends them; their failures reach
the user as a built-in source's do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any

import pytest

from streams import Source, SourceError
from tests.polling import wait_until

#: How the run pushes an element: the forms streamz code uses.
EMIT_FORMS = ["await self.emit(x)", "self.emit(x)", "await self.emit(x, asynchronous=True)"]


class CountTo(Source[int]):
    """streamz's documented form: ``_run`` is one step, called until stopped."""

    def __init__(self, n: int, emit_form: str = EMIT_FORMS[0], **kwargs: Any) -> None:
        self.n, self.i = n, 0
        self.emit_form = emit_form
        self.threads: set[str] = set()
        super().__init__(**kwargs)

    async def _run(self) -> None:
        self.threads.add(threading.current_thread().name)
        if self.i >= self.n:
            self.stopped = True
            return
        x = self.i
        if self.emit_form == "await self.emit(x)":
            await self.emit(x)
        elif self.emit_form == "self.emit(x)":
            self.emit(x)
        else:
            await self.emit(x, asynchronous=True)
        self.i += 1


class Ticks(Source[int]):
    """The other streamz form: ``run`` itself, until stopped."""

    def __init__(self, **kwargs: Any) -> None:
        self.threads: set[str] = set()
        super().__init__(**kwargs)

    async def run(self) -> None:
        self.threads.add(threading.current_thread().name)
        i = 0
        while not self.stopped:
            self.emit(i)
            i += 1
            await asyncio.sleep(0)  # lets stop() from the loop's other tasks in


class Failing(Source[int]):
    async def _run(self) -> None:
        await self.emit(1)
        raise ValueError("the device went away")


@pytest.mark.parametrize("emit_form", EMIT_FORMS)
def test_a_run_step_source_runs_on_the_loop_thread_in_a_plain_script(emit_form: str) -> None:
    source = CountTo(3, emit_form)
    L = source.sink_to_list()
    run = source.start()
    assert isinstance(run, concurrent.futures.Future)
    assert run.result(timeout=60) is None
    assert L == [0, 1, 2]
    assert source.stopped
    assert threading.current_thread().name not in source.threads
    assert source.threads == {"streams-loop"}


def test_a_run_source_runs_on_the_loop_thread_until_stopped() -> None:
    source = Ticks()
    emitted = source.sink_to_list()
    run = source.start()
    wait_until(lambda: len(emitted) >= 5)
    source.stop()
    run.result(timeout=60)  # stop() ended the run
    assert source.threads == {"streams-loop"}
    produced = len(emitted)
    assert emitted == list(range(produced))
    run = source.start()  # stopped, it starts again, as streamz's
    wait_until(lambda: len(emitted) >= produced + 3)
    source.stop()
    run.result(timeout=60)
    assert emitted[produced:produced + 3] == [0, 1, 2]


@pytest.mark.parametrize("emit_form", EMIT_FORMS)
def test_a_run_step_source_is_a_task_on_a_running_loop(emit_form: str) -> None:
    async def main() -> tuple[list[int], CountTo]:
        source = CountTo(3, emit_form)
        L = source.sink_to_list()
        run = source.start()
        assert isinstance(run, asyncio.Task)
        await run
        return L, source

    L, source = asyncio.run(main())
    assert L == [0, 1, 2]
    assert source.threads == {threading.current_thread().name}


@pytest.mark.parametrize("asynchronous", [False, True])
def test_await_emit_in_a_run_step_waits_for_a_coroutine_sink(asynchronous: bool) -> None:
    seen: list[int] = []
    through: list[tuple[int, list[int]]] = []

    class Checked(CountTo):
        async def _run(self) -> None:
            await super()._run()
            through.append((self.i, list(seen)))

    async def slow_sink(x: int) -> None:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        seen.append(x)

    async def main() -> None:
        source = Checked(3, asynchronous=asynchronous)
        source.sink(slow_sink)
        await source.start()

    asyncio.run(main())
    assert seen == [0, 1, 2]
    # backpressure: after each await, the sink had finished with the element
    assert through[:3] == [(1, [0]), (2, [0, 1]), (3, [0, 1, 2])]


def test_a_run_source_on_a_running_loop_ends_with_stop() -> None:
    async def main() -> tuple[list[int], bool]:
        source = Ticks()
        emitted = source.sink_to_list()
        fifth = asyncio.Event()
        source.sink(lambda x: fifth.set() if x == 4 else None)
        run = source.start()
        waiting = asyncio.ensure_future(fifth.wait())
        await asyncio.wait([waiting, run], return_when=asyncio.FIRST_COMPLETED)
        assert not run.done(), run.exception()  # a run that ends unstopped fails here
        await source.stop()  # done once the run has ended
        return emitted, run.done()

    emitted, ended = asyncio.run(main())
    assert ended
    assert emitted == list(range(len(emitted)))
    assert len(emitted) >= 5


def test_a_failure_in_run_reaches_the_user_in_a_plain_script(
        caplog: pytest.LogCaptureFixture) -> None:
    source = Failing()
    L = source.sink_to_list()
    with caplog.at_level(logging.ERROR, logger="streams"):
        run = source.start()
        with pytest.raises(ValueError, match="the device went away") as info:
            run.result(timeout=60)
    assert isinstance(info.value, SourceError)  # names the source, keeps the type
    assert "Failing" in str(info.value)
    assert L == [1]
    assert source.stopped
    assert any("the device went away" in r.getMessage() for r in caplog.records)


def test_a_failure_in_run_reaches_the_user_on_a_running_loop() -> None:
    async def main() -> None:
        source = Failing()
        run = source.start()
        with pytest.raises(ValueError, match="the device went away"):
            await run
        with pytest.raises(ValueError, match="the device went away"):
            await source.stop()

    asyncio.run(main())


def test_a_source_that_defines_no_run_says_what_to_override() -> None:
    class NoRun(Source[int]):
        pass

    with pytest.raises(NotImplementedError, match="overrides async def _run"):
        NoRun().start()


def test_the_base_class_is_where_streamz_users_import_it_from() -> None:
    """``from streamz.sources import Source`` switches by changing the import."""
    import streams
    from streams.sources import Source as FromSources

    assert FromSources is streams.Source
