"""Keyed stages by key group: spread over the workers, checkpointed per group, rescaled.

A segment whose stateful part is one node with one state per key (the
``key`` trait) runs each batch as one task per worker thread, each over some
key groups (see :mod:`streams_dask.key_groups`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from distributed import Client, get_task_stream
from hypothesis import given, settings
from hypothesis import strategies as st

import streams_dask  # noqa: F401
from streams import Checkpointer, NodeError, Stream
from streams_dask import chain
from streams_dask.key_groups import KEY_GROUPS, GroupStates, group_of
from streams_dask.segment import plan_stages

pytestmark = pytest.mark.dask


def keyed_totals(s: Stream[Any]) -> Stream[Any]:
    """Running total per key (x % 7), then a stateless step in the group tasks."""
    return (s.map(lambda x: (x % 7, x)).scan(lambda total, kx: total + 10 // kx[1], start=0,
                                             key=0)
            .map(lambda kt: f"{kt[0]}:{kt[1]}"))


def run(xs: list[int], lift: Any = None, lower: Any = None) -> tuple[list[Any], list[Any]]:
    """Outputs, and the elements whose errors were raised (emitting on after each).

    On Dask an error comes back with its result, after a later emit or at
    the close, which raises the first of those left and counts the others
    in a note: all are of element 0 (the one :func:`keyed_totals` fails on).
    """
    source: Stream[Any] = Stream()
    head = lift(source) if lift else source
    node = keyed_totals(head)
    out = (lower(node) if lower else node).sink_to_list()
    raised = []
    for x in [*xs, None]:
        try:
            source.emit(x) if x is not None else source.close()
        except NodeError as e:
            raised.extend([e.element] * raised_count(e))
    return out, raised


def _segment_plan(node: Stream[Any]) -> Any:
    segment = node._segment
    return plan_stages(segment)


@pytest.mark.parametrize(("make", "keyed"), [
    (lambda s: s.map(abs).scan(max, key=0).map(str), True),
    (lambda s: s.stateful_map(lambda n, x: (n + 1, [n]), start=0, key=0), True),
    (lambda s: s.scan(max), False),  # one state: in order, in one task
    (lambda s: s.scan(max, key=0, ttl=5, time=1), False),  # expiry on the node's event time
    (lambda s: s.scan(max, key=0).scan(max), False),  # a second stateful node
], ids=["scan_key", "stateful_map_key", "scan", "scan_ttl", "keyed_then_scan"])
def test_only_a_keyed_node_followed_by_stateless_steps_runs_by_key_group(
        make: Any, keyed: bool) -> None:
    node = make(Stream().scatter())
    node.gather()
    assert _segment_plan(node).keyed is keyed


def test_equal_keys_fall_in_one_group_in_every_process() -> None:
    assert group_of(1) == group_of(1.0) == group_of(True)
    assert 0 <= group_of(("a", 3)) < KEY_GROUPS


@settings(max_examples=6, deadline=None)
@given(xs=st.lists(st.integers(0, 60), max_size=40), batch_size=st.integers(1, 9))
def test_by_key_group_gives_the_in_process_outputs_and_errors_in_order(
        client: Client, xs: list[int], batch_size: int) -> None:
    # 10 // 0 fails: errors are raised for the elements in their place.
    expected = run(xs)
    got = run(xs, lambda s: s.scatter(client=client, batch_size=batch_size),
              lambda n: n.gather())
    assert got == expected


def in_each_part(monkeypatch: pytest.MonkeyPatch, always: bool) -> None:
    """Fix where the stateless step before a keyed one runs: in each part, or in a task.

    The chain chooses by the measured cost of the two (see
    ``StateChain.runs_prefix``); a test of what each choice does must not
    depend on the timings of a loaded machine.
    """
    monkeypatch.setattr(chain.StateChain, "runs_prefix",
                        lambda self: always and self.prefix is not None)


def test_each_batch_runs_as_one_task_per_worker_thread(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    in_each_part(monkeypatch, True)
    xs = list(range(1, 301))
    with get_task_stream(client) as tasks:
        got = run(xs, lambda s: s.scatter(client=client, batch_size=100), lambda n: n.gather())
    assert got == run(xs)
    names = [t["key"][0] if isinstance(t["key"], tuple) else t["key"] for t in tasks.data]
    group_tasks = [n for n in names if n.startswith("run_link")]
    # Two single-threaded workers: two group tasks per batch (and per close),
    # and no merge task: the client merges what the group tasks return. The
    # map before the scan runs inside each group task: no task of its own.
    assert len(group_tasks) % 2 == 0 and len(group_tasks) >= 6
    assert not [n for n in names if n.startswith(("merge_links", "run_stage", "run_prefix"))]


def tenths(x: int) -> tuple[int, int]:
    """The step before the keyed one: fails on 0."""
    return (x % 7, 10 // x)


def raised_count(error: BaseException) -> int:
    """Errors a segment's close raised: this one and the others its note counts."""
    more = [n for n in getattr(error, "__notes__", ()) if "more error(s)" in n]
    return 1 + sum(int(n.split()[0]) for n in more)


