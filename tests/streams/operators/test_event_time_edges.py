"""Event time at its edges (windows, sessions, joins, ttl): float and bad times, ties, failures."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams import NodeError, Stream, Window
from streams.spec import build
from tests.streams.operators.test_event_windows import (
    each_window_kind,
    run,
    sliding_reference,
    windows_of,
)

# Times on a 0.01 grid, as floats: 0.3, 0.6, 0.7 ... are not their decimals.
grid_events = st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 300)), max_size=30).map(
    lambda xs: [(k, n / 100, i) for i, (k, n) in enumerate(xs)])
grid_windows = st.sampled_from([(0.1, 0.1), (0.3, 0.1), (0.2, 0.05), (0.07, 0.07), (1.1, 0.3)])


@settings(max_examples=150, deadline=None)
@given(xs=grid_events, shape=grid_windows, lateness=st.sampled_from([0, 0.1, 0.3, 10]),
       keyed=st.booleans())
def test_float_times_land_in_the_windows_of_their_microsecond(
        xs: list[Any], shape: tuple[float, float], lateness: float, keyed: bool) -> None:
    # Each element is in every window whose microsecond bounds hold its
    # microsecond, as Spark's window() cuts them: 0.6 is in [0.6, 0.7), not
    # [0.5, 0.6), though 6 * 0.1 is 0.6000000000000001 in floats.
    size, slide = shape
    out, late = run(lambda s: s.timed_window(size, slide=slide, time=1, lateness=lateness,
                                             key=0 if keyed else None), xs)
    assert (out, late) == sliding_reference(xs, size, slide, lateness, keyed)


@settings(max_examples=100, deadline=None)
@given(xs=grid_events, shape=grid_windows, keyed=st.booleans())
def test_a_windows_bounds_hold_each_of_its_elements(
        xs: list[Any], shape: tuple[float, float], keyed: bool) -> None:
    size, slide = shape
    out, late = run(lambda s: s.timed_window(size, slide=slide, time=1, lateness=10,
                                             key=0 if keyed else None, bounds=True), xs)
    assert late == []
    placed = 0
    for w in out:
        window = w[1] if keyed else w
        for x in window.elements:
            assert round(window.start * 1e6) <= round(x[1] * 1e6) < round(window.end * 1e6)
            placed += 1
    assert placed == sum(len(windows_of(x[1], size, slide)) for x in xs)


def test_a_tumbling_window_of_a_tenth_holds_six_tenths_once_in_its_own_window() -> None:
    xs = [("a", 0.55, 0), ("a", 0.6, 1)]
    out, _ = run(lambda s: s.timed_window(0.1, time=1, bounds=True), xs)
    assert [(w.start, w.end, [x[1] for x in w.elements]) for w in out] == [
        (0.5, 0.6, [0.55]), (0.6, 0.7, [0.6])]


def test_sizes_under_a_microsecond_fail_when_the_graph_is_built() -> None:
    with pytest.raises(ValueError, match=r"timed_window\(\): slide must be at least a microsecond"):
        Stream().timed_window(1, slide=1e-7, time=0)
    with pytest.raises(ValueError, match=r"session_window\(\): gap must be at least a microsecond"):
        Stream().session_window(1e-7, time=0)


def test_a_checkpoint_of_sessions_in_seconds_restores() -> None:
    # Before sessions were kept in microseconds a checkpoint held seconds.
    first = Stream().session_window(0.6, time=1, key=0, bounds=True)
    first.update(("a", 0.3))
    saved = first.snapshot()
    assert saved.pop("_units") == "micros"
    del saved["_unsent"]  # older still
    # Nor the key of a session's first element.
    saved["_sessions"] = {"a": [[0.3, 0.3, *s[2:4]] for s in saved["_sessions"]["a"]]}
    source = Stream()
    again = build(first.describe(), [source])
    again.restore(saved)
    out = again.sink_to_list()
    source.emit(("a", 0.9))  # a gap after 0.3: the same session
    source.close()
    assert out == [("a", Window(0.3, 1.5, [("a", 0.3), ("a", 0.9)]))]


def test_a_checkpoint_of_a_join_in_seconds_restores() -> None:
    # Before the join kept its elements' times in microseconds a checkpoint held seconds.
    left, right = Stream(), Stream()
    first = left.join(right, key=0, within=0.3, time=1, lateness=1)
    first.update(("a", 0.8), who=left)
    first.update(("b", 2.0), who=right)
    saved = first.snapshot()
    assert saved.pop("_units") == "micros"
    saved["_sides"] = tuple({k: {seq: (us / 1e6, x) for seq, (us, x) in held.items()}
                             for k, held in side.items()} for side in saved["_sides"])
    saved["_heaps"] = tuple([(us / 1e6, seq, k) for us, seq, k in heap]
                            for heap in saved["_heaps"])
    a, b = Stream(), Stream()
    again = build(first.describe(), [a, b])
    again.restore(saved)
    out = again.sink_to_list()
    b.emit(("a", 1.1))  # 0.3 after the left's 0.8, to the microsecond
    assert out == [(("a", 0.8), ("a", 1.1))]
    assert again.held == 3


# -- times that are not times --------------------------------------------------------------

windowed = pytest.mark.parametrize("make", [
    lambda s: s.timed_window(1, time=lambda x: x),
    lambda s: s.timed_window(2, slide=1, time=lambda x: x),
    lambda s: s.timed_window(1, time=lambda x: x, key=lambda x: 0),
    lambda s: s.session_window(1, time=lambda x: x),
    lambda s: s.scan(lambda n, x: n + 1, start=0, key=lambda x: 0, ttl=5, time=lambda x: x),
], ids=["tumbling", "sliding", "keyed", "session", "scan_ttl"])


class Stamp:
    """A time that is not a datetime but has a ``timestamp()``, as pandas' Timestamp."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def timestamp(self) -> float:
        return self.seconds

    def __repr__(self) -> str:
        return f"Stamp({self.seconds})"


