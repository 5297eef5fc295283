"""A result that cannot come back from a worker fails the pipeline; it does not hang it.

The task itself succeeds on the worker; sending its result back fails to
pickle it. Distributed reports nothing for such a future, so ``close()``
used to wait for it for ever. It must raise, naming the segment and saying
what to do. ``close()`` runs in a thread joined with a generous timeout so
that the broken behaviour fails this test instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
import uuid
from collections.abc import Iterable
from functools import partial
from typing import Any

import pytest
from distributed import Client, Event

from streams import Stream
from streams_dask import DaskTaskError

GUARD = 120.0  # seconds: only reached when close() hangs


def make_lock(x: int) -> Any:
    return threading.Lock()


def emitted_and_closed(source: Stream[Any], items: Iterable[Any], hung: str
                       ) -> list[BaseException]:
    """Emit ``items`` and close, in a thread joined within :data:`GUARD`; what they raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            for x in items:
                source.emit(x)
            source.close()
        except BaseException as e:  # handed to the test's thread
            raised.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(GUARD)
    assert not worker.is_alive(), hung
    return raised


@pytest.mark.dask
def test_an_unpicklable_result_fails_close_instead_of_hanging(client: Client) -> None:
    source: Stream[Any] = Stream()
    out = source.scatter(client=client).map(make_lock).gather().sink_to_list()
    raised = emitted_and_closed(source, [1], "close() hung on a result that cannot be sent back")
    assert len(raised) == 1 and isinstance(raised[0], DaskTaskError), raised
    assert "could not be sent back" in str(raised[0])
    assert "before gather()" in str(raised[0])
    assert out == []


@pytest.mark.dask
def test_an_unpicklable_element_is_named_with_the_scatter_node(client: Client) -> None:
    source: Stream[Any] = Stream()
    source.scatter(client=client).map(str).gather().sink_to_list()
    with pytest.raises(TypeError) as info:
        source.emit(threading.Lock())
    text = str(info.value)
    assert text.startswith("scatter: element <unlocked _thread.lock object")
    assert "cannot be pickled to send to Dask workers" in text
    assert "were not sent" in text
    assert "LLGExpr" not in text


class Conn:
    """A value that holds a lock: it cannot be pickled."""

    def __init__(self, x: int) -> None:
        self.x = x
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Conn({self.x})"


def use(c: Conn) -> int:
    if c.x == 3:
        raise ValueError("no 3")
    return c.x * 10


@pytest.mark.dask
@pytest.mark.parametrize("batch_size", [None, 3])
def test_a_routed_failure_on_an_unpicklable_value_comes_back_with_its_repr(
        client: Client, batch_size: int | None) -> None:
    # In-process the error names the node and the value; the value cannot
    # travel back from the worker, its repr does (and the batch's results).
    source: Stream[Any] = Stream()
    failing = source.scatter(client=client, batch_size=batch_size).map(Conn).map(use)
    failing.on_error("route")
    errors = failing.errors.map(lambda r: (repr(r.element), type(r.exception))).sink_to_list()
    out = failing.gather().sink_to_list()
    for x in range(6):
        source.emit(x)
    source.close()
    assert out == [0, 10, 20, 40, 50]
    assert errors == [("<an element that cannot be pickled: Conn(3)>", ValueError)]


@pytest.mark.dask
def test_after_an_element_that_was_not_sent_the_next_ones_release_their_references(
        client: Client) -> None:
    # The refused element's place was counted as still on its way: every later
    # element's references (a Kafka offset to commit) waited one element longer.
    from streams import RefCounter

    source: Stream[Any] = Stream()
    out = source.scatter(client=client).map(str).gather().sink_to_list()
    refs = [RefCounter() for _ in range(3)]
    source.emit(1, metadata=[{"ref": refs[0]}])
    with pytest.raises(TypeError, match="cannot be pickled"):
        source.emit(threading.Lock(), metadata=[{"ref": refs[1]}])
    source.emit(3, metadata=[{"ref": refs[2]}])
    assert out == ["1", "3"]  # each delivered before its emit returned
    assert [r.count for r in refs] == [0, 0, 0]
    source.close()


