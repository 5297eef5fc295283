"""Exceptions raised on workers reach the user through the core's policies."""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from functools import partial
from operator import add
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, Event

from streams import NodeError, Stream
from streams_dask import DaskTaskError
from tests.polling import wait_until


def invert(x: int) -> float:
    return 10 // x


def run(data: list[int], build: Any) -> None:
    source: Stream[Any] = Stream()
    build(source)
    for x in data:
        source.emit(x)
    source.close()


@pytest.mark.dask
@pytest.mark.parametrize(("options", "delivered"), [
    # Each emit waits for its results (streamz): the error surfaces from the
    # emit of 0, as in-process, and 5 is never emitted.
    ({}, [10, 5]),
    # Batched: the error surfaces once its result comes back, after 5 was
    # accepted; every other element still goes through, in order.
    ({"batch_size": 1000}, [10, 5, 2]),
])
def test_worker_exception_names_the_node_and_the_element(
        client: Client, options: dict[str, Any], delivered: list[int]) -> None:
    out: list[Any] = []
    nodes: dict[str, Any] = {}

    def build(source: Stream[Any]) -> None:
        node = source.scatter(client=client, **options).map(invert, stream_name="invert")
        nodes["map"] = node
        node.gather().sink(out.append)

    with pytest.raises(NodeError) as info:
        run([1, 2, 0, 5], build)
    err = info.value
    assert err.node is nodes["map"]
    assert err.element == 0
    assert isinstance(err.error, ZeroDivisionError)
    assert "map(invert) 'invert' failed on element 0: ZeroDivisionError" in str(err)
    assert out == delivered


def held_back(event: str, x: int) -> float:
    """:func:`invert`, once the Dask event ``event-x`` is set (for 0 and 5)."""
    if x in (0, 5):
        Event(f"{event}-{x}").wait()
    return invert(x)


@pytest.mark.dask
def test_an_error_raised_between_emits_loses_nothing_after_it(client: Client) -> None:
    # Batched, results are replayed as their tasks finish, in distributed's
    # callback thread; a "raise" there waits for the producer's next call,
    # here the close, which must still replay every result after it.
    name = f"held-{uuid.uuid4().hex}"
    source: Stream[Any] = Stream()
    scatter: Any = source.scatter(client=client, batch_size=4)
    out = scatter.map(partial(held_back, name), stream_name="invert").gather().sink_to_list()
    source.emit(0)  # in a task of its own, which waits
    source.emit(5)  # in the next one, which waits too
    runner: Any = scatter._runner
    Event(f"{name}-0", client=client).set()
    wait_until(lambda: runner.background_errors)  # 0 failed, replayed in the background

    def release() -> None:
        wait_until(lambda: runner.closed)  # the close waits for 5
        Event(f"{name}-5", client=client).set()

    releaser = threading.Thread(target=release)
    releaser.start()
    try:
        with pytest.raises(NodeError) as info:
            source.close()
    finally:  # a close that did not wait must not leave a worker waiting
        Event(f"{name}-5", client=client).set()
        releaser.join()
    assert info.value.element == 0
    assert out == [2]


@pytest.mark.dask
def test_skip_policy_logs_and_matches_in_process(client: Client,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    data = [3, 0, 1, 0, 2]
    expected: list[Any] = []
    run(data, lambda s: s.map(invert).on_error("skip").scan(add).sink(expected.append))
    got: list[Any] = []
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="streams"):
        run(data, lambda s: s.scatter(client=client, batch_size=2).map(invert)
            .on_error("skip").scan(add).gather().sink(got.append))
    assert got == expected == [3, 13, 18]
    assert sum("failed on element 0" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.dask
def test_route_policy_sends_records_in_order(client: Client) -> None:
    def build(events: list[Any], lift: Any, lower: Any) -> Any:
        def _(source: Stream[Any]) -> None:
            node = lift(source).map(invert).on_error("route")
            node.errors.sink(lambda r: events.append(("error", r.element,
                                                      type(r.exception).__name__)))
            lower(node.scan(lambda a, b: a + b if b < 5 else 1 // 0).on_error("route")
                  ).sink(lambda x: events.append(("ok", x)))
        return _

    data = [1, 0, 2, 4, 0, 5, 10]
    expected: list[Any] = []
    run(data, build(expected, lambda s: s, lambda n: n))
    got: list[Any] = []
    run(data, build(got, lambda s: s.scatter(client=client, batch_size=3), lambda n: n.gather()))
    assert got == expected
    assert ("error", 0, "ZeroDivisionError") in got


@pytest.mark.dask
def test_error_stream_record_names_the_real_node(client: Client) -> None:
    source: Stream[Any] = Stream()
    node = source.scatter(client=client).map(invert).on_error("route")
    records = node.errors.sink_to_list()
    node.gather().sink_to_list()
    source.emit(0)
    source.close()
    (record,) = records
    assert record.node is node and record.element == 0


@pytest.fixture
def only_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A module only this process can import: its function pickles by
    reference here and cannot be unpickled on the workers."""
    (tmp_path / "only_here.py").write_text("def double(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield importlib.import_module("only_here")
    finally:
        sys.modules.pop("only_here", None)


@pytest.mark.dask
def test_a_failing_task_is_reported_naming_the_segment(client: Client, only_here: Any) -> None:
    source: Stream[Any] = Stream()
    source.scatter(client=client, stream_name="remote").map(only_here.double)\
        .gather().sink_to_list()
    with pytest.raises(DaskTaskError, match=r"scatter.*'remote'.*not processed"):
        for x in range(3):
            source.emit(x)
        source.close()


@pytest.mark.dask
@pytest.mark.parametrize("stateful", [False, True], ids=["stateless", "stateful"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_after_a_failed_task_each_emit_reports_one(
        cluster: Any, client: Client, only_here: Any, stateful: bool,
        asynchronous: bool) -> None:
    # The elements after a failed task do not wait behind it for ever: a
    # stateless stage's next tasks run (and fail too, here), a stateful
    # stage's chain of states is cut, and each later call raises its failure.
    def build(source: Stream[Any], on: Client) -> None:
        node = source.scatter(client=on, stream_name="remote").map(only_here.double)
        if stateful:
            node = node.scan(add, start=0)
        node.gather().sink_to_list()

    failed = r"scatter.*'remote'.*not processed"
    # A stateful stage never reached its end (its states went with the chain).
    closing = pytest.raises(DaskTaskError, match=failed) if stateful else nullcontext()
    if not asynchronous:
        source: Stream[Any] = Stream()
        build(source, client)
        for x in range(4):
            with pytest.raises(DaskTaskError, match=failed):
                source.emit(x)
        with closing:
            source.close()
        return

    async def main() -> None:
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as on:
            source: Stream[Any] = Stream(asynchronous=True)
            build(source, on)
            for x in range(4):
                with pytest.raises(DaskTaskError, match=failed):
                    await source.emit(x)
            with closing:
                await source.aclose()

    asyncio.run(main())


def _no_groups(group: Any) -> Any:
    raise ValueError("no groups")


@pytest.mark.dask
def test_every_gather_ends_when_closing_below_the_first_one_fails(client: Client) -> None:
    # The first gather()'s downstream failed as it closed (a partition flushing
    # into a failing map): the second gather() was never closed, and the
    # partition below it kept its elements.
    source: Stream[Any] = Stream()
    scattered = source.scatter(client=client).map(str)
    scattered.gather().partition(5).map(_no_groups)
    held = scattered.gather().partition(5).sink_to_list()
    source.emit(1)
    with pytest.raises(NodeError, match="no groups"):
        source.close()
    assert held == [("1",)]