@windowed
@pytest.mark.parametrize(("bad", "error", "message"), [
    (math.nan, ValueError, "an event time must be a finite number of seconds, got nan"),
    (math.inf, ValueError, "an event time must be a finite number of seconds, got inf"),
    (-math.inf, ValueError, "an event time must be a finite number of seconds, got -inf"),
    (Stamp(math.inf), ValueError, "an event time must be a finite number of seconds, got inf"),
    (None, TypeError, "an event time must be a number of seconds or a datetime, got None"),
    ("3", TypeError, "an event time must be a number of seconds or a datetime, got '3'"),
    (True, TypeError, "an event time must be a number of seconds or a datetime, got True"),
    # An int is exact, but its microseconds are counted as a float's.
    (10 ** 303, ValueError, "an event time must be within 1.7e302 seconds of 1970"),
    (10 ** 400, ValueError, "an event time must be within 1.7e302 seconds of 1970"),
])
def test_a_bad_time_is_the_nodes_error_and_the_node_goes_on(
        make: Any, bad: Any, error: type, message: str) -> None:
    # A NaN compares false with everything: taken as a time it would sit in
    # no window, or keep a session open for ever. It is refused, by name.
    source = Stream()
    node = make(source).on_error("route")
    out, errors = node.sink_to_list(), node.errors.sink_to_list()
    for t in [0.5, bad, 0.7, 3]:
        source.emit(t)
    source.close()
    assert [(r.element, type(r.exception)) for r in errors] == [(bad, error)]
    assert str(errors[0].exception).startswith(message)
    if node.describe().operator == "accumulate":  # scan: the counts per key
        assert [n for _, n in out] == [1, 2, 3]
    else:
        held = [x for w in out for x in (w[1] if isinstance(w, tuple) else w)]
        assert sorted(set(held)) == [0.5, 0.7, 3]


@each_window_kind
def test_a_time_beyond_microseconds_is_refused_saying_so(make: Any) -> None:
    # Windows count time in microseconds: 1e303 s has none a float holds.
    source = Stream()
    errors = make(source).on_error("route").errors.sink_to_list()
    source.emit(1e303)
    assert str(errors[0].exception) == ("an event time must be within 1.7e302 seconds of 1970 "
                                        "(it is counted in microseconds), got 1e+303")


# -- ties --------------------------------------------------------------------------------


@pytest.mark.parametrize("order", [[0, 5], [5, 0]])
def test_an_element_exactly_a_gap_away_joins_the_session_in_either_order(order: list[int]) -> None:
    # A session [0, 0] with gap 5 ends at 5 and closes once the watermark is
    # past 5: an element at 5 arriving after 0 joins it, as it would before.
    xs = [("a", t, i) for i, t in enumerate(order)]
    out, late = run(lambda s: s.session_window(5, time=1), xs)
    assert late == []
    assert [sorted(x[1] for x in w) for w in out] == [[0, 5]]


