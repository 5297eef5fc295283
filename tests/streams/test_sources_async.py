"""Async sources on real components: loopback sockets, a Tornado server, subprocesses.

Timing comes from events and the virtual clock; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from pathlib import Path
from typing import Any

import pytest

from streams import Stream, VirtualClock


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


# -- from_periodic -----------------------------------------------------------------


def test_periodic_calls_on_the_clock_and_stops(clock: VirtualClock) -> None:
    calls = iter(range(100))
    source = Stream.from_periodic(lambda: next(calls), poll_interval=0.5)
    L = source.sink_to_list()

    async def main() -> None:
        source.start()
        await clock.advance_async(1.0)
        assert L == [0, 1, 2]
        source.stop()
        await clock.advance_async(5.0)

    asyncio.run(main())
    assert L == [0, 1, 2]


def test_periodic_waits_for_a_slow_downstream(clock: VirtualClock) -> None:
    async def slow(x: int) -> None:
        await clock.sleep(2.0)

    async def tick() -> str:
        return "t"

    source = Stream.from_periodic(tick, poll_interval=0.5)
    L = source.sink_to_list()
    source.sink(slow)

    async def main() -> None:
        source.start()
        await clock.advance_async(2.4)
        assert L == ["t"]  # the next call waits for the sink (2s) then 0.5s
        await clock.advance_async(0.1)
        assert L == ["t", "t"]
        source.stop()

    asyncio.run(main())


def test_periodic_without_a_loop_runs_on_the_loop_thread() -> None:
    # issue 15: as in streamz, a plain script's from_periodic(...).start() works.
    import threading

    from streams.loop_thread import io_loop

    calls = iter(range(1000))
    source = Stream.from_periodic(lambda: next(calls), poll_interval=0.001)
    two = threading.Event()
    seen: list[tuple[int, str]] = []

    def record(x: int) -> None:
        seen.append((x, threading.current_thread().name))
        if len(seen) == 2:
            two.set()

    source.sink(record)
    source.start()
    assert two.wait(30)
    source.stop()
    assert seen[:2] == [(0, "streams-loop"), (1, "streams-loop")]
    assert source.loop is io_loop()
    with pytest.raises(ValueError, match="poll_interval"):
        Stream.from_periodic(lambda: 1, poll_interval=0)


def test_from_q_takes_what_another_thread_puts_and_goes_on_after_a_stop() -> None:
    # streamz's from_q: a queue.Queue another thread fills; here each item is
    # handed over as it is put, on the loop thread as in streamz.
    import queue
    import threading

    q: queue.Queue[int] = queue.Queue()
    source = Stream.from_q(q, sleep_time=0.005)
    three = threading.Event()
    seen: list[tuple[int, str]] = []

    def record(x: int) -> None:
        seen.append((x, threading.current_thread().name))
        if len(seen) == 3:
            three.set()

    source.sink(record)
    run = source.start()
    producer = threading.Thread(target=lambda: [q.put(i) for i in range(3)])
    producer.start()
    producer.join()
    assert three.wait(30)
    source.stop()
    run.result(30)  # the run ends within sleep_time of the stop, the queue empty
    assert seen == [(i, "streams-loop") for i in range(3)]
    q.put(3)  # put while stopped: left in the queue, for the next run
    assert q.qsize() == 1
    three.clear()
    seen.clear()
    source.start()
    q.put(4)
    q.put(5)
    assert three.wait(30)
    source.stop()
    assert [x for x, _ in seen] == [3, 4, 5]
    with pytest.raises(TypeError, match=r"from_q\(\) takes a queue\.Queue"):
        Stream.from_q([1, 2])
    with pytest.raises(ValueError, match="sleep_time"):
        Stream.from_q(q, sleep_time=0)


def test_from_q_over_a_full_queue_lets_the_loop_run_other_tasks() -> None:
    import queue

    async def main() -> tuple[int, int]:
        q: queue.Queue[int] = queue.Queue()
        for i in range(5000):
            q.put(i)
        source = Stream.from_q(q)
        out = source.sink_to_list()
        through: list[int] = []

        async def other() -> None:
            await asyncio.sleep(0)
            through.append(len(out))

        task = asyncio.ensure_future(other())
        source.start()
        await task
        while len(out) < 5000:
            await asyncio.sleep(0)
        source.stop()
        return through[0], len(out)

    seen_by_other, total = asyncio.run(main())
    assert seen_by_other < total == 5000  # the other task ran before the queue was empty


# -- from_textfile, following ------------------------------------------------------


def test_textfile_follows_a_growing_file(tmp_path: Path, clock: VirtualClock) -> None:
    path = tmp_path / "log.txt"
    path.write_text("a\nb\n")
    source = Stream.from_textfile(str(path), poll_interval=1.0)
    L = source.sink_to_list()

    async def main() -> None:
        source.start()
        await settle()
        assert L == ["a\n", "b\n"]
        with path.open("a") as f:
            f.write("c\nparti")
        await clock.advance_async(1.0)
        assert L == ["a\n", "b\n", "c\n"]  # the partial line waits for its end
        with path.open("a") as f:
            f.write("al\n")
        await clock.advance_async(1.0)
        assert L == ["a\n", "b\n", "c\n", "partial\n"]
        with path.open("a") as f:
            f.write("sto")
        await clock.advance_async(1.0)
        source.stop()  # with "sto" read but not emitted
        await clock.advance_async(1.0)
        with path.open("a") as f:
            f.write("pped\n")
        task = source.start()  # resumes from the last emitted line
        await clock.advance_async(1.0)
        assert L[-1] == "stopped\n"
        source.stop()
        await clock.advance_async(1.0)
        await task

    asyncio.run(main())


# -- from_tcp ---------------------------------------------------------------------


def test_tcp_lines_from_several_loopback_clients() -> None:
    async def main() -> list[bytes]:
        source = Stream.from_tcp(0)
        L = source.sink_to_list()
        source.start()
        assert source.port > 0
        writers = []
        for name in (b"x", b"y"):
            _, w = await asyncio.open_connection("127.0.0.1", source.port)
            w.write(name + b"1\n" + name + b"2\n")
            await w.drain()
            writers.append(w)
        while len(L) < 4:
            await asyncio.sleep(0)  # waiting for the server's reads, not for time
        for w in writers:
            w.close()
            await w.wait_closed()
        source.stop()
        return L

    L = asyncio.run(main())
    assert sorted(L) == [b"x1\n", b"x2\n", b"y1\n", b"y2\n"]
    assert L.index(b"x1\n") < L.index(b"x2\n") and L.index(b"y1\n") < L.index(b"y2\n")


def test_tcp_reads_the_next_line_only_when_downstream_is_done() -> None:
    async def main() -> None:
        gate = asyncio.Event()
        seen: list[bytes] = []

        async def slow(x: bytes) -> None:
            seen.append(x)
            await gate.wait()

        source = Stream.from_tcp(0, delimiter=b";")
        source.sink(slow)
        source.start()
        _, w = await asyncio.open_connection("127.0.0.1", source.port)
        w.write(b"a;b;c;")
        await w.drain()
        while not seen:
            await asyncio.sleep(0)
        await settle()
        assert seen == [b"a;"]  # b and c wait in the socket: backpressure
        gate.set()
        while len(seen) < 3:
            await asyncio.sleep(0)
        assert seen == [b"a;", b"b;", b"c;"]
        w.close()
        source.stop()

    asyncio.run(main())


def test_tcp_without_a_loop_serves_from_the_loop_thread() -> None:
    # issue 15: Stream.from_tcp(port).start() in a plain script, as in streamz.
    import socket
    import threading

    source = Stream.from_tcp(0)
    got = threading.Event()
    L = source.sink_to_list()
    source.sink(lambda _: got.set())
    source.start()
    assert source.server is not None
    with socket.create_connection(("127.0.0.1", source.port)) as sock:
        sock.sendall(b"hello\n")
        assert got.wait(30)
    source.stop()
    assert source.server is None
    assert L == [b"hello\n"]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", source.port)).close()


def test_tcp_checks_its_delimiter() -> None:
    with pytest.raises(ValueError, match="delimiter"):
        Stream.from_tcp(0, delimiter="\n")  # type: ignore[arg-type]


# -- from_http_server --------------------------------------------------------------


def test_http_post_bodies_become_elements_and_responses_wait() -> None:
    from tornado.httpclient import AsyncHTTPClient

    async def main() -> None:
        gate, entered = asyncio.Event(), asyncio.Event()
        done: list[bytes] = []

        async def slow(x: bytes) -> None:
            entered.set()
            await gate.wait()
            done.append(x)

        source = Stream.from_http_server(0, path="/in")
        source.sink(slow)
        source.start()
        client = AsyncHTTPClient(force_instance=True)
        url = f"http://127.0.0.1:{source.port}/in"
        response = asyncio.ensure_future(client.fetch(url, method="POST", body=b"one"))
        await entered.wait()
        await settle()
        assert not response.done()  # the response waits for the pipeline
        gate.set()
        r = await response
        assert r.code == 200 and done == [b"one"]
        missing = await client.fetch(f"http://127.0.0.1:{source.port}/other", method="POST",
                                     body=b"x", raise_error=False)
        assert missing.code == 404
        client.close()
        source.stop()

    asyncio.run(main())


def test_http_pipeline_failure_answers_500() -> None:
    from tornado.httpclient import AsyncHTTPClient

    async def main() -> Any:
        source = Stream.from_http_server(0)
        source.map(int).sink_to_list()
        source.start()
        client = AsyncHTTPClient(force_instance=True)
        url = f"http://127.0.0.1:{source.port}/"
        ok = await client.fetch(url, method="POST", body=b"12")
        bad = await client.fetch(url, method="POST", body=b"twelve", raise_error=False)
        client.close()
        source.stop()
        return ok.code, bad.code, bad.body

    ok, bad, body = asyncio.run(main())
    assert (ok, bad) == (200, 500)
    assert b"NodeError" in body and b"map(int)" in body


# -- from_process -------------------------------------------------------------------


def test_process_lines_then_close_flushes_downstream() -> None:
    script = "import sys\nfor i in range(5): print(i)\nsys.stdout.write('end')"
    source = Stream.from_process([sys.executable, "-c", script])
    L = source.map(bytes.decode).partition(2).sink_to_list()
    source.start()  # no loop: runs the process to its end
    assert L == [("0\n", "1\n"), ("2\n", "3\n"), ("4\n", "end")]
    assert source.returncode == 0


def test_process_on_the_loop_with_stderr_and_stop() -> None:
    script = ("import sys, time\nsys.stderr.write('err\\n'); sys.stderr.flush()\n"
              "print('out', flush=True)\nsys.stdin.read()")  # then waits forever

    async def main() -> list[bytes]:
        source = Stream.from_process([sys.executable, "-c", script], with_stderr=True,
                                     open_kwargs={"stdin": asyncio.subprocess.PIPE})
        L = source.sink_to_list()
        task = source.start()
        while len(L) < 2:
            await asyncio.sleep(0)
        source.stop()  # terminates the process
        await task
        assert source.returncode is not None and source.returncode != 0
        return L

    assert sorted(asyncio.run(main())) == [b"err\n", b"out\n"]


def test_tcp_sender_is_held_back_by_a_slow_pipeline() -> None:
    """Socket-level backpressure: while downstream is busy nothing more is read,
    so the kernel buffers fill and a non-blocking sender gets EWOULDBLOCK."""
    import socket

    total = 64 * 2**20

    async def main() -> tuple[int, int]:
        gate, entered = asyncio.Event(), asyncio.Event()
        lines = 0

        async def slow(x: bytes) -> None:
            nonlocal lines
            entered.set()
            await gate.wait()
            lines += 1

        source = Stream.from_tcp(0)
        source.sink(slow)
        source.start()
        sock = socket.create_connection(("127.0.0.1", source.port))
        sock.setblocking(False)
        chunk = (b"x" * 1023 + b"\n") * 64
        sent, refused = 0, 0
        while sent < total and refused < 200:  # 200 loop turns without progress
            try:
                sent += sock.send(chunk)
                refused = 0
            except BlockingIOError:
                refused += 1
                await asyncio.sleep(0)  # the server gets every chance to read
        await entered.wait()
        held = sent
        gate.set()
        sock.close()
        # A last line cut short by send() is emitted too, when the connection ends.
        while lines < -(-held // 1024):
            await asyncio.sleep(0)
        await source.stop()
        return held, lines

    held, lines = asyncio.run(main())
    assert held < 64 * 2**20  # the sender was stopped long before sending it all
    assert lines == -(-held // 1024)  # and nothing it did send was lost


_WRITER = """
import os, select, sys
flag, total = sys.argv[1], 64 * 2**20
os.set_blocking(1, False)
sent = 0
while sent < total:
    try:
        sent += os.write(1, (b"x" * 1023 + b"\\n") * 64)
    except BlockingIOError:
        # Full pipe. A reader that keeps reading frees it again at once; one
        # that has stopped never does (the wait only bounds how long we look).
        if not select.select([], [1], [], 0.5)[1]:
            break
