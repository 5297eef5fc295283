"""Snapshots and restores of stateful operators, and the keyed scan."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from operator import add
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import NodeError, Stream
from streams.state import GraphSnapshot, restore_graph, snapshot_graph

# ----------------------------------------------------------------------
# The keyed scan: scan(func, start=, key=) keeps one state per key


def test_keyed_scan_keeps_one_state_per_key() -> None:
    source = Stream()
    out = source.scan(lambda s, x: s + x[1], start=0, key=0).sink_to_list()
    for x in [("a", 1), ("b", 10), ("a", 2), ("c", 5), ("b", 1)]:
        source.emit(x)
    assert out == [("a", 1), ("b", 10), ("a", 3), ("c", 5), ("b", 11)]


def test_keyed_scan_with_callable_key_and_mutable_start_copied_per_key() -> None:
    source = Stream()
    node = source.scan(lambda s, x: [*s, x], start=[], key=lambda x: x % 2)
    out = node.sink_to_list()
    for i in range(5):
        source.emit(i)
    assert out == [(0, [0]), (1, [1]), (0, [0, 2]), (1, [1, 3]), (0, [0, 2, 4])]
    assert node.state == {0: [0, 2, 4], 1: [1, 3]}


def test_keyed_scan_start_is_never_shared_between_keys() -> None:
    source = Stream()

    def append(s: list[int], x: tuple[str, int]) -> list[int]:
        s.append(x[1])  # mutates the state in place
        return s

    out = source.scan(append, start=[], key=0).sink_to_list()
    source.emit(("a", 1))
    source.emit(("b", 2))
    assert out[-1] == ("b", [2])


def test_keyed_scan_without_start_takes_each_keys_first_element() -> None:
    source = Stream()
    out = source.scan(lambda s, x: (x[0], s[1] + x[1]), key=0).sink_to_list()
    for x in [("a", 1), ("a", 2), ("b", 5)]:
        source.emit(x)
    assert out == [("a", ("a", 1)), ("a", ("a", 3)), ("b", ("b", 5))]


def test_keyed_scan_returns_state_and_with_state() -> None:
    source = Stream()

    def count(n: int, x: str) -> tuple[int, str]:
        return n + 1, f"{x}#{n + 1}"

    out = source.scan(count, start=0, key=lambda x: x, returns_state=True,
                      with_state=True).sink_to_list()
    for x in "aba":
        source.emit(x)
    assert out == [(1, ("a", "a#1")), (1, ("b", "b#1")), (2, ("a", "a#2"))]


def test_keyed_scan_error_names_the_node_and_keeps_other_keys() -> None:
    source = Stream()
    node = source.scan(lambda s, x: s + 10 // x[1], start=0, key=0, stream_name="div")
    out = node.sink_to_list()
    source.emit(("a", 5))
    with pytest.raises(NodeError, match="div"):
        source.emit(("a", 0))
    source.emit(("b", 2))
    assert out == [("a", 2), ("b", 5)]
    assert node.state == {"a": 2, "b": 5}


def test_keyed_scan_snapshot_is_a_copy() -> None:
    source = Stream()
    node = source.scan(add, start=0, key=lambda x: x % 3)
    for i in range(6):
        source.emit(i)
    snap = node.snapshot()
    source.emit(6)
    assert snap == {"state": {0: 3, 1: 5, 2: 7}}
    node.restore(snap)
    assert node.state == {0: 3, 1: 5, 2: 7}


# ----------------------------------------------------------------------
# Round trip: run, snapshot, rebuild, restore, continue == uninterrupted run

Build = Callable[[], tuple[list[Stream[Any]], list[Any]]]


def one(op: Callable[[Stream[Any]], Stream[Any]]) -> Build:
    def build() -> tuple[list[Stream[Any]], list[Any]]:
        source = Stream()
        return [source], op(source).sink_to_list()
    return build


def two(op: Callable[[Stream[Any], Stream[Any]], Stream[Any]]) -> Build:
    def build() -> tuple[list[Stream[Any]], list[Any]]:
        a, b = Stream(), Stream()
        return [a, b], op(a, b).sink_to_list()
    return build


PIPELINES: dict[str, Build] = {
    "scan": one(lambda s: s.scan(add)),
    "scan_start": one(lambda s: s.scan(add, start=100)),
    "scan_keyed": one(lambda s: s.scan(lambda a, x: [*a, x], start=[], key=lambda x: x % 3)),
    "scan_returns_state": one(lambda s: s.scan(
        lambda a, x: (a + x, a * x), start=1, returns_state=True, with_state=True)),
    "frequencies": one(lambda s: s.map(lambda x: x % 4).frequencies()),
    "slice": one(lambda s: s.slice(1, None, 3)),
    "unique": one(lambda s: s.map(lambda x: x % 7).unique()),
    "unique_maxsize": one(lambda s: s.map(lambda x: x % 7).unique(maxsize=2)),
    "unique_unhashable": one(lambda s: s.map(lambda x: [x % 5]).unique(hashable=False,
                                                                      maxsize=3)),
    "partition": one(lambda s: s.partition(3)),
    "partition_keyed": one(lambda s: s.partition(2, key=lambda x: x % 2)),
    "partition_unique": one(lambda s: s.map(lambda x: x % 4).partition_unique(3)),
    "partition_unique_last": one(lambda s: s.map(lambda x: (x % 3, x)).partition_unique(
        2, key=0, keep="last")),
    "sliding_window": one(lambda s: s.sliding_window(3)),
    "sliding_window_full": one(lambda s: s.sliding_window(3, return_partial=False)),
    "collect_every_4": one(lambda s: _collect_every(s, 4)),
    "timed_window_event_time": one(lambda s: s.map(abs).timed_window(
        5, time=lambda x: x, lateness=3).on_error("skip")),
    "chain": one(lambda s: s.map(lambda x: x * 2).scan(add).partition(2).map(sum)
                 .sliding_window(2)),
    "zip": two(lambda a, b: a.zip(b, maxsize=1000)),
    "combine_latest": two(lambda a, b: a.combine_latest(b)),
    "zip_latest": two(lambda a, b: a.zip_latest(b)),
    "union_scan": two(lambda a, b: a.union(b).scan(add)),
}


def _collect_every(s: Stream[Any], n: int) -> Stream[Any]:
    collector = s.collect()
    s.filter(lambda x: x % n == n - 1).sink(collector.flush)
    return collector


def feed(sources: list[Stream[Any]], items: list[tuple[int, int]]) -> None:
    for which, x in items:
        sources[which % len(sources)].emit(x)


def close(sources: list[Stream[Any]]) -> None:
    for s in sources:
        s.close()


items_strategy = st.lists(st.tuples(st.integers(0, 1), st.integers(-20, 20)), max_size=40)


@pytest.mark.parametrize("name", sorted(PIPELINES))
@settings(max_examples=30, deadline=None)
@given(items=items_strategy, data=st.data())
def test_snapshot_restore_equals_uninterrupted_run(
        name: str, items: list[tuple[int, int]], data: st.DataObject) -> None:
    build = PIPELINES[name]
    cut = data.draw(st.integers(0, len(items)), label="cut")

    sources, expected = build()
    feed(sources, items)
    close(sources)

    first, out1 = build()
    feed(first, items[:cut])
    snap = pickle.loads(pickle.dumps(snapshot_graph(first[0])))
    feed(first, items[cut:cut + 3])  # the first run goes on a little, then dies
    second, out2 = build()
    restore_graph(second[0], snap)
    feed(second, items[cut:])
    close(second)
    emitted_before = _emitted_count(build, items[:cut])
    assert out1[:emitted_before] + out2 == expected


def _emitted_count(build: Build, items: list[tuple[int, int]]) -> int:
    sources, out = build()
    feed(sources, items)
    return len(out)


def test_snapshot_is_isolated_from_later_elements() -> None:
    source = Stream()
    node = source.partition(3)
    node.sink_to_list()
    source.emit(1)
    snap = snapshot_graph(source)
    source.emit(2)
    assert snap.states[1] == {"_buffer": {None: [1]}}
    assert node._buffer == {None: [1, 2]}


def test_one_snapshot_restores_into_two_graphs_that_go_their_own_ways() -> None:
    def build() -> tuple[Stream[Any], list[Any], list[Any]]:
        source: Stream[Any] = Stream()
        windows = source.timed_window(10, time=lambda x: x).sink_to_list()
        totals = source.scan(add, start=0, key=lambda x: "k").sink_to_list()
        return source, windows, totals

    first, _, _ = build()
    first.emit(1)
    snap = snapshot_graph(first)
    (a, windows_a, totals_a), (b, windows_b, totals_b) = build(), build()
    restore_graph(a, snap)
    restore_graph(b, snap)
    a.emit(2)  # only a sees 2
    b.emit(3)
    a.close()
    b.close()
    assert (windows_a, totals_a) == ([[1, 2]], [("k", 3)])
    assert (windows_b, totals_b) == ([[1, 3]], [("k", 4)])
    restore_graph(a, snap)  # and once more: the snapshot is as it was taken
    assert snapshot_graph(a).states == snap.states


def test_restore_refuses_a_different_graph_naming_the_node() -> None:
    source = Stream()
    source.scan(add, stream_name="totals").sink_to_list()
    snap = snapshot_graph(source)

    other = Stream()
    other.map(abs).sink_to_list()
    with pytest.raises(Exception, match=r"node 1: the graph has map\(abs\), the checkpoint "
                                        r"has accumulate 'totals'"):
        restore_graph(other, snap)

    longer = Stream()
    longer.scan(add, stream_name="totals").sink_to_list()
    longer.map(str)
    with pytest.raises(Exception, match=r"graph has 4 nodes, the checkpoint 3; node 3 "
                                        r"\(map\(str\)\)"):
        restore_graph(longer, snap)

    shorter = Stream()
    shorter.scan(add, stream_name="totals")
    with pytest.raises(Exception, match=r"checkpoint node 2 \(sink_to_list\) is not in"):
        restore_graph(shorter, snap)

    renamed = Stream()
    renamed.scan(add, stream_name="sums").sink_to_list()
    with pytest.raises(Exception, match=r"accumulate\(add\) 'sums', the checkpoint has "
                                        r"accumulate 'totals'"):
        restore_graph(renamed, snap)


def test_restore_refuses_a_node_keeping_other_state_naming_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    source = Stream()
    totals = source.scan(add, start=0, stream_name="totals")
    totals.sink_to_list()
    snap = snapshot_graph(source)
    # The same node as another version of the library keeps it.
    monkeypatch.setattr(type(totals), "_state", ("state", "count"))
    with pytest.raises(Exception, match=r"node 1: accumulate\(add\) 'totals' keeps \['state', "
                                        r"'count'\] here, the checkpoint \['state'\]"):
        restore_graph(source, snap)


def test_unpicklable_state_names_the_node() -> None:
    from streams.state import CheckpointError, write_checkpoint

    source = Stream()
    source.scan(lambda s, x: x, stream_name="holder").sink_to_list()
    source.emit(lambda: None)  # a lambda cannot be pickled
    with pytest.raises(CheckpointError, match=r"state of accumulate.*'holder' cannot be saved"):
        write_checkpoint("/nonexistent-never-created", source)


def test_graph_snapshot_lists_every_node_in_walk_order() -> None:
    source = Stream(stream_name="in")
    source.map(str).unique().sink_to_list()
    snap = snapshot_graph(source)
    assert isinstance(snap, GraphSnapshot)
    assert [(n["index"], n["operator"], n["name"], n["state"]) for n in snap.nodes] == [
        (0, "stream", "in", []),
        (1, "map", None, []),
        (2, "unique", None, ["seen"]),
        (3, "sink_to_list", None, []),
    ]
    assert snap.states == (None, None, {"seen": {}}, None)
