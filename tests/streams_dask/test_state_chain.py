"""A keyed stage's state kept on the workers: rounds chained, anchors, lost workers.

See :mod:`streams_dask.chain`: each round's part tasks take the previous
round's futures, so rounds overlap on the cluster; every few rounds (and for
a checkpoint) the states come back to the client as an anchor.
"""

from __future__ import annotations

import gc
import os
import signal
import weakref
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, Future, get_task_stream
from hypothesis import given, settings
from hypothesis import strategies as st

import streams_dask  # noqa: F401
from streams import Checkpointer, Stream
from streams_dask import chain

pytestmark = pytest.mark.dask


def totals(s: Stream[Any]) -> Stream[Any]:
    """A running total per key (x % 11), as text."""
    return (s.map(lambda x: (x % 11, x)).scan(lambda t, kx: t + kx[1], start=0, key=0)
            .map(lambda kt: f"{kt[0]}:{kt[1]}"))


def run(xs: list[int], scatter: Any = None, each: Any = None) -> list[Any]:
    """The outputs of :func:`totals` over ``xs``: in-process, or between
    ``scatter(source)`` and ``gather()``, calling ``each(scatter node)`` after
    each element."""
    source: Stream[Any] = Stream()
    head = source if scatter is None else scatter(source)
    node = totals(head)
    out = (node if scatter is None else node.gather()).sink_to_list()
    for x in xs:
        source.emit(x)
        if each is not None:
            each(head)
    source.close()
    return out


def chain_of(scatter: Any) -> chain.StateChain:
    assert scatter._runner is not None and scatter._runner.chain is not None
    state_chain: chain.StateChain = scatter._runner.chain
    return state_chain