open(flag, "w").close()
os.set_blocking(1, True)
if sent % 1024:
    os.write(1, b"x" * (1023 - sent % 1024) + b"\\n")
os.write(1, b"sent %d\\n" % sent)
"""


def test_process_is_held_back_by_a_slow_pipeline(tmp_path: Path) -> None:
    """The process's writes stop (EAGAIN on its stdout) while downstream is busy."""
    flag = tmp_path / "blocked"

    async def main() -> list[bytes]:
        gate = asyncio.Event()

        async def slow(x: bytes) -> None:
            await gate.wait()

        source = Stream.from_process([sys.executable, "-c", _WRITER, str(flag)])
        L = source.sink_to_list()
        source.sink(slow)
        task = source.start()
        while not flag.exists():  # the writer reports its pipe full: an event, not a delay
            await asyncio.sleep(0)
        gate.set()
        await task
        return L

    L = asyncio.run(main())
    sent = int(L[-1].split()[1])
    assert sent < 64 * 2**20  # held back long before writing everything
    assert len(L) - 1 == -(-sent // 1024)  # every line it wrote came through


def test_a_run_cancelled_by_an_interrupt_is_stopped_and_starts_again() -> None:
    """A notebook's interrupt of `await source.start()` cancels the run: the source is
    stopped, `await source.stop()` does not raise, and start() runs it again from where
    it stands (it returned the cancelled run, and raised CancelledError at once)."""

    async def main() -> tuple[bool, list[int], bool]:
        source = Stream.from_iterable(itertools.count())
        seen = source.sink_to_list()
        run = source.start()
        while len(seen) < 10:
            await asyncio.sleep(0)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        stopped = source.stopped
        await source.stop()
        n = len(seen)
        again = source.start()
        while len(seen) < n + 10:
            await asyncio.sleep(0)
        await source.stop()
        return stopped, seen, again is not run

    stopped, seen, new_run = asyncio.run(main())
    assert stopped and new_run
    assert seen == list(range(len(seen)))  # nothing lost or repeated across the interrupt
