"""A synchronous emit into a node given a loop runs on that loop (streamz's ``loop=``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from tornado.ioloop import IOLoop

from streams import Stream
from streams.loop_thread import io_loop
from streams.operators.transform import Map
from tests.polling import wait_until


def thread_name(_: Any) -> str:
    return threading.current_thread().name


def test_an_emit_from_another_thread_runs_the_graph_on_the_loop_given() -> None:
    source = Stream(loop=io_loop())  # running in the library's loop thread
    ran = source.map(thread_name).sink_to_list()
    source.emit(1)
    assert ran == ["streams-loop"]


def test_a_coroutine_sink_reaches_what_waits_on_that_loop() -> None:
    """A Tornado service's queue on its loop, fed from a worker thread: the coroutine
    sink runs on that loop (a queue is not thread-safe), and a consumer there wakes."""
    loop = io_loop()
    queue: asyncio.Queue[int] = asyncio.run_coroutine_threadsafe(
        _make_queue(), loop.asyncio_loop).result()
    consumed: list[int] = []

    async def consume() -> None:
        while True:
            consumed.append(await queue.get())

    task = asyncio.run_coroutine_threadsafe(consume(), loop.asyncio_loop)
    threads = []

    async def put(x: int) -> None:
        threads.append(threading.current_thread().name)
        await queue.put(x)

    source = Stream(loop=loop)
    source.sink(put)
    for i in range(3):
        source.emit(i)
    wait_until(lambda: len(consumed) == 3)
    task.cancel()
    assert consumed == [0, 1, 2]
    assert threads == ["streams-loop"] * 3


async def _make_queue() -> asyncio.Queue[int]:
    return asyncio.Queue()


class Later(Stream[Any]):
    """A node written as streamz's operators are: it schedules on ``self.loop``."""

    _local_only = None

    def __init__(self, upstream: Stream[Any], **kwargs: Any) -> None:
        Stream.__init__(self, upstream, ensure_io_loop=True, **kwargs)

    def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
        self.loop.call_later(0, self._emit, x)  # not thread-safe: must run on the loop


def test_a_node_scheduling_on_its_loop_gets_its_emits_there_from_upstream() -> None:
    source = Stream()  # no loop: given the node's below it, as streamz gives it
    out = Later(source).sink_to_list()
    for i in range(3):
        source.emit(i)
    wait_until(lambda: len(out) == 3)
    assert out == [0, 1, 2]
    assert source.loop is not None


def test_on_the_loops_own_thread_and_asynchronously_it_runs_in_place() -> None:
    async def main() -> list[str]:
        source = Stream(loop=IOLoop.current())
        ran = source.map(thread_name).sink_to_list()
        source.emit(1)  # on the loop's thread: in place, no wait on itself
        await source.emit(2, asynchronous=True)
        return ran

    assert asyncio.run(main()) == [threading.current_thread().name] * 2


def test_a_loop_that_is_not_running_leaves_the_emit_in_the_caller() -> None:
    loop = IOLoop(make_current=False)  # never started: waiting on it would never end
    try:
        source = Stream(loop=loop)
        ran = source.map(thread_name).sink_to_list()
        source.emit(1)
        assert ran == [threading.current_thread().name]
    finally:
        loop.close()


def test_an_error_on_the_loop_reaches_the_emitting_thread_with_its_type() -> None:
    source = Stream(loop=io_loop())
    source.map(lambda x: 1 / x).sink(print)
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        source.emit(0)


def test_nodes_without_a_loop_keep_their_class() -> None:
    """Their emit is not wrapped: the hop costs nothing where no loop was given."""
    source = Stream()
    node = source.map(str)
    assert type(node) is Map
    assert type(Stream(loop=io_loop()).map(str)) is Map  # downstream: not fed by emit
