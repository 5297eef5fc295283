"""from_textfile over a FIFO or a pipe on a loop: its reads never hold the loop up.

The writers here are coroutines of the loop the source runs on: a read or an
open that blocked the loop would keep them from ever writing, and the run
would hang (each test runs its loop in a thread it joins with a guard).
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from streams import Stream

GUARD = 30.0  # seconds: reached only when the loop is blocked (the behaviour under test broken)


def run_on_a_thread(main: Callable[[], Coroutine[Any, Any, Any]], fifo: Path) -> Any:
    """``asyncio.run(main())`` on a thread; a loop it leaves blocked fails the test."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(asyncio.run(main())), daemon=True)
    thread.start()
    thread.join(GUARD)
    if thread.is_alive():  # blocked in the FIFO's open or read: free it, then fail
        with open(fifo, "wb"):
            pass
        thread.join(GUARD)
        pytest.fail("the loop was blocked by the FIFO")
    return result[0]


class Writer:
    """The FIFO's writing end, opened and written without blocking (a reader is there)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    async def once_read(cls, fifo: Path) -> Writer:
        """The writing end, once the source has the FIFO open (until then there is none)."""
        while True:
            try:
                return cls(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
            await asyncio.sleep(0)

    def write(self, data: bytes) -> None:
        os.write(self.fd, data)

    def close(self) -> None:
        os.close(self.fd)


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition()`` holds (the source's progress, not a time)."""
    while not condition():
        await asyncio.sleep(0)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "lines.fifo"
    os.mkfifo(path)
    return path


def test_a_fifo_read_once_on_a_loop_leaves_the_loop_free(fifo: Path) -> None:
    async def main() -> list[str]:
        source = Stream.from_textfile(str(fifo), follow=False)
        out = source.sink_to_list()
        run = source.start()
        writer = await Writer.once_read(fifo)
        writer.write(b"a\nb")
        await until(lambda: out == ["a\n"])  # "b" waits for its delimiter, the loop runs
        writer.write(b"c\n")
        writer.close()
        await run
        return out

    assert run_on_a_thread(main, fifo) == ["a\n", "bc\n"]


def test_following_a_fifo_reads_each_writer_and_stop_loses_nothing(fifo: Path) -> None:
    async def main() -> tuple[list[str], list[str]]:
        source = Stream.from_textfile(str(fifo), follow=True, poll_interval=0.01)
        out = source.sink_to_list()
        source.start()
        first = await Writer.once_read(fifo)
        first.write(b"one\n")
        first.close()
        await until(lambda: out == ["one\n"])
        second = await Writer.once_read(fifo)
        second.write(b"two\nthr")
        await until(lambda: len(out) == 2)
        await source.stop()  # returns with the FIFO silent
        stopped = list(out)
        second.write(b"ee\nfour\n")
        second.close()
        run = source.start()
        await until(lambda: len(out) == 4)
        await source.stop()
        await run
        return stopped, out

    stopped, out = run_on_a_thread(main, fifo)
    assert stopped == ["one\n", "two\n"]
    assert out == ["one\n", "two\n", "three\n", "four\n"]


def test_a_pipe_object_with_another_delimiter_ends_with_its_writer() -> None:
    read, write = os.pipe()

    async def main() -> list[str]:
        with os.fdopen(read, "rb") as f:
            source = Stream.from_textfile(f, delimiter=";")
            out = source.sink_to_list()
            run = source.start()
            os.write(write, "é;b;c".encode())
            await until(lambda: len(out) == 2)
            os.close(write)
            await run
            assert not f.closed  # the caller's file stays open
        return out

    assert asyncio.run(asyncio.wait_for(main(), GUARD)) == ["é;", "b;", "c"]