@pytest.mark.parametrize("order", [[0.3, 0.9], [0.9, 0.3]])
def test_a_time_a_gap_of_tenths_after_another_joins_its_session(order: list[float]) -> None:
    # In floats 0.3 + 0.6 is 0.8999999999999999; to the microsecond, as
    # Spark compares them, 0.9 is exactly a gap after 0.3.
    xs = [("a", t, i) for i, t in enumerate(order)]
    out, late = run(lambda s: s.session_window(0.6, time=1, key=0, bounds=True), xs)
    assert late == []
    assert [(k, w.start, w.end, sorted(x[1] for x in w.elements)) for k, w in out] == [
        ("a", 0.3, 1.5, [0.3, 0.9])]


# -- a downstream failure ------------------------------------------------------------------


@pytest.mark.parametrize(("make", "xs", "expected"), [
    (lambda s: s.timed_window(2, slide=1, time=lambda x: x), [0, 0.5, 10, 11],
     [[0, 0.5], [0, 0.5], [10], [10, 11], [11]]),
    (lambda s: s.timed_window(1, time=1, key=0), [("a", 0), ("b", 0.5), ("a", 10), ("a", 11)],
     [("a", [("a", 0)]), ("b", [("b", 0.5)]), ("a", [("a", 10)]), ("a", [("a", 11)])]),
    (lambda s: s.session_window(1, time=1, key=0), [("a", 0), ("b", 0.5), ("a", 10), ("a", 11)],
     [("a", [("a", 0)]), ("b", [("b", 0.5)]), ("a", [("a", 10), ("a", 11)])]),
    (lambda s: s.timed_window(1, time=lambda x: x, lateness=1), [0, 0.5, 1.5, 10, 11],
     [[0, 0.5], [1.5], [10], [11]]),
], ids=["sliding", "keyed", "session", "tumbling"])
def test_windows_closed_together_are_not_lost_when_a_downstream_node_fails_on_one(
        make: Any, xs: list[Any], expected: list[Any]) -> None:
    source = Stream()
    node = make(source)
    seen: list[Any] = []

    def fails_once(w: Any) -> None:
        seen.append(w)
        if len(seen) == 1:
            raise RuntimeError("the sink is down")

    node.sink(fails_once)
    *head, second_last, last = xs
    for x in head:
        source.emit(x)
    with pytest.raises(NodeError, match="the sink is down"):
        source.emit(second_last)  # closes two windows; the first fails downstream
    source.emit(last)
    source.close()
    assert seen == expected  # the failed window was seen once; the rest later, in order


def test_a_checkpoint_from_before_unsent_windows_were_kept_restores() -> None:
    first = Stream().timed_window(2, slide=1, time=1, key=0)
    first.update(("a", 1))
    saved = first.snapshot()
    del saved["_unsent"]  # as a checkpoint written by an earlier version holds
    source = Stream()
    again = build(first.describe(), [source])
    again.restore(saved)
    out = again.sink_to_list()
    source.close()
    assert out == [("a", [("a", 1)]), ("a", [("a", 1)])]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("last", "gap", "lateness"), [(-15, 5, 10), (0.1, 0.2, 0), (1e9, 1, 1e-3)])
def test_a_session_says_at_which_largest_time_it_closes(last: float, gap: float,
                                                        lateness: float) -> None:
    # Dask runs key groups apart and asks each node when its first session
    # closes: the least largest time whose watermark, to the microsecond, is
    # past the session's end. Near zero the floats are dense (a session
    # ending at -10 with lateness 10 closes at about 0): found in a few
    # dozen steps. Another key's element at that time closes it, one a
    # float earlier does not.
    node = Stream().session_window(gap, time=1, key=0, lateness=lateness)
    node.update(("a", last))
    m = node._next_close()
    for t, closed in [(m, True), (math.nextafter(m, -math.inf), False)]:
        source = Stream()
        out = source.session_window(gap, time=1, key=0, lateness=lateness).sink_to_list()
        source.emit(("a", last))
        source.emit(("b", t))
        assert (out == [("a", [("a", last)])]) is closed


def in_micros(x: tuple[str, float, int]) -> tuple[str, int, int]:
    """An element with its time as whole microseconds, on which float and integer agree."""
    return (x[0], round(x[1] * 1e6), x[2])


# Times on a 0.1 grid, few of them: sessions of gaps of tenths meet often.
tenths_events = st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 30)), max_size=12).map(
    lambda xs: [(k, n / 10, i) for i, (k, n) in enumerate(xs)])


