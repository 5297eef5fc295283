"""A NaN key is one key: within a run, and after a snapshot restores its state."""

from __future__ import annotations

import math
import pickle
from typing import Any

from streams import Stream
from streams.operators._checks import NAN_KEY
from streams.snapshot import restore_graph, snapshot_graph


def nan() -> float:
    return float("nan")  # a new object each call, as each element's missing value is


def test_every_nan_key_shares_one_state() -> None:
    source = Stream()
    out = source.scan(lambda s, x: s + x[1], start=0, key=0).sink_to_list()
    for x in [(nan(), 1), ("a", 10), (nan(), 2)]:
        source.emit(x)
    assert [(repr(k), total) for k, total in out] == [("nan", 1), ("'a'", 10), ("nan", 3)]
    assert list(source.downstreams[0].state) == [NAN_KEY, "a"]


def test_keyed_windows_and_lookup_take_nan_as_one_key() -> None:
    source, table = Stream(), Stream()
    sessions = source.session_window(5, time=1, key=0).sink_to_list()
    joined = source.lookup(table, key=0, default=None).sink_to_list()
    table.emit((nan(), "missing"))
    source.emit((nan(), 0))
    source.emit((nan(), 1))
    source.close()
    assert [(math.isnan(k), [t for _, t in xs]) for k, xs in sessions] == [(True, [0, 1])]
    assert [v for _, v in joined] == ["missing", "missing"]


def _joined(restore: bool) -> list[Any]:
    def build() -> tuple[Stream[Any], Stream[Any], list[Any]]:
        left, right = Stream(), Stream()
        return left, right, left.join(right, key=0, within=1, time=1).sink_to_list()

    left, right, out = build()
    left.emit((nan(), 0))
    right.emit((nan(), 0.5))
    if restore:
        snap = pickle.loads(pickle.dumps(snapshot_graph(left)))
        left, right, out = build()
        restore_graph(left, snap)
    right.emit(("a", 5))  # the watermark passes the NaN elements: forgotten
    left.emit(("a", 5))
    return [(repr(a), repr(b)) for a, b in out]


def test_a_join_restored_with_a_nan_key_forgets_it_as_the_run_would() -> None:
    # The key is held by side and in the expiry heap: after a pickle, two
    # NaN objects, which found each other no more (KeyError from emit()).
    assert _joined(restore=True)[-1:] == _joined(restore=False)[-1:] == [
        ("('a', 5)", "('a', 5)")]


def test_a_nan_key_restored_still_expires() -> None:
    def build() -> tuple[Stream[Any], Stream[Any], list[Any]]:
        source = Stream()
        node = source.stateful_map(lambda n, x: (n + 1, []), start=0, key=0, ttl=1, time=1,
                                   on_expire=lambda k, n: [(repr(k), n)])
        return source, node, node.sink_to_list()

    source, node, _ = build()
    source.emit((nan(), 0))
    snap = pickle.loads(pickle.dumps(snapshot_graph(source)))
    source, node, out = build()
    restore_graph(source, snap)
    source.emit(("b", 5))
    assert out == [("nan", 1)]  # it was forgotten at restore: no output, state for ever
    source.close()
    assert out == [("nan", 1), ("'b'", 1)] and node.state == {}


def test_scan_ttl_drops_a_restored_nan_key() -> None:
    def build() -> tuple[Stream[Any], Stream[Any]]:
        source = Stream()
        return source, source.scan(lambda s, x: s + 1, start=0, key=0, ttl=1, time=1)

    source, _ = build()
    source.emit((nan(), 0))
    snap = pickle.loads(pickle.dumps(snapshot_graph(source)))
    source, node = build()
    restore_graph(source, snap)
    source.emit(("b", 5))
    assert node.state == {"b": 1}
