"""Keyed state with expiry: scan(..., ttl=, time=) and stateful_map(..., ttl=, on_expire=)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import Stream
from streams.spec import build

# Elements are (key, time, id).
Element = tuple[str, int, int]

events = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 80)), max_size=40).map(
    lambda xs: [(k, t, i) for i, (k, t) in enumerate(xs)])


def count(n: int, x: Element) -> int:
    return n + 1


def counts_reference(xs: list[Element], ttl: int) -> list[tuple[str, int]]:
    """Running counts per key, a key forgotten once time is more than ttl past it."""
    state: dict[str, int] = {}
    last: dict[str, float] = {}
    now = -math.inf
    out = []
    for k, t, _ in xs:
        now = max(now, t)
        for j in [j for j in last if now - last[j] > ttl]:
            del last[j]
            state.pop(j, None)
        state[k] = state.get(k, 0) + 1
        last[k] = max(last.get(k, -math.inf), t)
        out.append((k, state[k]))
    return out


@settings(max_examples=200, deadline=None)
@given(xs=events, ttl=st.integers(1, 30))
def test_scan_with_ttl_forgets_exactly_the_keys_idle_longer_than_ttl(
        xs: list[Element], ttl: int) -> None:
    source = Stream()
    out = source.scan(count, start=0, key=0, ttl=ttl, time=1).sink_to_list()
    now = -math.inf
    before: dict[str, tuple[float, int]] = {}  # key -> (its last time, its count)
    for x in xs:
        source.emit(x)
        k, t, _ = x
        now = max(now, t)
        got = out[-1][1]
        if k in before and now - before[k][0] <= ttl:
            assert got == before[k][1] + 1  # seen within ttl: never dropped
        before[k] = (max(before[k][0], t) if got > 1 else t, got)
    assert out == counts_reference(xs, ttl)


def test_scan_without_ttl_keeps_every_key() -> None:
    source = Stream()
    L = source.scan(count, start=0, key=0).sink_to_list()
    for x in [("a", 0, 0), ("a", 1000, 1)]:
        source.emit(x)
    assert L == [("a", 1), ("a", 2)]


def sessionize(n: int, x: Element) -> tuple[int | None, list[Any]]:
    """Count a key's elements; an element with id divisible by 7 ends the key."""
    if x[2] % 7 == 6:
        return None, [("end", x[0], n + 1)]
    return n + 1, []


@settings(max_examples=200, deadline=None)
@given(xs=events, ttl=st.integers(1, 30))
def test_every_key_expires_once_with_its_state_or_is_discarded_by_the_function(
        xs: list[Element], ttl: int) -> None:
    source = Stream()
    L = source.stateful_map(sessionize, start=0, key=0, ttl=ttl, time=1,
                            on_expire=lambda k, n: [("expired", k, n)]).sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    # Every element is counted once: in a run that ended, or expired, or ran to the close.
    assert sum(n for _, _, n in L) == len(xs)
    assert {kind for kind, _, _ in L} <= {"end", "expired"}


def test_on_expire_fires_when_event_time_passes_and_at_close() -> None:
    source = Stream()
    node = source.stateful_map(lambda n, x: (n + 1, []), start=0, key=0, ttl=10, time=1,
                               on_expire=lambda k, n: [(k, n)])
    L = node.sink_to_list()
    source.emit(("a", 0))
    source.emit(("b", 5))
    source.emit(("a", 10))
    assert L == []  # 10 - 0 is not more than ttl
    source.emit(("c", 21))  # a (10) and b (5) idle for more than 10 seconds
    assert L == [("b", 1), ("a", 2)]
    source.close()
    assert L == [("b", 1), ("a", 2), ("c", 1)]


@pytest.mark.parametrize("result", ["a:1", {"a": 1}, b"a1"])
def test_on_expire_returning_one_string_or_mapping_fails_not_its_pieces(result: Any) -> None:
    # As the function's own outputs: one str would go as its characters, a
    # dict as its keys.
    from streams import NodeError

    source = Stream()
    node = source.stateful_map(lambda n, x: (n + 1, []), start=0, key=0, ttl=1, time=1,
                               on_expire=lambda k, n: result)
    L = node.sink_to_list()
    source.emit(("a", 0))
    with pytest.raises(NodeError, match="on_expire's result must be a list of elements"):
        source.emit(("b", 5))
    assert L == []


def test_outputs_of_expiry_come_before_the_elements_own() -> None:
    source = Stream()
    node = source.stateful_map(lambda n, x: (n + 1, [("saw", x[0])]), start=0, key=0, ttl=1,
                               time=1, on_expire=lambda k, n: [("gone", k)])
    L = node.sink_to_list()
    source.emit(("a", 0))
    source.emit(("a", 5))  # a itself expired first, then counted from start again
    assert L == [("saw", "a"), ("gone", "a"), ("saw", "a")]
    assert node.state == {"a": 1}


def test_a_key_discarded_by_the_function_does_not_expire() -> None:
    source = Stream()
    node = source.stateful_map(lambda n, x: (None, []), start=0, key=0, ttl=1, time=1,
                               on_expire=lambda k, n: [k])
    L = node.sink_to_list()
    source.emit(("a", 0))
    source.emit(("b", 10))
    source.close()
    assert L == []