@settings(max_examples=200, deadline=None)
@given(xs=tenths_events, gap=st.sampled_from([0.1, 0.2, 0.3, 0.6, 0.7]),
       lateness=st.sampled_from([0, 0.1, 0.3, 10]), keyed=st.booleans())
@example(xs=[("a", 0.3, 0), ("a", 0.9, 1)], gap=0.6, lateness=0, keyed=False)
@example(xs=[("a", 0.9, 0), ("a", 0.3, 1)], gap=0.6, lateness=0, keyed=True)
def test_float_times_join_the_sessions_of_their_microseconds(
        xs: list[Any], gap: float, lateness: float, keyed: bool) -> None:
    # Sessions are cut as Spark's session_window() cuts them: on each time's
    # microsecond. In floats 0.3 + 0.6 is 0.8999999999999999, which put 0.9,
    # a gap after 0.3, in a session of its own. The reference: the same
    # elements as whole microseconds, on which float and integer agree.
    out, late = run(lambda s: s.session_window(gap, time=1, lateness=lateness,
                                               key=0 if keyed else None), xs)
    expected, expected_late = run(lambda s: s.session_window(
        round(gap * 1e6), time=1, lateness=round(lateness * 1e6), key=0 if keyed else None),
        [in_micros(x) for x in xs])
    as_micros = [(w[0], [in_micros(x) for x in w[1]]) if keyed else [in_micros(x) for x in w]
                 for w in out]
    assert (as_micros, [in_micros(x) for x in late]) == (expected, expected_late)


def run_join(xs: list[Any], within: float, lateness: float) -> tuple[list[Any], list[Any]]:
    """``xs`` (the even ids on the left, the odd on the right) joined by key; pairs and late."""
    left, right = Stream(), Stream()
    node = left.join(right, key=0, within=within, time=1, lateness=lateness)
    out, late = node.sink_to_list(), node.late.sink_to_list()
    for x in xs:
        (left, right)[x[2] % 2].emit(x)
    return out, late


@settings(max_examples=200, deadline=None)
@given(xs=tenths_events, within=st.sampled_from([0, 0.1, 0.3, 0.7]),
       lateness=st.sampled_from([0, 0.1, 0.3, 10]))
@example(xs=[("a", 1.1, 0), ("a", 0.8, 1)], within=0.3, lateness=10)
@example(xs=[("a", 1.1, 0), ("a", 1.1, 1), ("a", 0.8, 2)], within=0, lateness=0.3)
def test_float_times_join_the_partners_of_their_microseconds(
        xs: list[Any], within: float, lateness: float) -> None:
    # The join compares times as Spark compares timestamps: to the
    # microsecond. In floats 1.1 - 0.8 is 0.30000000000000004, which kept two
    # times 0.3 apart out of a join within 0.3; and 1.1 - 0.3 is
    # 0.8000000000000002, which made 0.8 late under a watermark of 1.1 with
    # lateness 0.3.
    out, late = run_join(xs, within, lateness)
    expected = run_join([in_micros(x) for x in xs], round(within * 1e6), round(lateness * 1e6))
    assert ([(in_micros(a), in_micros(b)) for a, b in out],
            [in_micros(x) for x in late]) == expected


@settings(max_examples=200, deadline=None)
@given(xs=tenths_events, ttl=st.sampled_from([0.1, 0.2, 0.3, 0.7]))
@example(xs=[("a", 0.8, 0), ("b", 1.1, 1), ("a", 1.1, 2)], ttl=0.3)
def test_float_times_expire_keys_on_their_microseconds(xs: list[Any], ttl: float) -> None:
    # A key seen 0.3 before the largest time is within ttl=0.3, though
    # 1.1 - 0.8 is 0.30000000000000004 in floats: it keeps its state.
    def counts(xs: list[Any], ttl: float) -> list[Any]:
        source = Stream()
        out = source.scan(lambda n, x: n + 1, start=0, key=0, ttl=ttl, time=1).sink_to_list()
        for x in xs:
            source.emit(x)
        return out

    assert counts(xs, ttl) == counts([in_micros(x) for x in xs], round(ttl * 1e6))


