"""A keyed stage's state kept on the workers: rounds chained, anchors, lost workers.

See :mod:`streams_dask.chain`: each round's part tasks take the previous
round's futures, so rounds overlap on the cluster; every few rounds (and for
a checkpoint) the states come back to the client as an anchor.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from distributed import Client
from hypothesis import given, settings
from hypothesis import strategies as st

import streams_dask  # noqa: F401
from streams import Checkpointer, NodeError, Stream
from streams_dask import chain

pytestmark = pytest.mark.dask


def totals(s: Stream[Any]) -> Stream[Any]:
    """A running total per key (x % 11), as text."""
    return (s.map(lambda x: (x % 11, x)).scan(lambda t, kx: t + kx[1], start=0, key=0)
            .map(lambda kt: f"{kt[0]}:{kt[1]}"))


def in_process(xs: list[int]) -> list[Any]:
    source: Stream[Any] = Stream()
    out = totals(source).sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return out


def test_a_worker_killed_between_anchors_loses_no_state(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # No anchor before the end: the states live on the workers only, and
    # the worker holding part 0's latest one dies.
    monkeypatch.setattr(chain, "ANCHOR_EVERY", 1000)
    xs = list(range(400))
    pids = client.run(os.getpid)
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client, batch_size=8, max_in_flight=4)
    out = totals(scatter).gather().sink_to_list()
    killed: list[str] = []
    for x in xs:
        source.emit(x)
        runner = scatter._runner
        assert runner is not None and runner.chain is not None
        links = runner.chain.links
        if not killed and runner.chain.since_anchor >= 5 and links is not None:
            links[0].result()  # in the memory of a worker
            (victim, *_) = client.who_has(links[:1])[links[0].key]
            os.kill(pids[victim], signal.SIGKILL)  # the nanny starts a new one
            killed.append(victim)
    source.close()
    assert killed
    assert out == in_process(xs)


@settings(max_examples=8, deadline=None)
@given(xs=st.lists(st.integers(0, 10_000), min_size=40, max_size=120),
       batch_size=st.integers(1, 8), max_in_flight=st.integers(2, 6),
       anchor_every=st.integers(2, 5))  # 1: each round waits for its anchor
def test_rounds_overlap_and_outputs_keep_input_order(
        client: Client, xs: list[int], batch_size: int, max_in_flight: int,
        anchor_every: int) -> None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(chain, "ANCHOR_EVERY", anchor_every)
        source: Stream[Any] = Stream()
        scatter = source.scatter(client=client, batch_size=batch_size,
                                 max_in_flight=max_in_flight)
        out = totals(scatter).gather().sink_to_list()
        most = 0
        for x in xs:
            source.emit(x)
            assert scatter._runner is not None and scatter._runner.chain is not None
            most = max(most, len(scatter._runner.chain.rounds))
        source.close()
    assert out == in_process(xs)
    assert most >= 2  # a round left before the one ahead of it came back


def test_anchors_let_the_scheduler_forget_older_rounds(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chain, "ANCHOR_EVERY", 4)
    xs = list(range(600))
    source: Stream[Any] = Stream()
    scatter = source.scatter(client=client, batch_size=4, max_in_flight=4)
    out = totals(scatter).gather().sink_to_list()
    for x in xs:
        source.emit(x)
    scatter.flush()

    def part_tasks(dask_scheduler: Any) -> int:
        return sum(str(k).startswith("run_link") for k in dask_scheduler.tasks)

    # 150 rounds of two parts went; those before the last anchor are gone.
    assert client.run_on_scheduler(part_tasks) <= 2 * (4 + 4 + 2)
    source.close()
    assert out == in_process(xs)


class Crash(Exception):
    """The first run dies here, after some outputs."""


def _pipeline(client: Client, items: list[int], out: Path, ckpt: Path,
              crash_after: int | None = None) -> tuple[Stream[Any], Checkpointer]:
    source = Stream.from_iterable(items)
    texts = totals(source.scatter(client=client, batch_size=3, max_in_flight=4)).gather()
    texts.sink_to_durable_textfile(out, fsync=False)
    left = [crash_after]

    def tap(_: Any) -> None:
        if left[0] is not None:
            left[0] -= 1
            if left[0] == 0:
                raise Crash

    texts.sink(tap)
    return source, Checkpointer(source, ckpt, every=7, fsync=False)


def test_a_checkpoint_between_anchors_holds_the_states_of_what_it_covers(
        client: Client, one_worker: Client, tmp_path: Path, segment_state: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # No anchor of its own before the end: each checkpoint brings the states
    # back from the workers, and they cover exactly its elements.
    monkeypatch.setattr(chain, "ANCHOR_EVERY", 1000)
    items = list(range(1, 120))
    clean, _ = _pipeline(client, items, tmp_path / "clean.txt", tmp_path / "clean-ckpt")
    clean.start()
    first, cp = _pipeline(client, items, tmp_path / "out.txt", tmp_path / "ckpt", 80)
    with pytest.raises(NodeError):
        first.start()
    cp.wait()
    assert segment_state(tmp_path / "ckpt")  # states, not the empty ones of the start
    second, cp = _pipeline(one_worker, items, tmp_path / "out.txt", tmp_path / "ckpt")
    assert cp.restored
    second.start()
    assert (tmp_path / "out.txt").read_text() == (tmp_path / "clean.txt").read_text()
