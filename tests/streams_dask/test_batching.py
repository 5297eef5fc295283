"""How elements become tasks: slow start, partial batches, the bound on the cluster.

Tasks here wait on a ``distributed.Event`` until the test releases them,
so which tasks are unfinished is decided by the test, not by timing.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from distributed import Client, Event, LocalCluster

import streams_dask  # noqa: F401 - registers scatter()
from streams import Stream
from streams_dask.batch_sizes import FIRST_BATCH, GROWTH
from streams_dask.runner import Runner
from streams_dask.worker import Batch

#: Longest a task waits for its release (a failing test must not hang the cluster).
HOLD_SECONDS = 120


def held(name: str, only: int | None, x: int) -> int:
    """``x + 1`` once event ``name`` is set (every element, or only ``only``)."""
    if (only is None or x == only) and not Event(name).wait(timeout=HOLD_SECONDS):
        raise TimeoutError(f"event {name} was never set")
    return x + 1


@pytest.fixture
def release(client: Client) -> Iterator[Event]:
    """An event the tasks of a test wait for; set at the end whatever happens."""
    event = Event(f"release-{uuid.uuid4().hex}", client=client)
    try:
        yield event
    finally:
        event.set()


@pytest.mark.dask
def test_partial_batches_wait_while_every_thread_has_a_task_queued(
        client: Client, release: Event) -> None:
    # Two worker threads: the first four elements leave alone (one running
    # and one queued task per thread); then only full batches go, of
    # FIRST_BATCH elements since no run time is known yet.
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client, max_in_flight=8)
    out = scatter.map(partial(held, release.name, None)).gather().sink_to_list()
    n = 4 + 4 * FIRST_BATCH + 3
    for x in range(n):
        source.emit(x)
    runner = scatter._runner
    assert runner is not None
    assert [len(items) for _, items in runner.in_flight] == [1, 1, 1, 1] + [FIRST_BATCH] * 4
    assert len(runner.pending) == 3
    release.set()
    source.close()
    assert out == [x + 1 for x in range(n)]


@pytest.mark.dask
def test_results_held_for_a_running_head_do_not_stop_submission(
        client: Client, release: Event) -> None:
    # Element 0 runs until released; the tasks after it finish on the other
    # worker. Their results wait for it (input order), but the cluster gets
    # the next batches: with one bound for both, emit(2) would wait for 0.
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client, batch_size=1, max_in_flight=2)
    out = scatter.map(partial(held, release.name, 0)).gather().sink_to_list()
    for x in range(4):
        source.emit(x)
    runner = scatter._runner
    assert runner is not None
    assert runner.count() == 4
    assert runner.running() <= 2
    assert out == []
    release.set()
    source.close()
    assert out == [1, 2, 3, 4]


@pytest.mark.dask
def test_await_emit_goes_on_while_results_wait_for_a_running_head(
        cluster: LocalCluster) -> None:
    name = f"release-{uuid.uuid4().hex}"

    async def main() -> list[Any]:
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as client:
            event = Event(name, client=client)
            try:
                source: Stream[Any] = Stream(asynchronous=True)
                scatter = source.scatter(client=client, batch_size=1, max_in_flight=2)
                out = scatter.map(partial(held, name, 0)).gather().sink_to_list()
                for x in range(4):
                    await source.emit(x)
                runner = scatter._runner
                assert runner is not None
                assert runner.count() == 4
                assert out == []
            finally:
                await event.set()
            await source.aclose()
            return out

    assert asyncio.run(main()) == [1, 2, 3, 4]


@pytest.mark.dask
def test_batches_start_small_and_grow_by_measured_steps(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fast producer: without the slow start, the first task would carry
    # batch_size elements before anything is known of the function's cost.
    sizes: list[tuple[int, int]] = []  # (batch size, largest measured before it)
    submit = Runner._submit

    def spy(self: Runner, batch: list[Any], close: bool) -> None:
        sizes.append((len(batch), self.sizes.largest))
        submit(self, batch, close)

    monkeypatch.setattr(Runner, "_submit", spy)
    source: Stream[Any] = Stream()
    out = source.scatter(client=client, batch_size=1000).map(abs).gather().sink_to_list()
    n = 3000
    for x in range(n):
        source.emit(-x)
    source.close()
    assert out == list(range(n))
    assert sizes[0][0] <= FIRST_BATCH
    for size, largest in sizes:
        assert size <= (GROWTH * largest if largest else FIRST_BATCH)
    assert max(size for size, _ in sizes) > FIRST_BATCH  # it did grow


def test_a_batch_is_read_only_where_it_runs(client: Client) -> None:
    # The scheduler unpickles what it is sent and pickles it again for the
    # worker: a batch crosses it as bytes. Its element here cannot be
    # unpickled in this process (the scheduler's, with a LocalCluster).
    here = os.getpid()

    def rebuilt(pid: int) -> str:
        if os.getpid() == pid:
            raise RuntimeError("unpickled in the client's process")
        return "elsewhere"

    class Elsewhere:
        def __reduce__(self) -> Any:
            return (rebuilt, (here,))

    batch = Batch([Elsewhere(), 2])
    assert client.submit(lambda b: b.items[0], batch, pure=False).result() == "elsewhere"
    assert client.submit(lambda b: b.items[1], batch, pure=False).result() == 2
    with pytest.raises(RuntimeError, match="client's process"):
        pickle.loads(pickle.dumps(batch)).items