def lock_at_3(x: int) -> Any:
    return threading.Lock() if x == 3 else x


@pytest.mark.dask
def test_close_delivers_every_other_batch_after_a_failed_one_and_ends_the_stream(
        client: Client) -> None:
    source: Stream[Any] = Stream()
    gathered = source.scatter(client=client, batch_size=4).map(lock_at_3).gather()
    out = gathered.sink_to_list()
    windows = gathered.timed_window(1000, time=lambda x: 0).sink_to_list()  # ends at close
    raised = emitted_and_closed(source, range(10), "close() hung")
    assert raised and all(isinstance(e, DaskTaskError) for e in raised), raised
    # 3's batch is missing; batches after it still came (a batch fetched in one request
    # with the failed one may fail with it: its error is raised too), in order; the
    # stream ended after gather().
    assert 3 not in out and any(x > 3 for x in out) and out == sorted(out), out
    assert gathered._closed and windows and sorted(windows[0]) == sorted(out)


def keyed_lock_at_3(x: int) -> Any:
    return (x % 2, threading.Lock() if x == 3 else x)


@pytest.mark.dask
def test_an_unpicklable_output_of_a_step_before_a_keyed_one_fails_instead_of_hanging(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # The stateless step runs in a task of its own, whose result the keyed
    # parts on the other worker fetch: that transfer failed to pickle the
    # lock, and the parts waited for it for ever.
    from tests.streams_dask.test_key_groups import in_each_part

    in_each_part(monkeypatch, False)
    source: Stream[Any] = Stream()
    counts = (source.scatter(client=client, batch_size=4).map(keyed_lock_at_3)
              .scan(lambda n, kx: n + 1, start=0, key=0).gather().sink_to_list())
    raised = emitted_and_closed(source, range(8), "a keyed stage waited for ever for the "
                                "output of the step before it")
    assert raised and isinstance(raised[0], DaskTaskError), raised
    text = str(raised[0])
    assert "map(keyed_lock_at_3)" in text and "cannot be pickled" in text, text
    assert "_thread.lock" in text, text
    # What came is what in-process gives for the same elements (the key
    # group that never needed the lock moved off its worker may deliver).
    assert set(counts) <= {(k, n) for k in (0, 1) for n in range(1, 5)}, counts


@pytest.mark.dask
def test_on_one_worker_such_an_output_goes_on_unpickled_as_in_process(
        one_worker: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing moves between workers: nothing is pickled, as in-process.
    from tests.streams_dask.test_key_groups import in_each_part

    in_each_part(monkeypatch, False)

    def run_on(head: Stream[Any]) -> Stream[Any]:
        return head.map(keyed_lock_at_3).scan(lambda n, kx: n + 1, start=0, key=0)

    source: Stream[Any] = Stream()
    expected = run_on(source).sink_to_list()
    dask_source: Stream[Any] = Stream()
    got = run_on(dask_source.scatter(client=one_worker, batch_size=4)).gather().sink_to_list()
    for x in range(8):
        source.emit(x)
    assert emitted_and_closed(dask_source, range(8), "close() hung") == []
    assert got == expected


@pytest.mark.dask
def test_a_close_with_failed_batches_still_runs_the_closing_work_after_gather(
        client: Client) -> None:
    # The failed batch's error was raised before the window after gather()
    # went to its coroutine sink: that work was dropped, the window lost.
    import asyncio

    windows: list[Any] = []

    async def collect(w: Any) -> None:
        await asyncio.sleep(0)
        windows.append(w)

    source: Stream[Any] = Stream()
    gathered = source.scatter(client=client, batch_size=4).map(lock_at_3).gather()
    out = gathered.sink_to_list()
    gathered.timed_window(1000, time=lambda x: 0).sink(collect)  # sent at close
    raised = emitted_and_closed(source, range(10), "close() hung")
    assert raised and all(isinstance(e, DaskTaskError) for e in raised), raised
    assert len(windows) == 1 and sorted(windows[0]) == sorted(out), (windows, out)


def is_lock_batch(batch: list[Any]) -> bool:
    return any(isinstance(x, type(threading.Lock())) for x in batch)


def watch_unsent(scatter: Any, then: Any) -> None:
    """Call ``then()`` once the runner of ``scatter`` has failed to send a batch
    holding a lock (whichever thread sent it)."""
    runner = scatter._runner
    task = runner._task

    def watched(batch: list[Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return task(batch, *args, **kwargs)
        finally:
            if is_lock_batch(batch):
                then()

    runner._task = watched


@pytest.mark.dask
def test_a_batch_not_sent_from_the_callback_thread_loses_nothing_else(client: Client) -> None:
    # The lock waits for a batch while the one task allowed runs; when that
    # task ends, distributed's callback thread delivers its result and sends
    # the next batch, which fails to pickle. The elements after it must
    # still all come back by the end of close().
    from tests.streams_dask.test_batching import HOLD_SECONDS, held

    release = Event(f"release-{uuid.uuid4().hex}", client=client)
    tried = threading.Event()
    try:
        source: Stream[Any] = Stream()
        scatter = source.scatter(client=client, batch_size=2, max_in_flight=1)
        out = scatter.map(partial(held, release.name, 0)).gather().sink_to_list()
        source.emit(0)  # runs until released
        watch_unsent(scatter, tried.set)
        source.emit(threading.Lock())
        assert len(scatter._runner.pending) == 1  # no room on the cluster: it waits
        release.set()
        assert tried.wait(HOLD_SECONDS), "the callback thread never sent the lock's batch"
        with pytest.raises(TypeError, match="cannot be pickled to send"):
            source.emit(2)  # the background error, raised once 2 is accepted
        for x in range(3, 10):
            source.emit(x)
        source.close()
    finally:
        release.set()
    assert out == [1, *range(3, 11)]


@pytest.mark.dask
def test_a_batch_not_sent_at_close_loses_nothing_else_and_ends_the_stream(
        client: Client) -> None:
    from tests.streams_dask.test_batching import held

    release = Event(f"release-{uuid.uuid4().hex}", client=client)
    try:
        source: Stream[Any] = Stream()
        scatter = source.scatter(client=client, batch_size=2, max_in_flight=1)
        gathered = scatter.map(partial(held, release.name, 0)).gather()
        out = gathered.sink_to_list()
        source.emit(0)  # runs until the close has tried to send the lock's batch
        watch_unsent(scatter, release.set)
        source.emit(threading.Lock())
        assert len(scatter._runner.pending) == 1
        with pytest.raises(TypeError, match="cannot be pickled to send"):
            source.close()
    finally:
        release.set()
    assert out == [1]
    assert gathered._closed


def held_add(name: str, total: int, x: Any) -> int:
    """``total + x``, once event ``name`` is set for 0."""
    from tests.streams_dask.test_batching import HOLD_SECONDS

    if x == 0 and not Event(name).wait(timeout=HOLD_SECONDS):
        raise TimeoutError(f"event {name} was never set")
    return total + x


@pytest.mark.dask
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_stateful_round_not_sent_at_close_lets_the_rounds_before_it_end_the_stream(
        client: Client, asynchronous: bool) -> None:
    # The first round runs until released; the batches after it wait for it
    # and go as one round, at close, which cannot be pickled: the rounds
    # before it come back, the other batches go each alone, and the end of
    # stream still reaches the scan.
    release = Event(f"release-{uuid.uuid4().hex}", client=client)
    source: Stream[Any] = Stream(asynchronous=asynchronous)
    scatter = source.to_dask(client).scatter(batch_size=2, max_in_flight=8)
    gathered = scatter.scan(partial(held_add, release.name), start=0).gather()
    out = gathered.sink_to_list()

    async def run() -> None:
        for x in [0, 1, 2, 3, 4, 5, 6, 7, threading.Lock(), 9]:
            await source.emit(x)
        assert scatter._runner.waiting  # batches wait for the rounds ahead
        release.set()
        await source.aclose()

    try:
        with pytest.raises(TypeError, match=r"element\(s\) of its batch were not sent") as info:
            if asynchronous:
                asyncio.run(run())
            else:
                for x in [0, 1, 2, 3, 4, 5, 6, 7, threading.Lock(), 9]:
                    source.emit(x)
                assert scatter._runner.waiting
                release.set()
                source.close()
    finally:
        release.set()
    found = re.search(r"so the (\d+) element", str(info.value))
    assert found is not None
    lost = int(found.group(1))
    # Lost: the lock's batch alone (the batches that waited with it go as
    # rounds of their own); the scan's totals are those of the others.
    assert lost <= 2
    sent = [[x for k, x in enumerate([*range(8), None, 9]) if not i <= k < i + lost]
            for i in range(9 - lost, 9) if i >= 0]
    assert out in [list(itertools.accumulate(kept)) for kept in sent]
    assert gathered._closed


@pytest.mark.dask
def test_a_last_batch_not_sent_at_close_ends_a_stateful_stage_once(client: Client) -> None:
    # Its end of stream goes on its own, once: a window's flush that keeps
    # its buffer would emit it again at a second end.
    def build(head: Stream[Any], name: str | None) -> Stream[Any]:
        add = partial(held_add, name) if name else (lambda total, x: total + x)
        return head.scan(add, start=0).sliding_window(3, return_partial=False)

    reference: Stream[Any] = Stream()
    expected = build(reference, None).sink_to_list()
    reference.emit(0)  # the lock's batch, 1 with it, is lost
    reference.close()
    release = Event(f"release-{uuid.uuid4().hex}", client=client)
    try:
        source: Stream[Any] = Stream()
        scatter = source.scatter(client=client, batch_size=4, max_in_flight=1)
        out = build(scatter, release.name).gather().sink_to_list()
        for x in [0, 1, threading.Lock()]:
            source.emit(x)
        assert len(scatter._runner.pending) == 2  # 1 and the lock: no room while 0 runs
        release.set()
        with pytest.raises(TypeError, match="cannot be pickled to send"):
            source.close()
    finally:
        release.set()
    assert out == expected == [(0,)]


@pytest.mark.dask
@pytest.mark.parametrize("asynchronous", [False, True])
def test_each_batch_not_sent_of_a_stateful_round_is_reported(client: Client,
                                                            asynchronous: bool) -> None:
    # Two batches that waited cannot be pickled: the error raised names the
    # first, and says the other (an asynchronous stream has no later call to
    # raise it).
    release = Event(f"release-{uuid.uuid4().hex}", client=client)
    source: Stream[Any] = Stream(asynchronous=asynchronous)
    scatter = source.to_dask(client).scatter(batch_size=2, max_in_flight=8)
    out = scatter.scan(partial(held_add, release.name), start=0).gather().sink_to_list()
    elements = [0, 1, 2, 3, 4, 5, threading.Lock(), 7, threading.Lock(), 9, 10]

    async def run() -> None:
        for x in elements:
            await source.emit(x)
        assert len(scatter._runner.waiting) >= 2
        release.set()
        await source.aclose()

    try:
        with pytest.raises(TypeError, match="cannot be pickled to send") as info:
            if asynchronous:
                asyncio.run(run())
            else:
                for x in elements:
                    source.emit(x)
                assert len(scatter._runner.waiting) >= 2
                release.set()
                source.close()
    finally:
        release.set()
    said = [str(info.value), *getattr(info.value, "__notes__", [])]
    lost = [int(m.group(1)) for text in said
            for m in re.finditer(r"so the (\d+) element", text)]
    assert len(lost) == 2 and "another batch was not sent" in said[-1]
    assert len(out) + sum(lost) == len(elements)
