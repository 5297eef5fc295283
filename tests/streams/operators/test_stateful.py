"""stateful_map: a state (per key) that the function updates, emitting what it returns."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams import NodeError, Stream


def running_max(state: int, x: int) -> tuple[int, list[int]]:
    """Emit x when it beats the state."""
    return (x, [x]) if x > state else (state, [])


def test_emits_what_the_function_returns_and_keeps_its_state() -> None:
    source = Stream()
    out = source.stateful_map(running_max, start=-1).sink_to_list()
    for x in [3, 1, 5, 5, 7, 2]:
        source.emit(x)
    assert out == [3, 5, 7]


def test_several_outputs_keep_their_order_and_none_forgets_the_state() -> None:
    def pairs(held: list[int], x: int) -> tuple[list[int] | None, list[int]]:
        held = [*held, x]
        return (None, held) if len(held) == 2 else (held, [])

    source = Stream()
    out = source.stateful_map(pairs, start=[]).sink_to_list()
    for x in range(5):
        source.emit(x)
    assert out == [0, 1, 2, 3]
    assert source.downstreams[0].state == [4]


def test_start_is_copied_for_each_key() -> None:
    def append(held: list[Any], x: tuple[str, int]) -> tuple[list[Any], list[Any]]:
        held.append(x[1])  # mutates: each key must have its own copy
        return held, [(x[0], list(held))]

    source = Stream()
    out = source.stateful_map(append, start=[], key=0).sink_to_list()
    for x in [("a", 1), ("b", 2), ("a", 3)]:
        source.emit(x)
    assert out == [("a", [1]), ("b", [2]), ("a", [1, 3])]


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 9)), max_size=40))
def test_keyed_equals_one_unkeyed_run_per_key(xs: list[tuple[str, int]]) -> None:
    def total(n: int, x: tuple[str, int]) -> tuple[int, list[tuple[str, int]]]:
        return n + x[1], [(x[0], n + x[1])]

    source = Stream()
    keyed = source.stateful_map(total, start=0, key=lambda x: x[0]).sink_to_list()
    for x in xs:
        source.emit(x)
    for k in "abc":
        alone = Stream()
        got = alone.stateful_map(total, start=0).sink_to_list()
        for x in xs:
            if x[0] == k:
                alone.emit(x)
        assert got == [y for y in keyed if y[0] == k]


def test_a_function_of_the_wrong_shape_is_named() -> None:
    source = Stream()
    source.stateful_map(lambda s, x: x).sink_to_list()
    with pytest.raises(NodeError, match=r"stateful_map.*must return \(new_state, outputs\)"):
        source.emit(1)


@pytest.mark.parametrize("output", ["hi", b"hi", {"a": 1}])
def test_one_output_not_in_a_list_is_refused_not_split(output: Any) -> None:
    source = Stream()
    out = source.stateful_map(lambda s, x: (s, output), start=0).sink_to_list()
    with pytest.raises(NodeError, match=r"outputs must be a list of elements.*\[output\]"):
        source.emit(1)
    assert out == []


def test_an_error_leaves_the_state_as_it_was_and_routes() -> None:
    def fragile(n: int, x: int) -> tuple[int, list[int]]:
        return n + 10 // x, [n + 10 // x]

    source = Stream()
    node = source.stateful_map(fragile, start=0).on_error("route")
    out, errors = node.sink_to_list(), node.errors.sink_to_list()
    for x in [5, 0, 2]:
        source.emit(x)
    assert out == [2, 7]
    assert [r.element for r in errors] == [0]


def test_snapshot_and_restore_carry_the_keys() -> None:
    source = Stream()
    node = source.stateful_map(lambda n, x: (n + 1, [n + 1]), start=0, key=lambda x: x)
    out = node.sink_to_list()
    source.emit("a")
    saved = node.snapshot()
    source.emit("a")
    node.restore(saved)
    source.emit("a")
    assert out == [1, 2, 2]


def test_bad_arguments_fail_when_built() -> None:
    with pytest.raises(TypeError, match=r"stateful_map\(\) takes a function"):
        Stream().stateful_map(3)  # type: ignore[arg-type]


def _counting(source: Stream[Any], ttl: float = 100) -> Stream[Any]:
    return source.stateful_map(lambda n, x: (n + 1, [(x[0], n + 1)]), start=0, key=0,
                               ttl=ttl, time=1, on_expire=lambda k, n: [("expired", k, n)])


def _failing_on_expired(out: list[Any]) -> Any:
    def write(v: Any) -> None:
        if v[0] == "expired" and v[1] == "a":
            raise RuntimeError("rejects a's expiry record")
        out.append(v)
    return write


def test_a_failure_downstream_of_one_expired_key_keeps_back_no_other_at_close() -> None:
    source = Stream()
    out: list[Any] = []
    node = _counting(source)
    node.sink(_failing_on_expired(out))
    for x in [("a", 1), ("b", 2), ("c", 3)]:
        source.emit(x)
    with pytest.raises(NodeError, match="rejects a's expiry record"):
        source.close()
    assert out[-2:] == [("expired", "b", 1), ("expired", "c", 1)]
    assert node.state == {}


@pytest.mark.parametrize("policy", ["raise", "skip", "route"])
def test_a_failure_downstream_of_an_expired_key_is_raised_and_the_element_still_goes(
        policy: str) -> None:
    source = Stream()
    out: list[Any] = []
    node = _counting(source, ttl=1).on_error(policy)
    node.sink(_failing_on_expired(out))
    routed = node.errors.sink_to_list()
    source.emit(("a", 0))
    with pytest.raises(NodeError, match="rejects a's expiry record"):
        source.emit(("b", 5))  # a expires: the failure is downstream's, not b's
    source.emit(("b", 5.5))
    assert out == [("a", 1), ("b", 1), ("b", 2)]
    assert routed == []


@pytest.mark.parametrize("asynchronous", [False, True])
def test_every_output_goes_when_one_fails_downstream(asynchronous: bool) -> None:
    # The state took the element: emitting it again would count it twice,
    # so its other outputs must not wait for that.
    import asyncio

    source = Stream(asynchronous=asynchronous)
    seen: list[int] = []

    def sink(y: int) -> None:
        if y == 1:
            raise ValueError("no 1")
        seen.append(y)

    node = source.stateful_map(lambda n, x: (n + 1, [1, 2, 3]), start=0)
    node.sink(sink)
    with pytest.raises(NodeError, match="no 1"):
        if asynchronous:
            asyncio.run(source.emit(0))
        else:
            source.emit(0)
    assert seen == [2, 3] and node.state == 1


@pytest.mark.parametrize(("func", "on_expire", "message"), [
    (lambda n, x: (n, None), None, r"got None; return \(new_state, \[\]\) to emit nothing"),
    (lambda n, x: (n, []), lambda k, n: None, r"got None; return \[\] to emit nothing"),
])
def test_none_for_outputs_says_to_return_an_empty_list(func: Any, on_expire: Any,
                                                      message: str) -> None:
    source = Stream()
    node = source.stateful_map(func, start=0, key=0, ttl=1, time=1, on_expire=on_expire)
    with pytest.raises(Exception, match=message):
        source.emit(("a", 0))
        node.close()
