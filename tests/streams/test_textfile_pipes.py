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


async def start_until(source: Stream[Any], out: list[Any], n: int) -> None:
    """Start ``source`` again, let it emit until ``out`` holds ``n``, then stop it."""
    run = source.start()
    await until(lambda: len(out) == n)
    await source.stop()
    await run


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
        await start_until(source, out, 4)
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


def test_dev_null_on_a_loop_is_read_as_a_file_and_ends() -> None:
    # epoll refuses it: taken for a pipe, the run waited for ever.
    async def main() -> tuple[list[str], list[str]]:
        text = Stream.from_textfile("/dev/null", follow=False)
        out = text.sink_to_list()
        await text.start()
        with open("/dev/null", "rb") as f:
            stdin = Stream.from_stdin(format="text", file=f)
            lines = stdin.sink_to_list()
            await stdin.start()
        return out, lines

    assert asyncio.run(asyncio.wait_for(main(), GUARD)) == ([], [])


def test_a_callers_pipe_after_its_header_loses_nothing_and_is_left_blocking() -> None:
    read, write = os.pipe()
    os.write(write, b"header\na\nb\n")

    async def main() -> tuple[str, list[str], bool]:
        with os.fdopen(read, "rb") as f:
            header = f.readline().decode()  # reads ahead into f's buffer: a and b
            source = Stream.from_textfile(f, follow=False)
            out = source.sink_to_list()
            run = source.start()
            os.write(write, b"c\n")
            await until(lambda: len(out) == 3)
            os.close(write)
            await run
            return header, out, os.get_blocking(f.fileno())

    assert asyncio.run(asyncio.wait_for(main(), GUARD)) == ("header\n", ["a\n", "b\n", "c\n"],
                                                            True)


def test_stop_at_once_after_start_does_not_wait_for_the_writer(fifo: Path) -> None:
    async def main() -> bool:
        source = Stream.from_textfile(str(fifo), follow=True)
        source.sink_to_list()
        source.start()
        await source.stop()  # while the run opens the FIFO and connects to it
        return source.stopped

    assert run_on_a_thread(main, fifo)


def test_a_line_longer_than_the_buffer_comes_whole_across_a_stop(fifo: Path) -> None:
    long = b"x" * 300_000  # several times what the reader holds before it waits

    async def main() -> list[str]:
        source = Stream.from_textfile(str(fifo), follow=True, poll_interval=0.01)
        out = source.sink_to_list()
        source.start()
        writer = await Writer.once_read(fifo)
        writer.write(b"short\n")
        await until(lambda: len(out) == 1)
        for i in range(0, len(long), 65_536):  # the pipe holds 64 KiB: write as it drains
            while True:
                try:
                    writer.write(long[i:i + 65_536])
                    break
                except BlockingIOError:
                    await asyncio.sleep(0)
        await source.stop()  # in the middle of the long line (its end not written yet)
        writer.write(b"\nlast\n")
        writer.close()
        await start_until(source, out, 3)
        return out

    assert run_on_a_thread(main, fifo) == ["short\n", long.decode() + "\n", "last\n"]


def test_a_checkpoint_restored_over_a_pipe_is_refused(tmp_path: Path, fifo: Path) -> None:
    from streams import CheckpointError

    source = Stream.from_textfile(str(fifo))
    source.sink_to_list()
    source.restore({"offset": 10, "_before": None})

    async def main() -> None:
        with pytest.raises(CheckpointError, match=r"cannot resume at byte 10: the file is a "
                                                  r"pipe, which cannot be read again"):
            await source.start()

    run_on_a_thread(main, fifo)
