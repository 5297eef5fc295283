"""accumulate/scan, frequencies, slice, unique, collect."""

from __future__ import annotations

import operator

import pytest

from streams import NO_DEFAULT, Stream


def test_scan_returns_state_emits_the_output() -> None:
    def running_mean(state, x):
        n, total = state
        n, total = n + 1, total + x
        return (n, total), total / n

    source = Stream()
    out = source.scan(running_mean, start=(0, 0), returns_state=True).sink_to_list()
    for x in [2, 4, 6]:
        source.emit(x)
    assert out == [2.0, 3.0, 4.0]


def test_scan_with_state_emits_state_and_output() -> None:
    source = Stream()
    out = source.accumulate(operator.add, start=0, with_state=True).sink_to_list()
    source.emit(1)
    source.emit(2)
    assert out == [(1, 1), (3, 3)]


def test_scan_passes_kwargs_to_func() -> None:
    source = Stream()
    out = source.scan(lambda acc, x, scale: acc + x * scale, start=0, scale=10).sink_to_list()
    source.emit(1)
    source.emit(2)
    assert out == [10, 30]


def test_keyed_scan_copies_a_mutable_start_per_key() -> None:
    def append(acc, x):
        acc.append(x[1])
        return acc

    source = Stream()
    out = source.scan(append, start=[], key=0, with_state=True).pluck(0).sink_to_list()
    for x in [("a", 1), ("b", 2), ("a", 3)]:
        source.emit(x)
    assert out == [[1, 3], [2], [1, 3]]  # same list object per key, separate per key


def test_keyed_scan_without_start_emits_first_element_per_key() -> None:
    source = Stream()
    out = source.scan(lambda s, x: (x[0], s[1] + x[1]), key=0).sink_to_list()
    for x in [("a", 1), ("a", 2), ("b", 5)]:
        source.emit(x)
    assert out == [("a", ("a", 1)), ("a", ("a", 3)), ("b", ("b", 5))]


def test_scan_describe_reports_its_parameters() -> None:
    spec = Stream().scan(operator.add).describe()
    assert spec.operator == "accumulate" and spec.func is operator.add
    assert spec.params["start"] is NO_DEFAULT and spec.params["key"] is None


def test_frequencies_emits_snapshots() -> None:
    source = Stream()
    out = source.frequencies().sink_to_list()
    source.emit("a")
    source.emit("a")
    assert out == [{"a": 1}, {"a": 2}]


def test_slice_end_closes_downstream_and_disconnects() -> None:
    source = Stream()
    out = source.slice(0, 3).partition(2).sink_to_list()
    for i in range(10):
        source.emit(i)
    assert out == [(0, 1), (2,)]
    assert source.downstreams == []


def test_unique_unhashable_keys() -> None:
    source = Stream()
    out = source.unique(hashable=False).sink_to_list()
    for x in [[1], [2], [1], {"a": 1}, {"a": 1}]:
        source.emit(x)
    assert out == [[1], [2], {"a": 1}]


def test_unique_key_by_index() -> None:
    source = Stream()
    out = source.unique(key=0).sink_to_list()
    for x in [(1, "a"), (1, "b"), (2, "c")]:
        source.emit(x)
    assert out == [(1, "a"), (2, "c")]


def test_collect_flush_on_close_and_explicit() -> None:
    source = Stream()
    c = source.collect()
    out = c.sink_to_list()
    source.emit(1)
    c.flush()
    c.flush()
    source.emit(2)
    source.emit(3)
    source.close()
    assert out == [(1,), (), (2, 3)]


@pytest.mark.parametrize("op", ["scan", "unique", "slice", "collect", "partition",
                                "sliding_window", "zip"])
def test_snapshot_restore_round_trip(op: str) -> None:
    def build():
        s = Stream()
        node = {
            "scan": lambda: s.scan(operator.add, start=0),
            "unique": lambda: s.unique(maxsize=3),
            "slice": lambda: s.slice(1, None, 2),
            "collect": lambda: s.collect(),
            "partition": lambda: s.partition(3),
            "sliding_window": lambda: s.sliding_window(3),
            "zip": lambda: s.zip(s.map(lambda x: -x).filter(lambda x: x % 2)),
        }[op]()
        return s, node, node.sink_to_list()

    first = [1, 2, 3, 2, 5]
    second = [6, 7, 1, 9]
    s1, n1, out1 = build()
    for x in first:
        s1.emit(x)
    state = n1.snapshot()
    s2, n2, out2 = build()
    n2.restore(state)
    for x in second:
        s1.emit(x)
        s2.emit(x)
    s1.close()
    s2.close()
    assert out2 == out1[len(out1) - len(out2):]
