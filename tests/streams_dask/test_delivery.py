"""When results reach ``gather()``: each ``emit`` (streamz), or as tasks finish.

A plain ``scatter()`` (streamz's call) returns from ``emit`` once the
element's results went through ``gather()``; ``buffer(n)`` in the segment, or
batching asked for, lets ``emit`` return once the element is accepted, with
at most ``n`` elements held, and results are delivered as their tasks finish.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from distributed import Client, Event, LocalCluster
from distributed.utils import sync

from streams import RefCounter, Stream


def inc(x: int) -> int:
    return x + 1


def held(x: int, name: str) -> int:
    """``x + 1`` once the event ``name`` is set."""
    if not Event(name).wait(timeout=60):
        raise TimeoutError(f"event {name} was never set")
    return x + 1


class Arrivals:
    """A sink's function: the values seen, and an event set once ``n`` arrived."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen: list[int] = []
        self.all_in = threading.Event()

    def __call__(self, x: int) -> None:
        self.seen.append(x)
        if len(self.seen) == self.n:
            self.all_in.set()


@pytest.mark.dask
def test_plain_scatter_delivers_each_result_before_emit_returns(client: Client) -> None:
    source: Stream[Any] = Stream()
    out = source.scatter(client=client).map(inc).scan(max).gather().sink_to_list()
    for x in range(6):
        source.emit(x)
        assert out == list(range(1, x + 2))  # before close(), before any later emit
    source.close()
    assert out == list(range(1, 7))


@pytest.mark.dask
def test_plain_scatter_await_emit_resolves_after_the_result(cluster: LocalCluster) -> None:
    async def main() -> list[Any]:
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as client:
            source: Stream[Any] = Stream(asynchronous=True)
            out = source.scatter(client=client).map(inc).gather().sink_to_list()
            for x in range(4):
                await source.emit(x)
                assert out == list(range(1, x + 2))
            await source.aclose()
            return out

    assert asyncio.run(main()) == [1, 2, 3, 4]


@pytest.mark.dask
def test_emit_asynchronous_from_the_clients_own_loop(client: Client) -> None:
    # streamz's idiom: a synchronous stream, emitted into from the client's
    # loop with asynchronous=True; blocking there would stop that very loop.
    source: Stream[Any] = Stream()
    out = source.scatter(client=client).map(inc).gather().sink_to_list()

    async def produce() -> None:
        for x in range(5):
            await source.emit(x, asynchronous=True)
            assert out == list(range(1, x + 2))

    sync(client.loop, produce)
    assert out == [1, 2, 3, 4, 5]
    source.close()  # from this thread: the end of stream runs on the client's loop
    assert out == [1, 2, 3, 4, 5]


@pytest.mark.dask
@pytest.mark.parametrize("n", [1, 3, 7])
def test_buffer_bounds_the_elements_held(client: Client, n: int) -> None:
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client)
    out = scatter.map(inc).buffer(n).gather().sink_to_list()
    for x in range(40):
        source.emit(x)
        runner = scatter._runner
        assert runner is not None
        assert runner.held() <= n
    source.close()
    assert out == list(range(1, 41))


@pytest.mark.dask
def test_buffered_results_arrive_while_the_producer_is_idle(client: Client) -> None:
    collect = Arrivals(10)
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client)
    scatter.map(inc).buffer(4).gather().sink(collect)
    for x in range(10):
        source.emit(x)
    # No close(), no further emit: results come as their tasks finish.
    assert collect.all_in.wait(timeout=60)
    assert collect.seen == list(range(1, 11))
    assert scatter.in_flight == 0
    source.close()
    assert collect.seen == list(range(1, 11))


@pytest.mark.dask
@pytest.mark.parametrize("options", [{"batch_size": 4}, {}])
def test_references_are_held_until_the_results_are_replayed(
        client: Client, options: dict[str, Any]) -> None:
    # streamz's RefCounter: an element's references are held while its
    # futures are in flight, so a source that waits for them knows when the
    # element is done (the tasks here wait for an Event: no timing).
    event = Event(f"release-{uuid.uuid4().hex}", client=client)
    released: list[bool] = []
    rc = RefCounter(cb=lambda: released.append(True))
    source: Stream[Any] = Stream()
    out = source.scatter(client=client, **options).map(held, event.name) \
        .gather().sink_to_list()
    if options:  # elements overlap: emit returns while the task waits
        source.emit(1, metadata=[{"ref": rc}])
        assert rc.count == 1 and out == []
        event.set()
        source.close()
    else:  # each emit waits for its results: the references too
        event.set()
        source.emit(1, metadata=[{"ref": rc}])
        assert out == [2]
        source.close()
    assert out == [2]
    assert rc.count == 0 and released == [True]


@pytest.mark.dask
def test_zip_of_two_segments_pairs_their_results_in_order(client: Client) -> None:
    # streamz's test_zip, synchronously, with one side batched: results reach
    # the zip as their tasks finish, and close() flushes what is in flight.
    a: Stream[Any] = Stream()
    b: Stream[Any] = Stream()
    left = a.scatter(client=client).map(inc)
    right = b.scatter(client=client, batch_size=3).map(str)
    out = left.zip(right).gather().sink_to_list()
    for x in range(10):
        a.emit(x)
        b.emit(x)
    a.close()
    b.close()
    assert out == [(x + 1, str(x)) for x in range(10)]


