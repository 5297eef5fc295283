"""Event-time windows' fused steps behave as their ``update`` (the reference).

The fused steps of ``timed_window(..., time=)`` (tumbling, sliding, keyed)
and ``session_window`` append an element to the window the previous one
joined without looking the window up; these cases run the same input
through the compiled code and under ``unfused()`` and compare everything
seen downstream: windows, late elements, errors, and what a snapshot holds.
"""

from __future__ import annotations

import copy
import linecache
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams import Stream, fusion
from streams.fusion import compile_push, is_fusable

Make = Callable[[Stream[Any]], Stream[Any]]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def event_time(x: tuple[Any, str]) -> Any:
    t = x[0]
    if t is None:
        raise ValueError("no time")
    return t


MAKERS: dict[str, Make] = {
    "tumbling": lambda s: s.timed_window(5, time=event_time),
    "tumbling_late": lambda s: s.timed_window(5, time=event_time, lateness=4),
    "tumbling_float": lambda s: s.timed_window(0.3, time=event_time, lateness=0.2),
    "sliding": lambda s: s.timed_window(6, slide=2, time=event_time),
    "sliding_late": lambda s: s.timed_window(6, slide=2, time=event_time, lateness=3),
    "sliding_uneven": lambda s: s.timed_window(5, slide=2, time=event_time, lateness=1),
    "sliding_float": lambda s: s.timed_window(0.3, slide=0.1, time=event_time),
    "keyed": lambda s: s.timed_window(4, time=event_time, key=1, lateness=2),
    "keyed_sliding": lambda s: s.timed_window(4, slide=2, time=event_time, key=1),
    "session": lambda s: s.session_window(3, time=event_time, lateness=2),
    "session_keyed": lambda s: s.session_window(3, time=event_time, key=1),
}

times = st.one_of(
    st.integers(0, 40),
    st.integers(0, 400).map(lambda n: n / 10),
    st.integers(0, 40).map(lambda n: EPOCH + timedelta(seconds=n)),
    st.none(),  # the time function raises
)
elements = st.lists(st.tuples(times, st.sampled_from("abc")), max_size=40)


def run(make: Make, xs: list[Any], fused: bool, *, policy: str = "route",
        late: bool = False, bomb: Any = None, cut: int | None = None,
        rewind: tuple[int, dict[str, Any]] | None = None) -> list[Any]:
    """Everything seen downstream of ``make``'s node for ``xs``.

    ``bomb``: an element whose window makes the sink raise; ``cut``: where
    the node is snapshot and restored into a rebuilt one; ``rewind``: a
    state to restore the node to after ``xs``, and where to replay from.
    """
    seen: list[Any] = []

    def sink(w: Any) -> None:
        seen.append(("window", w))
        if bomb is not None and bomb in (w[1] if isinstance(w, tuple) else w):
            raise RuntimeError("sink failed")

    def build() -> tuple[Stream[Any], Stream[Any]]:
        source: Stream[Any] = Stream()
        node = make(source.filter(lambda x: x[1] != "z"))
        node.on_error(policy)  # type: ignore[arg-type]
        node.sink(sink)
        if policy == "route":
            node.errors.sink(lambda r: seen.append(("error", r.element,
                                                    type(r.exception).__name__)))
        if late:
            node.late.sink(lambda x: seen.append(("late", x)))
        return source, node

    def go() -> None:
        source, node = build()
        for i, x in enumerate(xs):
            if i == cut:
                state = node.snapshot()
                seen.append(("state", repr(state)))
                source, node = build()
                node.restore(state)
            try:
                source.emit(x)
            except Exception as e:
                seen.append(("raised", type(e).__name__))
        if rewind is not None:
            # Back to an earlier state of the same node (a checkpoint's
            # rollback), then the elements from there again.
            node.restore(copy.deepcopy(rewind[1]))  # restore() takes the objects
            for x in xs[rewind[0]:]:
                source.emit(x)
        try:
            source.close()
        except Exception as e:
            seen.append(("raised at close", type(e).__name__))
        seen.append(("state", repr(node.snapshot())))

    if fused:
        go()
    else:
        with fusion.unfused():
            go()
    return seen


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_the_windows_are_fused(name: str) -> None:
    source: Stream[Any] = Stream()
    node = MAKERS[name](source)
    node.sink_to_list()
    assert is_fusable(node)
    push = compile_push(source)
    text = "".join(linecache.getlines(push.__code__.co_filename))
    assert "time_" in text and "update_" not in text


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(MAKERS)), xs=elements,
       policy=st.sampled_from(["route", "skip"]), late=st.booleans())