def test_a_naive_pandas_timestamp_is_local_time_as_a_naive_datetime(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    from datetime import datetime

    from streams.operators._late import seconds_of

    pd = pytest.importorskip("pandas")
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        naive = datetime(2024, 1, 1, 12, 30)
        assert seconds_of(pd.Timestamp(naive)) == seconds_of(naive) == naive.timestamp()
        source = Stream()
        windows = source.timed_window(3600, time=lambda x: x).sink_to_list()
        source.emit(datetime(2024, 1, 1, 12, 0))
        source.emit(pd.Timestamp(2024, 1, 1, 12, 30))  # the same hour, not 4.5 hours before
        source.close()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert [len(w) for w in windows] == [2]


def test_a_finite_source_into_a_window_with_late_sunk_is_done_when_start_returns() -> None:
    source = Stream.from_iterable([1, 12, 3, 25])
    window = source.timed_window(10, time=lambda x: x)
    on_time, late = window.sink_to_list(), window.late.sink_to_list()
    source.start()  # no loop runs here: nothing in the graph waits on a timer
    assert (on_time, late) == ([[1], [12], [25]], [3])


@pytest.mark.parametrize(("times", "lateness", "sessions"), [
    ([0, 6, 1], 0, [[0], [6, 1]]),  # reaches the open session
    ([0, 7, 1], 1, [[0], [1], [7]]),  # starts its own, not yet closed
])
def test_an_element_within_a_gap_of_an_emitted_session_is_on_time_where_its_own_is_open(
        times: list[int], lateness: int, sessions: list[list[int]]) -> None:
    # As documented (and in Flink): emitted sessions are not kept to be compared with.
    source = Stream()
    node = source.session_window(5, time=lambda x: x, lateness=lateness)
    out, late = node.sink_to_list(), node.late.sink_to_list()
    for t in times:
        source.emit(t)
    source.close()
    assert (out, late) == (sessions, [])


def test_sessions_of_keys_of_other_types_ending_together_are_emitted() -> None:
    source = Stream()
    out = source.session_window(1.5, time=1, key=0).sink_to_list()
    source.emit((None, 0))
    source.emit(("a", 0))  # the same end: the keys are never compared
    source.close()
    assert sorted(out, key=repr) == [("a", [("a", 0)]), (None, [(None, 0)])]


def test_a_session_checkpoint_of_an_earlier_version_restores() -> None:
    from dataclasses import replace

    from streams.snapshot import restore_graph, snapshot_graph

    def graph() -> tuple[Stream[Any], list[Any]]:
        source = Stream()
        return source, source.session_window(5, time=lambda x: x).sink_to_list()

    first, _ = graph()
    first.emit(0)
    snap = snapshot_graph(first)
    # As a checkpoint from before the unsent sessions were kept holds it.
    older = replace(snap, nodes=tuple(
        {**e, "state": [n for n in e["state"] if n != "_unsent"]} for e in snap.nodes),
        states=tuple(s if s is None or "_unsent" not in s
                     else {k: v for k, v in s.items() if k != "_unsent"} for s in snap.states))
    again, out = graph()
    restore_graph(again, older)
    again.emit(3)
    again.close()
    assert out == [[0, 3]]


def test_pandas_nat_as_a_time_says_it_has_none() -> None:
    from streams.operators._late import seconds_of

    pd = pytest.importorskip("pandas")
    with pytest.raises(ValueError, match=r"got NaT \(NaTType\), which has no time"):
        seconds_of(pd.NaT)


def test_a_join_checkpoint_of_times_in_seconds_restores() -> None:
    from dataclasses import replace

    from streams.snapshot import restore_graph, snapshot_graph

    def graph() -> tuple[Stream[Any], Stream[Any], list[Any]]:
        left, right = Stream(), Stream()
        return left, right, left.join(right, key=0, within=10, time=1).sink_to_list()

    left, _, _ = graph()
    left.emit(("k", 1.5))
    snap = snapshot_graph(left)
    i = next(n for n, e in enumerate(snap.nodes) if e["operator"] == "join")
    # As a checkpoint from before the join kept microseconds holds it.
    state = {k: v for k, v in snap.states[i].items() if k != "_units"}  # type: ignore[union-attr]
    state["_sides"] = ({"k": {0: (1.5, ("k", 1.5))}}, {})
    state["_heaps"] = ([(1.5, 0, "k")], [])
    nodes, states = list(snap.nodes), list(snap.states)
    nodes[i] = {**nodes[i], "state": [n for n in nodes[i]["state"] if n != "_units"]}
    states[i] = state
    older = replace(snap, nodes=tuple(nodes), states=tuple(states))
    left, right, pairs = graph()
    restore_graph(left, older)
    right.emit(("k", 2))
    assert pairs == [(("k", 1.5), ("k", 2))]