def test_a_worker_killed_between_anchors_loses_no_state(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # No anchor before the end: the states live on the workers only, and
    # the worker holding part 0's latest one dies.
    monkeypatch.setattr(chain, "ANCHOR_EVERY", 1000)
    xs = list(range(400))
    pids = client.run(os.getpid)
    killed: list[str] = []

    def kill(scatter: Any) -> None:
        links = chain_of(scatter).links
        if not killed and chain_of(scatter).since_anchor >= 5 and links is not None:
            links[0].result()  # in the memory of a worker
            (victim, *_) = client.who_has(links[:1])[links[0].key]
            os.kill(pids[victim], signal.SIGKILL)  # the nanny starts a new one
            killed.append(victim)

    got = run(xs, lambda s: s.scatter(client=client, batch_size=8, max_in_flight=4), kill)
    assert killed
    assert got == run(xs)


@settings(max_examples=8, deadline=None)
@given(xs=st.lists(st.integers(0, 10_000), min_size=40, max_size=120),
       batch_size=st.integers(1, 8), max_in_flight=st.integers(2, 6),
       anchor_every=st.integers(2, 5))  # 1: each round waits for its anchor
def test_rounds_overlap_and_outputs_keep_input_order(
        client: Client, xs: list[int], batch_size: int, max_in_flight: int,
        anchor_every: int) -> None:
    most = [0]

    def count(scatter: Any) -> None:
        most[0] = max(most[0], len(chain_of(scatter).rounds))

    with pytest.MonkeyPatch.context() as m:
        m.setattr(chain, "ANCHOR_EVERY", anchor_every)
        got = run(xs, lambda s: s.scatter(client=client, batch_size=batch_size,
                                          max_in_flight=max_in_flight), count)
    assert got == run(xs)
    assert most[0] >= 2  # a round left before the one ahead of it came back


def test_anchors_let_the_scheduler_forget_older_rounds(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # The scheduler keeps a task while the client holds a future of it, and
    # forgets it once the last one is gone. So a round's part tasks must be
    # dropped by the chain once an anchor after them is taken. Checked on the
    # futures themselves: the client's count of them drops later, on its
    # loop thread, behind what that thread is doing.
    monkeypatch.setattr(chain, "ANCHOR_EVERY", 4)
    rounds: list[list[weakref.ref[Future]]] = []
    anchors: list[int] = []  # rounds started before each anchor taken
    start, take = chain.StateChain.start, chain.StateChain.take

    def start_seen(self: chain.StateChain, *args: Any, **kwargs: Any) -> list[Future]:
        futures = start(self, *args, **kwargs)
        assert self.links is not None
        rounds.append([weakref.ref(f) for f in self.links])
        return futures

    def take_seen(self: chain.StateChain, results: list[chain.Link]) -> Any:
        anchoring = self.rounds[0].anchoring
        taken = take(self, results)
        if anchoring:
            anchors.append(len(rounds))
        return taken

    monkeypatch.setattr(chain.StateChain, "start", start_seen)
    monkeypatch.setattr(chain.StateChain, "take", take_seen)
    xs = list(range(600))
    got = run(xs, lambda s: s.scatter(client=client, batch_size=4, max_in_flight=4))
    assert got == run(xs)
    assert len(anchors) >= 10
    # The last anchor's own futures may still be in the hands of the client's
    # loop thread, which fetched their results: those before are checked.
    older = [ref() for parts in rounds[: anchors[-2]] for ref in parts]
    alive = [f for f in older if f is not None]
    holders = [type(r).__name__ for r in gc.get_referrers(*alive[:1])
               if r is not older and r is not alive]
    assert not alive, (f"{len(alive)} part tasks of the {anchors[-2]} rounds before the "
                       f"last two anchors are still held, by {holders}")


def test_a_checkpoint_between_anchors_holds_the_states_of_what_it_covers(
        client: Client, one_worker: Client, tmp_path: Path, crash_and_restart: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # No anchor of its own before the end: each checkpoint brings the states
    # back from the workers, and they must cover exactly its elements. The
    # run dies, and restarts on one worker.
    monkeypatch.setattr(chain, "ANCHOR_EVERY", 1000)
    items = list(range(1, 120))
    clients = iter([client, client, one_worker])

    def build(out: Path, ckpt: Path, tap: Any) -> Any:
        source = Stream.from_iterable(items)
        scatter = source.scatter(client=next(clients), batch_size=3, max_in_flight=4)
        texts = totals(scatter).gather()
        sink = texts.sink_to_durable_textfile(out, fsync=False)
        texts.sink(tap)
        return source, Checkpointer(source, ckpt, every=7, fsync=False), sink

    crash_and_restart(build, tmp_path, [80])


@pytest.mark.parametrize("small_states", [True, False])
def test_small_states_come_back_with_the_events_and_others_stay_on_the_workers(
        client: Client, monkeypatch: pytest.MonkeyPatch, small_states: bool) -> None:
    # Small states: the client fetches each part's result itself. Else a
    # task next to each part takes its events, and the states stay put.
    monkeypatch.setattr(chain, "SMALL_STATES", chain.SMALL_STATES if small_states else 0)
    xs = list(range(300))
    with get_task_stream(client) as tasks:
        got = run(xs, lambda s: s.scatter(client=client, batch_size=20, max_in_flight=4))
    assert got == run(xs)
    names = [str(t["key"]) for t in tasks.data]
    parts = sum(n.startswith("run_link") for n in names)
    events = sum(n.startswith("events_of") for n in names)
    assert parts >= 10
    if small_states:
        assert events == 0
    else:  # all but the first rounds (no state yet) and the anchors
        assert events >= parts // 2


def count(n: int, x: Any) -> int:
    return n + 1


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("batch_size", [None, 4])
def test_a_step_before_the_state_that_also_feeds_a_gather_delivers_each_result_once(
        client: Client, keyed: bool, batch_size: int | None) -> None:
    # The step before the first stateful one is the last of the stateless
    # stage, and its results go both to that state and to a gather().
    def build(head: Stream[Any], gather: Any) -> tuple[list[Any], list[Any]]:
        stepped = head.map(lambda x: x + 1)
        counted = stepped.scan(count, start=0, key=(lambda x: 0) if keyed else None)
        return gather(counted).sink_to_list(), gather(stepped).sink_to_list()

    def outputs(dask: bool) -> tuple[list[Any], list[Any]]:
        source: Stream[Any] = Stream()
        head = source.scatter(client=client, batch_size=batch_size) if dask else source
        got = build(head, (lambda n: n.gather()) if dask else (lambda n: n))
        for x in range(10):
            source.emit(x)
        source.close()
        return got

    assert outputs(dask=True) == outputs(dask=False)


def lock_at_300(total: int) -> Any:
    import threading

    return threading.Lock() if total == 300 else total


def test_a_failed_stateful_stage_lets_go_of_its_tasks_at_close(client: Client) -> None:
    # The running total 300's result cannot come back: the chain is cut
    # there. The rounds in flight and the part tasks since the last anchor
    # (whose results are the states on the workers) must not outlive close().
    from streams_dask import DaskTaskError

    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client, batch_size=4)
    scatter.scan(lambda a, b: a + b).map(lock_at_300).gather().sink_to_list()
    for x in range(200):
        try:
            source.emit(x)
        except DaskTaskError:
            pass  # each call after the failure raises it
    with pytest.raises(DaskTaskError):
        source.close()
    runner = scatter._runner
    state_chain = chain_of(scatter)
    assert state_chain.futures() == [] and state_chain.links is None
    assert runner.count() == 0 and runner.warming == [] and runner.fetched == {}