def test_fused_windows_equal_the_reference(name: str, xs: list[Any], policy: str,
                                           late: bool) -> None:
    make = MAKERS[name]
    assert run(make, xs, True, policy=policy, late=late) == run(make, xs, False, policy=policy,
                                                                late=late)


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(sorted(MAKERS)), xs=elements, cut=st.integers(0, 40))
def test_fused_windows_restored_mid_stream_equal_the_reference(
        name: str, xs: list[Any], cut: int) -> None:
    make = MAKERS[name]
    assert run(make, xs, True, cut=cut) == run(make, xs, False, cut=cut)


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(sorted(MAKERS)), xs=elements, at=st.integers(0, 40))
@example(name="tumbling", xs=[(1, "a"), (2, "b")], at=1)
@example(name="sliding", xs=[(1, "a"), (2, "b")], at=1)
def test_fused_windows_rewound_to_a_snapshot_equal_the_reference(
        name: str, xs: list[Any], at: int) -> None:
    make = MAKERS[name]
    xs = [x for x in xs if x[0] is not None]
    at %= len(xs) + 1
    source: Stream[Any] = Stream()
    node = make(source)
    node.late.sink_to_list()  # late elements are no failure here
    for x in xs[:at]:
        source.emit(x)
    rewind = (at, node.snapshot())
    assert (run(make, xs, True, late=True, rewind=rewind)
            == run(make, xs, False, late=True, rewind=rewind))


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(sorted(MAKERS)), xs=elements, bomb=st.integers(0, 39))
def test_a_sink_failing_on_a_window_leaves_the_same_state(
        name: str, xs: list[Any], bomb: int) -> None:
    make = MAKERS[name]
    xs = [(t, f"{tag}{i}") for i, (t, tag) in enumerate(xs)]
    target = xs[bomb] if bomb < len(xs) else None
    assert run(make, xs, True, bomb=target) == run(make, xs, False, bomb=target)


def test_the_raise_policy_names_the_node_in_both() -> None:
    make = MAKERS["sliding"]
    xs = [(1, "a"), (None, "b"), (9, "c")]
    assert run(make, xs, True, policy="raise") == run(make, xs, False, policy="raise")
    assert ("raised", "NodeError[ValueError]") in run(make, xs, True, policy="raise")


def test_a_window_emitted_then_reached_again_is_late_in_the_fused_step() -> None:
    # The element after the closing one falls in the window the previous
    # element joined, which has just been emitted: late, not appended.
    source: Stream[Any] = Stream()
    window = source.timed_window(10, time=lambda x: x, lateness=0)
    out, late = window.sink_to_list(), window.late.sink_to_list()
    for t in [1, 2, 12, 3]:
        source.emit(t)
    assert out == [[1, 2]] and late == [3]


def test_from_iterable_runs_the_fused_window_step() -> None:
    xs = [(t, "a") for t in [0, 1, 5, 2, 11, 30, 12]]
    with fusion.unfused():
        reference = Stream.from_iterable(xs)
        expected = reference.timed_window(6, slide=3, time=event_time, lateness=2)
        expected_late = expected.late.sink_to_list()
        expected_out = expected.sink_to_list()
        reference.start()
    source = Stream.from_iterable(xs)
    window = source.timed_window(6, slide=3, time=event_time, lateness=2)
    late, out = window.late.sink_to_list(), window.sink_to_list()
    source.start()
    assert (out, late) == (expected_out, expected_late)