def test_a_failing_on_expire_at_close_goes_to_the_error_policy() -> None:
    source = Stream()
    node = source.stateful_map(lambda n, x: (n + 1, []), start=0, key=0, ttl=1, time=1,
                               on_expire=lambda k, n: [1 / 0]).on_error("route")
    errors = node.errors.sink_to_list()
    source.emit(("a", 0))
    source.close()
    assert [(r.element, type(r.exception)) for r in errors] == [(("a", 1), ZeroDivisionError)]


def test_keys_expired_by_an_element_the_function_fails_on_still_give_their_outputs() -> None:
    def clicks(n: int, x: tuple[str, int, bool]) -> tuple[int, list[Any]]:
        if x[2]:
            raise ValueError("bad record")
        return n + 1, []

    source = Stream()
    node = source.stateful_map(clicks, start=0, key=0, ttl=10, time=1,
                               on_expire=lambda k, n: [(k, n)]).on_error("route")
    L, errors = node.sink_to_list(), node.errors.sink_to_list()
    for x in [("a", 0, False), ("a", 1, False), ("b", 2, False), ("c", 30, True)]:
        source.emit(x)  # 30 expires a and b, then the function fails on c
    assert L == [("a", 2), ("b", 1)]
    assert [r.element for r in errors] == [("c", 30, True)]


def test_a_failing_on_expire_is_the_expiring_keys_error_and_the_element_goes_on() -> None:
    def summary(k: str, n: int) -> list[Any]:
        if k == "b":
            raise RuntimeError("no summary for b")
        return [("gone", k, n)]

    source = Stream()
    node = source.stateful_map(lambda n, x: (n + 1, []), start=0, key=0, ttl=10, time=1,
                               on_expire=summary).on_error("route")
    L, errors = node.sink_to_list(), node.errors.sink_to_list()
    for x in [("a", 0), ("b", 1), ("c", 50)]:
        source.emit(x)
    assert L == [("gone", "a", 1)]
    assert [(r.element, type(r.exception)) for r in errors] == [(("b", 1), RuntimeError)]
    assert node.state == {"c": 1}  # c was taken in, though b's summary failed before it


@pytest.mark.parametrize(("make", "message"), [
    (lambda s: s.scan(count, start=0, key=0, ttl=5), r"scan\(\): ttl= needs time="),
    (lambda s: s.scan(count, start=0, ttl=5, time=1), r"scan\(\): ttl= needs key="),
    (lambda s: s.scan(count, start=0, key=0, time=1), r"scan\(\): time= only serves"),
    (lambda s: s.scan(count, start=0, key=0, ttl=-1, time=1), r"scan\(\): ttl must be"),
    (lambda s: s.scan(count, start=0, key=0, ttl=1e303, time=1),
     r"scan\(\): ttl must be at most 1.7e302 seconds"),
    (lambda s: s.scan(count, start=0, key=0, ttl=1e-7, time=1),
     r"scan\(\): ttl must be at least a microsecond"),
    (lambda s: s.stateful_map(count, key=0, ttl=5), r"stateful_map\(\): ttl= needs time="),
    (lambda s: s.stateful_map(count, key=0, on_expire=print),
     r"stateful_map\(\): on_expire= is called when a key expires"),
])
def test_bad_arguments_fail_when_the_graph_is_built(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(Stream())


def test_a_non_callable_on_expire_is_refused() -> None:
    with pytest.raises(TypeError, match=r"stateful_map\(\) takes on_expire="):
        Stream().stateful_map(count, key=0, ttl=5, time=1, on_expire=3)


@pytest.mark.parametrize("make", [
    lambda s: s.scan(count, start=0, key=0, ttl=7, time=1),
    lambda s: s.stateful_map(sessionize, start=0, key=0, ttl=7, time=1,
                             on_expire=lambda k, n: [("expired", k, n)]),
], ids=["scan", "stateful_map"])
@settings(max_examples=60, deadline=None)
@given(xs=events, cut=st.integers(0, 40))
def test_a_snapshot_restored_into_a_rebuilt_node_continues_the_same(
        make: Any, xs: list[Element], cut: int) -> None:
    source = Stream()
    expected = make(source).sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    source = Stream()
    first = make(source)
    out = first.sink_to_list()
    for x in xs[:cut]:
        source.emit(x)
    again_source = Stream()
    again = build(first.describe(), [again_source])
    again.restore(first.snapshot())
    again.sink(out.append)
    for x in xs[cut:]:
        again_source.emit(x)
    again_source.close()
    assert out == expected


def test_with_ttl_keys_are_not_declared_independent() -> None:
    # The event time that expires keys is shared by all keys: an engine must
    # not split the keys apart (Spark's per-key state store would).
    assert Stream().scan(count, start=0, key=0).describe().traits.key == 0
    assert Stream().scan(count, start=0, key=0, ttl=5, time=1).describe().traits.key is None
    spec = Stream().stateful_map(sessionize, key=0, ttl=5, time=1).describe()
    assert spec.traits.key is None and spec.traits.stateful
