"""Event-time windows emitted with their bounds: ``bounds=True`` gives a ``Window``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import Stream, Window
from streams.operators.event_windows import SlidingTimedWindow

# Elements are (key, time, id): ids tell equal timestamps apart.
Element = tuple[str, int, int]

events = st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 60)), max_size=30).map(
    lambda xs: [(k, t, i) for i, (k, t) in enumerate(xs)])


def run(node_of: Any, xs: list[Any]) -> list[Any]:
    """What ``node_of(source)`` emits for ``xs``; its late elements after a ``"late"`` mark."""
    source = Stream()
    node = node_of(source)
    out = node.sink_to_list()
    late = node.late.sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return out if not late else [*out, "late", *late]


def windows(out: list[Any], keyed: bool) -> list[Any]:
    """The windows of an output, keyed ones without their key."""
    if "late" in out:
        out = out[:out.index("late")]
    return [w for _, w in out] if keyed else out


@settings(max_examples=100, deadline=None)
@given(xs=events, size=st.integers(1, 12), per=st.integers(1, 4), lateness=st.integers(0, 15),
       keyed=st.booleans())
def test_sliding_windows_with_bounds_are_the_same_windows_each_with_its_bounds(
        xs: list[Element], size: int, per: int, lateness: int, keyed: bool) -> None:
    slide = max(1, size // per)
    key = 0 if keyed else None
    plain = run(lambda s: s.timed_window(size, slide=slide, time=1, lateness=lateness,
                                         key=key), xs)
    bounded = run(lambda s: s.timed_window(size, slide=slide, time=1, lateness=lateness,
                                           key=key, bounds=True), xs)
    assert [w.elements for w in windows(bounded, keyed)] == windows(plain, keyed)
    assert bounded[len(windows(bounded, keyed)):] == plain[len(windows(plain, keyed)):]  # late
    if keyed:
        n = len(windows(plain, keyed))
        assert [k for k, _ in bounded[:n]] == [k for k, _ in plain[:n]]
    for w in windows(bounded, keyed):
        assert isinstance(w, Window)
        assert w.end - w.start == size and w.start % slide == 0
        assert all(w.start <= t < w.end for _, t, _ in w.elements)


@settings(max_examples=100, deadline=None)
@given(xs=events, gap=st.integers(1, 10), lateness=st.integers(0, 10), keyed=st.booleans())
def test_a_session_is_bounded_by_its_first_time_and_one_gap_after_its_last(
        xs: list[Element], gap: int, lateness: int, keyed: bool) -> None:
    key = 0 if keyed else None
    plain = run(lambda s: s.session_window(gap, time=1, lateness=lateness, key=key), xs)
    bounded = run(lambda s: s.session_window(gap, time=1, lateness=lateness, key=key,
                                             bounds=True), xs)
    assert [w.elements for w in windows(bounded, keyed)] == windows(plain, keyed)
    assert bounded[len(windows(bounded, keyed)):] == plain[len(windows(plain, keyed)):]  # late
    for w in windows(bounded, keyed):
        times = [t for _, t, _ in w.elements]
        assert (w.start, w.end) == (min(times), max(times) + gap)


def test_bounds_are_whole_microseconds_as_on_spark() -> None:
    # 3 * 0.1 is 0.30000000000000004 as floats; Spark's window starts at 300000 us.
    out = run(lambda s: s.timed_window(0.1, time=lambda x: x, bounds=True), [0.31, 0.45])
    assert [(w.start, w.end) for w in out] == [(0.3, 0.4), (0.4, 0.5)]
    # A session starts at its first time's nearest microsecond, and ends a
    # gap after its last: 1000001 / 1e6 * 1e6 is 1000000.9999999999.
    out = run(lambda s: s.session_window(0.25, time=lambda x: x, bounds=True),
              [1 / 3, 0.5, 1_000_001 / 1e6, 1.1])
    assert [(w.start, w.end) for w in out] == [(0.333333, 0.75), (1.000001, 1.35)]


def test_datetime_times_give_bounds_in_posix_seconds() -> None:
    start = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    xs = [start + timedelta(seconds=s) for s in (1, 4, 30)]
    out = run(lambda s: s.session_window(10, time=lambda x: x, bounds=True), xs)
    assert [(datetime.fromtimestamp(w.start, UTC), w.end - w.start) for w in out] == [
        (xs[0], 13.0), (xs[2], 10.0)]


def test_a_tumbling_window_with_bounds_is_a_sliding_one_of_its_own_size() -> None:
    node = Stream().timed_window(10, time=0, bounds=True)
    assert isinstance(node, SlidingTimedWindow) and node.slide == 10
    assert node.describe().traits.event_time.bounds  # engines lower it with its bounds


@pytest.mark.parametrize("make", [
    lambda s: s.timed_window(5, bounds=True),
    lambda s: s.timed_window(5, slide=1, bounds=True),
    lambda s: s.timed_window(5, key=0, bounds=True),
])
def test_bounds_of_windows_on_the_clock_are_refused_when_the_graph_is_built(make: Any) -> None:
    with pytest.raises(ValueError, match=r"timed_window\(\): bounds=True needs time="):
        make(Stream())


@pytest.mark.parametrize("make", [
    lambda s: s.timed_window(5, time=0, bounds=1),
    lambda s: s.session_window(5, time=0, bounds="yes"),
])
def test_bounds_must_be_a_bool(make: Any) -> None:
    with pytest.raises(TypeError, match=r"bounds= must be True or False"):
        make(Stream())
