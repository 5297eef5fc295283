"""Sliding, keyed and session windows on event time, and the ``late`` side stream."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import NodeError, Stream
from streams.operators.event_windows import SlidingTimedWindow
from streams.operators.session_windows import SessionWindow
from streams.operators.timed import LateElementError, TimedWindow
from streams.spec import EventTime, build

# Elements are (key, time, id): ids tell equal timestamps apart.
Element = tuple[str, int, int]

events = st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 60)), max_size=30).map(
    lambda xs: [(k, t, i) for i, (k, t) in enumerate(xs)])


def run(node_of: Any, xs: list[Element]) -> tuple[list[Any], list[Any]]:
    """Emit ``xs`` into ``node_of(source)``, close; what reached the node and its ``late``."""
    source = Stream()
    node = node_of(source)
    out, late = node.sink_to_list(), node.late.sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return out, late


# -- sliding windows ---------------------------------------------------------------


def windows_of(t: float, size: float, slide: float) -> list[int]:
    """Every i with i*slide <= t < i*slide + size, by brute force, in whole microseconds."""
    us, size_us, slide_us = (round(v * 1_000_000) for v in (t, size, slide))
    lo = us // slide_us - size_us // slide_us - 2
    return [i for i in range(lo, us // slide_us + 2)
            if i * slide_us <= us < i * slide_us + size_us]


def sliding_reference(xs: list[Any], size: float, slide: float, lateness: float,
                      keyed: bool) -> tuple[list[Any], list[Any]]:
    """What the windows hold, in time order, and the late elements, computed window by window."""
    windows: dict[tuple[int, Any], list[Element]] = {}
    late = []
    highest = -math.inf  # the largest time seen, in microseconds, as the bounds
    size_us, slide_us, lateness_us = (round(v * 1_000_000) for v in (size, slide, lateness))
    for x in xs:
        _, t, _ = x
        mine = windows_of(t, size, slide)
        if min(i * slide_us + size_us for i in mine) <= highest - lateness_us:
            late.append(x)
        else:
            for i in mine:
                windows.setdefault((i, x[0] if keyed else None), []).append(x)
        highest = max(highest, round(t * 1_000_000))
    order = sorted(windows, key=lambda ik: ik[0])
    return [(ik[1], windows[ik]) if keyed else windows[ik] for ik in order], late


@settings(max_examples=150, deadline=None)
@given(xs=events, size=st.integers(1, 12), per=st.integers(1, 4), lateness=st.integers(0, 15),
       keyed=st.booleans())
def test_sliding_every_element_lands_in_exactly_its_windows_or_in_late(
        xs: list[Element], size: int, per: int, lateness: int, keyed: bool) -> None:
    slide = max(1, size // per)
    out, late = run(lambda s: s.timed_window(size, slide=slide, time=1, lateness=lateness,
                                             key=0 if keyed else None), xs)
    assert (out, late) == sliding_reference(xs, size, slide, lateness, keyed)
    # Nothing lost: each element is late, or in as many windows as contain it.
    counts = {x: 0 for x in xs}
    for w in out:
        for x in (w[1] if keyed else w):
            counts[x] += 1
    for x in xs:
        expected = 0 if x in late else len(windows_of(x[1], size, slide))
        assert counts[x] == expected and late.count(x) == (x in late)


def test_sliding_windows_close_on_the_watermark_in_time_order() -> None:
    source = Stream()
    L = source.timed_window(4, slide=2, time=lambda x: x, lateness=1).sink_to_list()
    for t in [0, 1]:
        source.emit(t)
    assert L == []
    source.emit(3)  # watermark 2: [-2, 2) closes
    assert L == [[0, 1]]
    source.emit(5)  # watermark 4: [0, 4) closes
    assert L == [[0, 1], [0, 1, 3]]
    source.close()  # then [2, 6) and [4, 8)
    assert L == [[0, 1], [0, 1, 3], [3, 5], [5]]


def test_sliding_windows_on_float_times_hold_the_elements_of_their_bounds() -> None:
    xs = [0.3, 0.1, 0.25, 0.7, 0.6]
    out, late = run(lambda s: s.timed_window(0.3, slide=0.1, time=lambda x: x, lateness=1), xs)
    assert late == []
    # The bounds are in microseconds, as Spark's: 0.3 is in three windows,
    # though 3 * 0.1 is 0.30000000000000004 in floats.
    assert windows_of(0.3, 0.3, 0.1) == [1, 2, 3]
    for t in xs:
        assert sum(w.count(t) for w in out) == len(windows_of(t, 0.3, 0.1))
    for w in out:  # each list is one window: its elements share it
        assert set.intersection(*(set(windows_of(t, 0.3, 0.1)) for t in w))


def test_keyed_tumbling_windows_emit_key_and_list_per_key() -> None:
    source = Stream()
    node = source.timed_window(10, time=1, key=0)
    assert type(node) is SlidingTimedWindow and node.slide == 10
    L = node.sink_to_list()
    for x in [("a", 1), ("b", 4), ("a", 9), ("b", 12), ("a", 25)]:
        source.emit(x)
    assert L == [("a", [("a", 1), ("a", 9)]), ("b", [("b", 4)]), ("b", [("b", 12)])]
    source.close()
    assert L[-1] == ("a", [("a", 25)])


def test_a_plain_timed_window_stays_a_timed_window() -> None:
    assert type(Stream().timed_window(10, time=0)) is TimedWindow
    assert type(Stream().timed_window_unique(1.0, key=len)).__name__ == "TimedWindowUnique"


# -- session windows -----------------------------------------------------------------


def offline_sessions(xs: list[Element], gap: int, keyed: bool) -> list[Any]:
    """Sessions computed from all the data at once: split where times are more than gap apart."""
    by_key: dict[Any, list[Element]] = {}
    for x in xs:
        by_key.setdefault(x[0] if keyed else None, []).append(x)
    sessions = []
    for k, group in by_key.items():
        ordered = sorted(group, key=lambda x: x[1])
        current = [ordered[0]]
        for prev, x in itertools.pairwise(ordered):
            if x[1] - prev[1] > gap:
                sessions.append((k, current))
                current = []
            current.append(x)
        sessions.append((k, current))
    return sessions


def _as_sets(sessions: list[tuple[Any, list[Element]]]) -> list[Any]:
    return sorted((str(k), sorted(s)) for k, s in sessions)


@settings(max_examples=150, deadline=None)
@given(xs=events, gap=st.integers(1, 10), keyed=st.booleans())
def test_sessions_with_enough_lateness_are_the_offline_sessions(
        xs: list[Element], gap: int, keyed: bool) -> None:
    out, late = run(lambda s: s.session_window(gap, time=1, lateness=100,
                                               key=0 if keyed else None), xs)
    assert late == []
    got = out if keyed else [(None, w) for w in out]
    assert _as_sets(got) == _as_sets(offline_sessions(xs, gap, keyed))
    ends = [max(x[1] for x in s) + gap for _, s in got]
    assert ends == sorted(ends)  # all emitted at close, in order of their ends
    for _, s in got:
        assert [x[2] for x in s] == sorted(x[2] for x in s)  # arrival order inside


@settings(max_examples=150, deadline=None)
@given(xs=events, gap=st.integers(1, 10), lateness=st.integers(0, 10), keyed=st.booleans())
def test_sessions_hold_every_element_once_or_send_it_to_late(
        xs: list[Element], gap: int, lateness: int, keyed: bool) -> None:
    out, late = run(lambda s: s.session_window(gap, time=1, lateness=lateness,
                                               key=0 if keyed else None), xs)
    got = out if keyed else [(None, w) for w in out]
    placed = [x for _, s in got for x in s]
    assert sorted(placed + late) == sorted(xs)  # nothing lost, nothing twice
    for k, s in got:
        times = sorted(x[1] for x in s)
        assert all(b - a <= gap for a, b in itertools.pairwise(times))
        assert all((x[0] if keyed else None) == k for x in s)


def test_an_element_bridging_two_sessions_merges_them() -> None:
    source = Stream()
    L = source.session_window(5, time=lambda x: x, lateness=20).sink_to_list()
    for t in [0, 8, 4]:  # 4 is less than 5 from both
        source.emit(t)
    assert L == []
    source.emit(40)
    assert L == [[0, 8, 4]]


def test_a_session_closes_when_the_watermark_passes_its_end_plus_gap() -> None:
    source = Stream()
    L = source.session_window(5, time=lambda x: x).sink_to_list()
    source.emit(0)
    source.emit(4)
    source.emit(8)  # 8 - 4 < 5: the same session
    assert L == []
    source.emit(13)  # exactly a gap after 8: the same session
    assert L == []
    source.emit(19)  # watermark 19 > 13 + 5
    assert L == [[0, 4, 8, 13]]
    source.close()
    assert L == [[0, 4, 8, 13], [19]]


# -- the late side stream -------------------------------------------------------------

#: The three kinds of event-time window, each as ``make(source)``.
each_window_kind = pytest.mark.parametrize("make", [
    lambda s: s.timed_window(10, time=lambda x: x),
    lambda s: s.timed_window(10, slide=5, time=lambda x: x),
    lambda s: s.session_window(5, time=lambda x: x),
], ids=["tumbling", "sliding", "session"])


@each_window_kind
def test_late_elements_go_to_late_when_it_is_connected(make: Any) -> None:
    source = Stream()
    node = make(source)
    late = node.late.sink_to_list()
    errors = node.on_error("route").errors.sink_to_list()
    for t in [1, 30, 2]:
        source.emit(t)
    assert late == [2]
    assert errors == []


@each_window_kind
def test_late_elements_go_to_the_error_policy_when_nothing_sinks_late(make: Any) -> None:
    source = Stream()
    node = make(source)
    source.emit(1)
    source.emit(30)
    with pytest.raises(NodeError) as info:
        source.emit(2)
    assert isinstance(info.value.__cause__, LateElementError)
    assert "raise lateness= to accept it" in str(info.value.__cause__)
    assert node.late.downstreams == []  # created, nothing connected: the error policy
    errors = node.on_error("route").errors.sink_to_list()
    source.emit(3)
    assert [(r.element, type(r.exception)) for r in errors] == [(3, LateElementError)]


def test_the_late_stream_ends_with_its_node() -> None:
    source = Stream()
    node = source.session_window(5, time=lambda x: x)
    held = node.late.partition(10).sink_to_list()  # flushes only when late closes
    for t in [1, 30, 2]:
        source.emit(t)
    assert held == []
    source.close()
    assert held == [(2,)]


def test_the_late_stream_and_what_follows_it_are_part_of_the_graph() -> None:
    from streams.graph import walk

    source = Stream()
    node = source.session_window(5, time=lambda x: x)
    held = node.late.partition(3)  # state a checkpoint of the graph must cover
    assert held in walk(source) and node.late in walk(source)


# -- build-time checks, state ------------------------------------------------------------


@pytest.mark.parametrize(("make", "message"), [
    (lambda s: s.timed_window(5, slide=10, time=0), r"timed_window\(\): slide=10 is longer"),
    # Without time=, slide= and key= are processing-time windows
    # (tests/streams/operators/test_clock_windows.py); lateness= still needs time=.
    (lambda s: s.timed_window(5, slide=1, lateness=2), r"timed_window\(\): lateness= needs time="),
    (lambda s: s.timed_window(5, key=0, lateness=2), r"timed_window\(\): lateness= needs time="),
    (lambda s: s.timed_window(5, slide=-1, time=0), r"timed_window\(\): slide must be > 0"),
    (lambda s: s.session_window(5), r"session_window\(\): time= is required"),
    (lambda s: s.session_window(0, time=0), r"session_window\(\): gap must be > 0"),
    (lambda s: s.session_window("0s", time=0), r"session_window\(\): gap must be > 0"),
    (lambda s: s.timed_window("5s", slide="0ms", time=0), r"slide must be > 0 seconds"),
    (lambda s: s.timed_window("1e999", time=0), r"interval must be > 0 seconds"),
    (lambda s: s.session_window(5, time=0, lateness=-1), r"session_window\(\): lateness"),
])
def test_bad_arguments_fail_when_the_graph_is_built(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(Stream())


def test_an_unhashable_key_is_this_nodes_error() -> None:
    source = Stream()
    node = source.session_window(5, time=1, key=0).on_error("route")
    errors = node.errors.sink_to_list()
    source.emit(([1], 2))
    assert [type(r.exception) for r in errors] == [TypeError]


@pytest.mark.parametrize("make", [
    lambda s: s.timed_window(6, slide=2, time=1, lateness=3, key=0),
    lambda s: s.session_window(4, time=1, lateness=3, key=0),
    # As an engine rebuilds a node: its description keeps bounds=True.
    lambda s: s.timed_window(6, slide=2, time=1, lateness=3, key=0, bounds=True),
    lambda s: s.session_window(4, time=1, lateness=3, key=0, bounds=True),
], ids=["sliding", "session", "sliding_bounds", "session_bounds"])
@settings(max_examples=60, deadline=None)
@given(xs=events, cut=st.integers(0, 30))
def test_a_snapshot_restored_into_a_rebuilt_node_continues_the_same(
        make: Any, xs: list[Element], cut: int) -> None:
    expected, expected_late = run(make, xs)
    source = Stream()
    first = make(source)
    out, late = first.sink_to_list(), first.late.sink_to_list()
    for x in xs[:cut]:
        source.emit(x)
    saved = first.snapshot()
    again_source = Stream()
    again = build(first.describe(), [again_source])
    again.restore(saved)
    again.sink(out.append)
    again.late.sink(late.append)
    for x in xs[cut:]:
        again_source.emit(x)
    again_source.close()
    assert (out, late) == (expected, expected_late)


def test_the_nodes_declare_their_windows_and_no_independent_keys() -> None:
    # Spark lowers event_time to its window()/session_window() by key; key
    # (independent per-key state) does not hold: one watermark for all keys.
    sliding = Stream().timed_window(10, slide=5, time=0, key=1)
    session = Stream().session_window(10, time=0, lateness=2)
    assert sliding.describe().traits.event_time == EventTime(0, 10.0, 0.0, slide=5.0, key=1)
    assert session.describe().traits.event_time == EventTime(0, 10.0, 2.0, session=True)
    for node in [sliding, session]:
        traits = node.describe().traits
        assert traits.key is None and traits.stateful and traits.local_only is None
    assert isinstance(Stream().session_window(1, time=0), SessionWindow)


@pytest.mark.parametrize("make", [
    lambda s: s.timed_window(10, time=0),
    lambda s: s.timed_window(10, slide=5, time=0),
    lambda s: s.session_window(10, time=0, key=1),
], ids=["tumbling", "sliding", "session"])
def test_with_late_sunk_a_window_declares_no_event_time(make: Any) -> None:
    # An engine's window() cannot hand late elements to node.late: the node
    # then asks to run as itself, element by element.
    node = make(Stream())
    assert node.describe().traits.event_time is not None
    node.late.sink_to_list()
    traits = node.describe().traits
    assert traits.event_time is None and traits.stateful


def test_on_an_asynchronous_stream_emit_waits_for_windows_and_late_elements() -> None:
    import asyncio

    got: list[Any] = []

    async def slow_sink(x: Any) -> None:
        await asyncio.sleep(0)  # a yield to the loop (no wait): the sink really suspends
        got.append(x)

    async def main() -> None:
        source = Stream(asynchronous=True)
        node = source.timed_window(4, slide=2, time=lambda x: x)
        node.sink(slow_sink)
        node.late.sink(slow_sink)
        for t in [1, 9, 0]:
            await source.emit(t)
        assert got == [[1], [1], 0]  # both windows of 1 closed at 9, then 0 is late
        await source.aclose()
        assert got[3:] == [[9], [9]]

    asyncio.run(main())


@pytest.mark.parametrize("make", [
    lambda s: s.timed_window(10, slide=5, time=1, key=0),
    lambda s: s.session_window(5, time=1, key=0),
], ids=["sliding", "session"])
def test_a_restored_node_closes_its_windows_on_the_watermark_not_only_at_close(
        make: Any) -> None:
    # What a node keeps to find its due windows fast is derived from its state,
    # and rebuilt by restore(): a restored window closes as the watermark passes.
    first = make(Stream())
    first.update(("a", 1))
    first.update(("b", 2))
    source = Stream()
    again = build(first.describe(), [source])
    again.restore(first.snapshot())
    out = again.sink_to_list()
    source.emit(("c", 100))
    assert [k for k, _ in out][:2] == ["a", "b"]


#: An int event time past 9e9 s (a millisecond stamp taken as seconds), where
#: ``t * 1e6`` is not the exact ``t * 10**6``.
BIG = 1_700_000_000_125


@pytest.mark.parametrize("build", [
    lambda s: s.timed_window(10, time=1, key=0),
    lambda s: s.timed_window(10, slide=5, time=1, key=0),
    lambda s: s.session_window(10, time=1, key=0),
], ids=["tumbling", "sliding", "session"])
def test_an_element_at_the_largest_int_time_seen_is_not_late(build: Any) -> None:
    # The watermark takes the time's microsecond as the element's is taken:
    # with the exact product, the same time fell behind its own watermark.
    source: Stream[Any] = Stream()
    node = build(source)
    late = node.late.sink_to_list()
    for x in [("k", BIG + 5), ("k", BIG + 5), ("k", BIG + 5)]:
        source.emit(x)
    source.close()
    assert late == []


def test_an_interval_join_on_int_times_pairs_the_element_at_the_watermark() -> None:
    left: Stream[Any] = Stream()
    right: Stream[Any] = Stream()
    joined = left.join(right, key=0, within=0, time=1)
    pairs, late = joined.sink_to_list(), joined.late.sink_to_list()
    for side in (left, right, left):
        side.emit(("k", BIG))
    assert (len(pairs), late) == (2, [])


def test_a_keyed_scan_with_ttl_on_int_times_gives_the_same_after_a_restore() -> None:
    from streams.state import restore_graph, snapshot_graph

    def build() -> tuple[Stream[Any], list[Any]]:
        s: Stream[Any] = Stream()
        return s, s.scan(lambda n, x: n + 1, start=0, key=0, ttl=1, time=1).sink_to_list()

    from streams.operators.window_bounds import event_micros

    # A time whose next second is within ttl as the elements' times are taken,
    # and beyond it by the exact product the restore took before.
    t = next(t for t in itertools.count(BIG) if event_micros(t + 1) - event_micros(t)
             <= 1_000_000 < (t + 1) * 10**6 - event_micros(t))
    events = [("a", t), ("b", t + 1), ("a", t + 1)]  # "a" within ttl: kept
    straight_source, straight = build()
    for x in events:
        straight_source.emit(x)
    first_source, first = build()
    for x in events[:2]:
        first_source.emit(x)
    snapshot = snapshot_graph(first_source)
    second_source, second = build()
    restore_graph(second_source, snapshot)
    second_source.emit(events[2])
    assert first + second == straight == [("a", 1), ("b", 1), ("a", 2)]


@pytest.mark.parametrize("closed_by", ["watermark", "close"])
def test_a_session_is_emitted_with_its_first_elements_key(closed_by: str) -> None:
    # 2.0 and 2 are one key; the session is its first element's, as a window's
    # (and Spark's): the watermark used to emit the key of its latest entry.
    source = Stream()
    out = source.session_window(1, time=0, key=1).sink_to_list()
    source.emit((1, 2.0))
    source.emit((1.5, 2))
    source.emit((2.2, "y"))  # past 2.0's first entry (1 + 1), not the session's end
    if closed_by == "watermark":
        source.emit((10, "x"))
    source.close()
    assert [(type(k), k) for k, _ in out][:1] == [(float, 2.0)]


def test_a_sessions_key_function_is_asked_once_per_element() -> None:
    # A session's key is its first element's, kept when the session opens:
    # closing it used to ask the key function again, of that element.
    asked: list[Any] = []

    def user(x: tuple[Any, float]) -> Any:
        asked.append(x)
        return x[0]

    source = Stream()
    out = source.session_window(1, time=1, key=user, lateness=5).sink_to_list()
    events = [("a", 0.0), ("b", 0.5), ("a", 2.0), ("a", 1.0), ("b", 9.0)]
    for x in events:  # ("a", 1.0) merges a's two sessions
        source.emit(x)
    source.close()
    assert asked == events
    assert out == [("b", [("b", 0.5)]), ("a", [("a", 0.0), ("a", 2.0), ("a", 1.0)]),
                   ("b", [("b", 9.0)])]