@pytest.mark.parametrize("in_parts", [True, False], ids=["in_each_part", "own_task"])
@pytest.mark.parametrize("policy", ["raise", "route"])
def test_an_error_before_a_keyed_step_names_its_node_once(
        client: Client, monkeypatch: pytest.MonkeyPatch, in_parts: bool, policy: str) -> None:
    # Each of the two group tasks runs the map over the whole batch, or
    # (when it costs too much to run twice) one task runs it for both: either
    # way each failure reaches the client once, from the map.
    in_each_part(monkeypatch, in_parts)
    xs = [x % 23 for x in range(3, 100)]  # four zeros
    results = []
    for on_dask in (False, True):
        source: Stream[Any] = Stream()
        head = source.scatter(client=client, batch_size=4) if on_dask else source
        step = head.map(tenths, stream_name="tenths").on_error(policy)
        routed = step.errors.sink_to_list()
        node = step.scan(lambda total, kx: total + kx[1], start=0, key=0)
        out = (node.gather() if on_dask else node).sink_to_list()
        raised = []
        with get_task_stream(client) as tasks:
            for x in [*xs, None]:
                try:
                    source.emit(x) if x is not None else source.close()
                except NodeError as e:
                    raised.append((e.node._label(), e.element, raised_count(e)))
        results.append((out, [(r.node._label(), r.element) for r in routed], raised))
    label = "map(tenths) 'tenths'"
    (out, routed, raised), (dask_out, dask_routed, dask_raised) = results
    assert dask_out == out and dask_routed == routed
    if policy == "route":
        assert dask_routed == [(label, 0)] * 4 and not dask_raised
    else:  # in-process at each emit of 0; on Dask as results come back, and
        # those left at the end as one, which counts the others in a note
        assert raised == [(label, 0, 1)] * 4
        assert {(n, x) for n, x, _ in dask_raised} == {(label, 0)}
        assert sum(count for *_, count in dask_raised) == 4
    names = [str(t["key"]) for t in tasks.data]
    assert any(n.startswith("run_prefix") for n in names) is not in_parts


def costly(x: int) -> tuple[int, int]:
    """A step that costs far more than the keyed step after it."""
    spin = 0
    for i in range(20_000):
        spin ^= i
    return (x % 7, x + spin - spin)


def test_a_costly_step_before_a_keyed_one_runs_once_in_a_task_of_its_own(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # Run in each of the two parts, it would cost twice: once measured (here
    # from the first round taken), it goes to a task whose result both take.
    monkeypatch.setattr(chain, "PREFIX_JUDGED_AFTER", 0.0)
    xs = list(range(200))

    def run_on(head: Stream[Any]) -> Stream[Any]:
        return head.map(costly).scan(lambda total, kx: total + kx[1], start=0, key=0)

    source: Stream[Any] = Stream()
    out = run_on(source).sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    dask_source: Stream[Any] = Stream()
    dask_out = run_on(dask_source.scatter(client=client, batch_size=10)).gather().sink_to_list()
    with get_task_stream(client) as tasks:
        for x in xs:
            dask_source.emit(x)
        dask_source.close()
    assert dask_out == out
    names = [str(t["key"]) for t in tasks.data]
    assert any(n.startswith("run_prefix") for n in names)


def _pipeline(client: Client, items: list[int], out: Path, ckpt: Path
              ) -> tuple[Stream[Any], Checkpointer]:
    source = Stream.from_iterable(items)
    totals = keyed_totals(source.scatter(client=client, batch_size=4)).gather()
    totals.sink_to_durable_textfile(out, fsync=False)
    return source, Checkpointer(source, ckpt, every=5, fsync=False)


def test_a_checkpoint_per_key_group_restores_on_a_different_number_of_workers(
        client: Client, one_worker: Client, tmp_path: Path, segment_state: Any) -> None:
    items = list(range(1, 41))
    clean, _ = _pipeline(client, items, tmp_path / "clean.txt", tmp_path / "clean-ckpt")
    clean.start()
    # Stopped after 23 elements on two workers; restarted on one.
    first, _ = _pipeline(client, items[:23], tmp_path / "out.txt", tmp_path / "ckpt")
    first.start()
    scan_state = segment_state(tmp_path / "ckpt")
    assert isinstance(scan_state, GroupStates)
    assert {group_of(k) for k in range(7)} == set(scan_state)  # a state per group of keys
    second, cp = _pipeline(one_worker, items, tmp_path / "out.txt", tmp_path / "ckpt")
    assert cp.restored
    second.start()
    assert (tmp_path / "out.txt").read_text() == (tmp_path / "clean.txt").read_text()