@pytest.mark.dask
def test_results_finishing_while_the_producer_holds_the_lock_keep_no_callback_waiting(
        client: Client) -> None:
    # distributed runs every done callback of the process on one thread, and
    # keeps each future until its callback has run. A delivery waiting there
    # for the producer's lock would hold up every callback behind it (and
    # keep their futures, and the results the scheduler keeps for them): it
    # is left to the producer instead, who delivers once it lets go.
    event = Event(f"release-{uuid.uuid4().hex}", client=client)
    collect = Arrivals(10)
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client, batch_size=2, max_in_flight=10)  # never full
    scatter.map(held, event.name).gather().sink(collect)
    for x in range(10):
        source.emit(x)
    runner = scatter._runner
    assert runner is not None and runner.in_flight and collect.seen == []
    later = threading.Event()
    with runner.lock:  # as a producer in the middle of an emit
        event.set()
        client.gather([f for f, _ in runner.in_flight])  # their callbacks are queued
        sentinel = client.submit(inc, 0, pure=False)
        sentinel.add_done_callback(lambda _: later.set())
        assert later.wait(timeout=60), "distributed's callback thread waits for the lock"
    # No close(), no further emit: the producer's release delivers them.
    assert collect.all_in.wait(timeout=60)
    assert collect.seen == list(range(1, 11))
    source.close()
    assert collect.seen == list(range(1, 11))



class TaskAborted(BaseException):
    """Not a user function's error (no node policy takes it): its task fails."""


def first_held(x: int, name: str) -> int:
    """``x + 1``, for 0 once the event ``name`` is set, waiting off the
    worker's thread (so that the other tasks run meanwhile, on any worker);
    for 1 its task fails."""
    if x == 0:
        from distributed import secede

        secede()
        if not Event(name).wait(timeout=60):
            raise TimeoutError(f"event {name} was never set")
    if x == 1:
        raise TaskAborted
    return x + 1


@pytest.mark.dask
def test_unordered_results_release_only_their_own_elements_references(client: Client) -> None:
    # Element 0 comes back last: the others' references go with their own
    # results, and 0's are held until its own.
    name = f"release-{uuid.uuid4().hex}"
    seen: list[int] = []
    released: list[tuple[int, bool]] = []  # element, and whether its result was in
    others_released = threading.Event()

    def release(x: int) -> None:
        released.append((x, x + 1 in seen))
        if len(released) == 4:
            others_released.set()

    source: Stream[Any] = Stream()
    (source.scatter(client=client, batch_size=1, ordered=False)
     .map(first_held, name).gather().sink(seen.append))
    refs = [RefCounter(cb=lambda x=x: release(x)) for x in (0, 2, 3, 4, 5)]
    try:
        for x, ref in zip((0, 2, 3, 4, 5), refs, strict=True):
            source.emit(x, metadata=[{"ref": ref}])
        assert others_released.wait(60), (seen, released)
        assert refs[0].count == 1
    finally:
        Event(name, client=client).set()
    source.close()
    assert sorted(seen) == [1, 3, 4, 5, 6]
    assert sorted(released) == [(x, True) for x in (0, 2, 3, 4, 5)]


@pytest.mark.dask
def test_a_failed_batch_behind_a_running_one_releases_only_its_own_references(
        client: Client) -> None:
    # Element 0 runs; the batch of 1, sent after it, fails: 1's references
    # go, 0's are held until its results come back.
    from streams_dask import DaskTaskError

    name = f"release-{uuid.uuid4().hex}"
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client, batch_size=1)
    out = scatter.map(first_held, name).gather().sink_to_list()
    refs = [RefCounter() for _ in range(4)]
    failed = threading.Event()
    try:
        source.emit(0, metadata=[{"ref": refs[0]}])
        runner = scatter._runner
        store = runner.store

        def watched(future: Any, result: Any) -> None:
            try:
                store(future, result)
            except DaskTaskError:
                failed.set()
                raise

        runner.store = watched
        for x in (2, 3, 1):  # 1 last: no emit raises its failure
            source.emit(x, metadata=[{"ref": refs[x]}])
        assert failed.wait(60)  # 1's task failed
        with runner.lock:  # once the callback that met it is done
            runner.refs.release()
        assert [r.count for r in refs] == [1, 0, 1, 1]
    finally:
        Event(name, client=client).set()
    with pytest.raises(DaskTaskError, match="TaskAborted"):
        source.close()
    assert out == [1, 3, 4]
    assert [r.count for r in refs] == [0, 0, 0, 0]


def test_batches_done_out_of_order_keep_nothing_when_no_reference_is_held() -> None:
    from streams_dask.held_refs import HeldRefs

    refs = HeldRefs()
    for start in range(0, 2_000, 2):  # each pair of one-item batches back the other way round
        refs.sent = start + 2
        refs.done(range(start + 1, start + 2))
        refs.done(range(start, start + 1))
    assert refs.taken == 2_000
    assert refs._fresh == [] and refs._ahead == {}
