"""The loop thread (issue 15): started only where streamz code needs one, logged once.

Each scenario runs in a fresh interpreter, so whether a thread was started
is not hidden by an earlier test having started it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


def test_synchronous_operators_start_no_thread() -> None:
    out = run("""
        import threading
        from streams import Stream
        source = Stream()
        L = source.map(abs).partition(2).sliding_window(2).sink_to_list()
        for i in range(5):
            source.emit(i)
        source.close()
        print(L, threading.active_count())
    """)
    assert out.split()[-1] == "1"


def test_code_on_a_running_loop_starts_no_thread() -> None:
    out = run("""
        import asyncio, threading
        from streams import Stream
        async def main():
            source = Stream(asynchronous=True)
            L = source.partition(10, timeout=0.001).sink_to_list()
            got = asyncio.Event()
            source.partition(10, timeout=0.001).sink(lambda _: got.set())
            await source.emit(1)
            await asyncio.wait_for(got.wait(), 60)
            print(L, threading.active_count())
        asyncio.run(main())
    """)
    assert out.split()[-1] == "1"
    assert "[(1,)]" in out


def test_a_timer_with_no_loop_runs_on_one_thread_logged_once() -> None:
    out = run("""
        import logging, threading
        from streams import Stream
        logging.basicConfig(level=logging.INFO, format="LOG %(name)s %(message)s")
        done = threading.Event()
        source = Stream()
        L = source.partition(10, timeout=0.001).sink_to_list()
        source.partition(10, timeout=0.001).sink(lambda _: done.set())
        source.emit(1)
        assert done.wait(60)
        done.clear()
        source.emit(2)
        assert done.wait(60)
        print(L, [t.name for t in threading.enumerate()])
    """)
    assert out.count("LOG streams started an event loop in a daemon thread") == 1
    assert "'streams-loop'" in out


def test_a_finite_source_of_real_time_nodes_runs_on_the_loop_thread() -> None:
    # streamz's test_from_iterable_backpressure: start() returns at once and
    # rate_limit paces the source from the loop thread.
    out = run("""
        import concurrent.futures, threading
        from streams import Stream
        source = Stream.from_iterable(range(4))
        seen = []
        source.rate_limit(0.001).sink(lambda x: seen.append(threading.current_thread().name))
        run = source.start()
        assert isinstance(run, concurrent.futures.Future), run
        run.result(timeout=60)
        print(sorted(set(seen)), len(seen))
    """)
    assert "['streams-loop'] 4" in out


def test_a_finite_source_of_event_time_windows_runs_here_to_the_end() -> None:
    # Event-time windows read the elements' time: no loop is needed, so the
    # run is synchronous and complete when start() returns, starting no thread.
    out = run("""
        import threading
        from streams import Stream
        source = Stream.from_iterable([1, 2, 11, 12, 25])
        tumbling = source.timed_window(10, time=float).sink_to_list()
        sessions = source.session_window(5, time=float).sink_to_list()
        print(source.start(), tumbling, sessions, threading.active_count())
    """)
    assert out.split("\n")[0] == "None [[1, 2], [11, 12], [25]] [[1, 2], [11, 12], [25]] 1"


@pytest.mark.parametrize("given", ["loop", "ensure_io_loop"])
def test_loop_and_ensure_io_loop_are_honoured(given: str) -> None:
    out = run(f"""
        import threading
        from tornado.ioloop import IOLoop
        from streams import Stream
        from streams.loop_thread import io_loop
        if {given!r} == "loop":
            loop = IOLoop(make_current=False)
            node = Stream(loop=loop)
            print(node.loop is loop, threading.active_count())
        else:
            node = Stream(ensure_io_loop=True)
            print(node.loop is io_loop(), threading.active_count())
    """)
    assert out.split() == (["True", "1"] if given == "loop" else ["True", "2"])


@pytest.mark.parametrize("node", ["delay(0.001)", "timed_window(0.001)"])
def test_a_plain_script_waits_for_an_async_sink_fed_from_the_loop_thread(node: str) -> None:
    # The timer sends on the loop thread, so the sink's work is a task of that
    # loop; the next emit() waits for it from its own private loop, which
    # must be woken across threads (it never was: emit() hung for good).
    out = run(f"""
        import asyncio, faulthandler, threading
        from streams import Stream
        faulthandler.dump_traceback_later(30, exit=True)  # a hang fails, with the stacks
        entered, out = threading.Event(), []
        async def slow(x):
            entered.set()
            await asyncio.sleep(0.01)
            out.append(x)
        source = Stream()
        source.{node}.sink(slow)
        source.emit(1)
        assert entered.wait(30)
        flat = lambda: [x for w in out for x in (w if isinstance(w, list) else [w])]
        source.emit(2)  # waits for the sink's work on the loop thread
        first = flat()[:1]
        source.close()
        print("first", first, "all", flat())
    """)
    assert out.split("\n")[0] == "first [1] all [1, 2]"
