"""``from_process`` ending early: a failing pipeline or ``stop()`` ends the run and the process.

Real subprocesses; what a test waits for is an event (a line, the end of a
pipe), never a delay. GUARD only bounds a hang of a broken implementation.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import pytest

from streams import NodeError, Stream

GUARD = 30.0  # seconds: only ever reached when the behaviour under test is broken

#: Writes lines for ever: it fills the pipe as soon as nobody reads it.
WRITER = "import sys\nwhile True:\n    sys.stdout.write('y\\n' * 1000)"


def _kill(source: Any) -> None:
    """Clean up after a failed test: the process must not outlive it."""
    process = source.process
    if process is not None and process.returncode is None:
        try:
            process.kill()
        except ProcessLookupError:
            pass


async def _ended(fd: int) -> bytes:
    """Read ``fd`` (a pipe's read end) until every holder of its write end has exited."""
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.run_in_executor(None, os.read, fd, 1), GUARD)


@pytest.mark.timeout(60)  # the hang guard: without a loop there is no wait_for
def test_a_failing_pipeline_ends_a_process_that_keeps_writing() -> None:
    source = Stream.from_process([sys.executable, "-c", WRITER])
    source.map(lambda line: 1 / 0).sink(print)
    try:
        with pytest.raises(NodeError) as caught:
            source.start()
        assert isinstance(caught.value, ZeroDivisionError)
        assert source.returncode is not None and source.returncode < 0  # terminated
    finally:
        _kill(source)


def test_a_failing_pipeline_on_a_loop_ends_the_run_and_the_process() -> None:
    async def main() -> Any:
        source = Stream.from_process([sys.executable, "-c", WRITER])
        source.map(lambda line: 1 / 0).sink(print)
        run = source.start()
        try:
            with pytest.raises(ZeroDivisionError):
                await asyncio.wait_for(run, GUARD)
        finally:
            _kill(source)
        return source.returncode

    returncode = asyncio.run(main())
    assert returncode is not None and returncode < 0


def test_stop_ends_the_process_and_the_processes_it_started() -> None:
    # The shell's child (sleep) holds the process's stdout and a pipe of the
    # test's: the test's pipe ends when both have exited.
    read, write = os.pipe()
    script = "sleep 1000 & echo started; wait"

    async def main() -> list[bytes]:
        source = Stream.from_process(["sh", "-c", script], open_kwargs={"pass_fds": (write,)})
        L = source.sink_to_list()
        source.sink(lambda line: source.stop())
        run = source.start()
        os.close(write)  # the shell and its child hold the only copies now
        try:
            await asyncio.wait_for(run, GUARD)
            assert await _ended(read) == b""
        finally:
            _kill(source)
        return L

    try:
        assert asyncio.run(main()) == [b"started\n"]
    finally:
        os.close(read)


def test_stop_of_a_run_without_a_loop_ends_a_process_that_fills_the_pipe() -> None:
    # stop() is called while the process writes faster than the pipeline reads.
    source = Stream.from_process([sys.executable, "-c", WRITER])
    seen: list[bytes] = []

    def take(line: bytes) -> None:
        seen.append(line)
        if len(seen) == 5:
            source.stop()

    source.sink(take)
    try:
        source.start()
    finally:
        _kill(source)
    assert len(seen) == 5 and source.returncode is not None


def test_the_process_can_stay_in_the_callers_session() -> None:
    source = Stream.from_process([sys.executable, "-c", "import os; print(os.getsid(0))"],
                                 open_kwargs={"start_new_session": False})
    ours = b"%d\n" % os.getsid(0)
    lines = source.sink_to_list()
    source.start()
    assert lines == [ours]
    leads = "import os; print(os.getsid(0) == os.getpid())"
    own = Stream.from_process([sys.executable, "-c", leads])  # by default: a session of its own
    lines = own.sink_to_list()
    own.start()
    assert lines == [b"True\n"]


@pytest.mark.timeout(60)
def test_a_line_over_the_limit_says_the_limit_and_ends_the_process() -> None:
    long_line = "import sys\nsys.stdout.write('x' * (2 << 20) + '\\n')\nsys.stdout.flush()"
    source = Stream.from_process([sys.executable, "-c", long_line])
    out = source.sink_to_list()
    try:
        with pytest.raises(ValueError, match=r"longer than 1 MiB, the longest this source reads"):
            source.start()
        assert out == [] and source.returncode is not None
    finally:
        _kill(source)
