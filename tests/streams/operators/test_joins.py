"""join() (interval join on event time) and lookup() (a changing table).

The interval join is checked against a nested loop over the same inputs
(exact output, order included), for in-order, bounded out-of-order and
arbitrary input (where every element is either joined completely or
reported late); its state against the watermark; lookup() against a replay
of the table; and both against a run interrupted by a snapshot.
"""

from __future__ import annotations

import datetime as dt
import math
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streams_dask  # noqa: F401 - registers scatter()
import streams_spark  # noqa: F401 - registers to_spark()
from streams import NodeError, Stream, Tombstone
from streams.operators.joins import IntervalJoin
from streams.operators.lookup import LookupJoin
from streams.operators.timed import LateElementError
from streams.snapshot import restore_graph, snapshot_graph
from streams.spec import build

# An event: (side, id, key, time); an element is (id, key, time).
Event = tuple[int, int, int, float]


def _elements(events: list[Event]) -> list[tuple[int, tuple[int, int, float]]]:
    return [(side, (i, k, t)) for side, i, k, t in events]


def reference_join(events: list[Event], within: float, lateness: float) -> tuple[
        list[tuple[Any, Any]], list[Any], list[int]]:
    """Nested loop: each arriving element against every earlier one of the other side.

    Returns the pairs in the join's documented order (when the later one
    arrives, partners in arrival order), the late elements, and how many
    elements the join should hold after each event.
    """
    seen: list[list[tuple[int, int, float]]] = [[], []]
    max_time = [-math.inf, -math.inf]
    pairs, late, held = [], [], []
    for side, x in _elements(events):
        t = x[2]
        watermark = min(max_time) - lateness
        if t < watermark:
            late.append(x)
        else:
            for other in seen[1 - side]:
                # Times to the microsecond, as the join compares them.
                if other[1] == x[1] and abs(round(t * 1e6) - round(other[2] * 1e6)) <= round(
                        within * 1e6):
                    pairs.append((x, other) if side == 0 else (other, x))
            seen[side].append(x)
            max_time[side] = max(max_time[side], t)
        cutoff = min(max_time) - lateness - within
        held.append(sum(1 for s in seen for y in s if y[2] >= cutoff))
    return pairs, late, held


def run_join(events: list[Event], within: float, lateness: float,
             ) -> tuple[list[Any], list[Any], list[int], IntervalJoin]:
    left, right = Stream(), Stream()
    joined = left.join(right, key=1, within=within, time=2, lateness=lateness)
    assert isinstance(joined, IntervalJoin)
    joined.on_error("route")
    out, errors = joined.sink_to_list(), joined.errors.sink_to_list()
    held = []
    for side, x in _elements(events):
        (left, right)[side].emit(x)
        held.append(joined.held)
        watermark = joined.watermark  # held times are microseconds
        cutoff = (round(watermark * 1e6) - round(within * 1e6) if watermark > -math.inf
                  else -math.inf)
        assert all(us >= cutoff for heap in joined._heaps for us, _, _ in heap)
    assert all(isinstance(r.exception, LateElementError) for r in errors)
    return out, [r.element for r in errors], held, joined


def in_order(draw: Any, n: int) -> list[float]:
    times, t = [], 0.0
    for _ in range(n):
        t += draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 5.0]))
        times.append(t)
    return times


@st.composite
def join_inputs(draw: Any, disorder: str) -> tuple[list[Event], float, float]:
    n = draw(st.integers(0, 40))
    within = draw(st.sampled_from([0.0, 1.0, 2.5, 10.0]))
    lateness = draw(st.sampled_from([0.0, 1.0, 3.0]))
    base = in_order(draw, n)
    if disorder == "none":
        times = base
    elif disorder == "bounded":
        # Each time at most `lateness` behind an earlier one: nothing is late.
        times = [b - draw(st.sampled_from([0.0, lateness / 2, lateness])) for b in base]
    else:
        times = [draw(st.sampled_from([0.0, 1.0, 2.0, 4.0, 8.0, 16.0])) for _ in range(n)]
    events = [(draw(st.integers(0, 1)), i, draw(st.integers(0, 2)), t)
              for i, t in enumerate(times)]
    return events, within, lateness


@pytest.mark.parametrize("disorder", ["none", "bounded"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_in_order_or_within_lateness_join_equals_the_nested_loop(
        disorder: str, data: st.DataObject) -> None:
    events, within, lateness = data.draw(join_inputs(disorder))
    out, late, held, _ = run_join(events, within, lateness)
    expected, expected_late, expected_held = reference_join(events, within, lateness)
    assert late == expected_late == []
    assert out == expected
    assert held == expected_held


@settings(max_examples=150, deadline=None)
@given(join_inputs("any"))
def test_any_order_each_element_is_joined_completely_or_reported_late(
        case: tuple[list[Event], float, float]) -> None:
    events, within, lateness = case
    out, late, held, _ = run_join(events, within, lateness)
    expected, expected_late, expected_held = reference_join(events, within, lateness)
    assert late == expected_late
    assert out == expected
    assert held == expected_held
    # The elements on time, joined by a nested loop that knows nothing of
    # watermarks, give the same pairs: a late element alone loses pairs.
    on_time = [e for e in events if (e[1], e[2], e[3]) not in late]
    assert out == reference_join(on_time, within, math.inf)[0]


def test_state_stays_bounded_by_the_watermark_over_a_long_run() -> None:
    left, right = Stream(), Stream()
    joined = left.join(right, key=0, within=5, time=1)
    out = joined.sink_to_list()
    most = 0
    for t in range(10_000):
        left.emit((t % 3, t))
        right.emit((t % 3, t + 0.5))
        most = max(most, joined.held)
    # Times from watermark - 5 to watermark + 1 on each side: about 14 elements.
    assert most <= 14
    assert joined.held <= 14
    assert len(out) == sum(1 for a in range(10_000) for b in range(a - 6, a + 6)
                           if 0 <= b < 10_000 and a % 3 == b % 3 and abs(a - b - 0.5) <= 5)


def test_one_silent_side_keeps_the_other_side_held() -> None:
    # The join's watermark is the smaller of the two: a side that never
    # emits holds it at minus infinity, so the other side is kept whole.
    left, right = Stream(), Stream()
    joined = left.join(right, key=0, within=1, time=1)
    for t in range(50):
        left.emit(("k", t))
    assert joined.held == 50 and joined.watermark == -math.inf
    right.emit(("k", 49))
    assert joined.watermark == 49
    assert joined.held == 3  # left 48 and 49 (within 1 of the watermark) and the right one


@pytest.mark.parametrize("ended", [0, 1])
def test_a_closed_side_frees_the_other_and_the_state_stops_growing(ended: int) -> None:
    # A closed side sends no partner again: the other side's held elements
    # wait for nothing, and its later ones are paired but not held. The
    # pairs and what is late are those of a join whose side stayed open.
    def run(close: bool) -> tuple[list[Any], list[Any], IntervalJoin]:
        left, right = Stream(), Stream()
        joined = left.join(right, key=0, within=2, time=1)
        assert isinstance(joined, IntervalJoin)
        out, late = joined.sink_to_list(), joined.late.sink_to_list()
        sides = (left, right)
        for t in range(20):
            sides[0].emit(("k", t))
            sides[1].emit(("k", t + 0.5))
        if close:
            sides[ended].close()
        for t in range(5_000):  # the open side goes on, on time; the watermark stays
            sides[1 - ended].emit(("k", 20 + t % 7))
        return out, late, joined

    out, late, joined = run(close=True)
    expected_out, expected_late, still_open = run(close=False)
    assert (out, late) == (expected_out, expected_late)
    assert late == []
    assert len(out) > 1_000  # the open side's later elements met the closed side's held ones
    assert still_open.held > 5_000  # the open side's elements, waiting for partners
    # The closed side's elements within reach of the watermark, no more.
    assert joined.held == len(joined._heaps[ended]) <= 4
    assert not joined._closed  # the join ends when both sides have


def test_late_elements_go_to_the_error_policy_named() -> None:
    left, right = Stream(), Stream()
    left.join(right, key=0, within=1, time=1, lateness=2)
    left.emit(("a", 10))
    right.emit(("a", 10))
    left.emit(("a", 8))  # watermark 8: on time
    with pytest.raises(NodeError, match=r"join.*event time 7 is below the watermark 8.0.*"
                                        r"raise lateness="):
        left.emit(("a", 7))
    with pytest.raises(LateElementError):
        right.emit(("a", 1))


def test_pairs_of_keys_and_times_and_datetimes() -> None:
    orders, payments = Stream(), Stream()
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    joined = orders.join(payments, key=("order", "ref"), within="1min",
                         time=(lambda o: o["at"], lambda p: p["paid"]))
    out = joined.sink_to_list()
    orders.emit({"order": 1, "at": t0})
    payments.emit({"ref": 1, "paid": t0 + dt.timedelta(seconds=30)})
    payments.emit({"ref": 1, "paid": t0 + dt.timedelta(seconds=90)})
    assert [(o["order"], p["paid"].second) for o, p in out] == [(1, 30)]


def test_output_order_is_when_the_later_element_arrives() -> None:
    left, right = Stream(), Stream()
    out = left.join(right, key=0, within=10, time=1).sink_to_list()
    right.emit(("k", 1))
    right.emit(("k", 2))
    left.emit(("k", 3))       # pairs with both right elements, in their arrival order
    right.emit(("k", 4))      # pairs with the left one
    assert out == [(("k", 3), ("k", 1)), (("k", 3), ("k", 2)), (("k", 3), ("k", 4))]


def test_a_failing_key_or_time_goes_to_the_error_policy() -> None:
    left, right = Stream(), Stream()
    joined = left.join(right, key=0, within=1, time=1).on_error("route")
    errors = joined.errors.sink_to_list()
    left.emit(("a",))              # no time
    left.emit(([1], 2))            # an unhashable key
    left.emit(("a", "noon"))       # not a time
    assert [type(r.exception) for r in errors] == [IndexError, TypeError, TypeError]
    assert joined.held == 0


@pytest.mark.parametrize("call, error, message", [
    (lambda a, b: a.join(b, key=0, within=-1, time=1), ValueError, r"join\(\): within must"),
    (lambda a, b: a.join(b, key=0, within=1e303, time=1), ValueError,
     r"join\(\): within must be at most 1.7e302 seconds"),
    (lambda a, b: a.join(b, key=0, within=1, time=1, lateness=1e303), ValueError,
     r"join\(\): lateness must be at most 1.7e302 seconds"),
    (lambda a, b: a.join(b, key=0, within="soon", time=1), ValueError,
     r"join\(\): cannot read within 'soon'"),
    (lambda a, b: a.join(b, key=0, within=1, time=1, lateness=-2), ValueError,
     r"join\(\): lateness must be >= 0"),
    (lambda a, b: a.join(b, key=(0, 1, 2), within=1, time=1), ValueError,
     r"join\(\): key= as a sequence must be a pair \(left, right\), got 3"),
    (lambda a, b: a.join(b, key=None, within=1, time=1), TypeError, r"join\(\): key= is requ"),
    (lambda a, b: a.join(b, key=0, within=1, time=None), TypeError, r"join\(\): time= is req"),
    (lambda a, b: a.join([1, 2], key=0, within=1, time=1), TypeError,
     r"join\(\): right must be a Stream, got \[1, 2\]"),
    (lambda a, b: a.join(a, key=0, within=1, time=1), ValueError,
     r"join\(\): both inputs are.*join it with a pass-through branch"),
    (lambda a, b: a.join(b, within=1, time=1), TypeError,
     r"join\(\): .*missing.*'key'.*it takes join\(right, key, within, time"),
    (lambda a, b: a.lookup({"a": 1}, key=0), TypeError,
     r"lookup\(\): table must be a Stream, got \{'a': 1\}"),
    (lambda a, b: a.lookup(b, key=None), TypeError, r"lookup\(\): key= is required"),
    (lambda a, b: a.lookup(a, key=0), ValueError, r"lookup\(\): both inputs are"),
])
def test_bad_arguments_fail_at_build_time_naming_the_operator(
        call: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call(Stream(), Stream())


def test_a_third_input_is_refused() -> None:
    a, b = Stream(), Stream()
    for node in (a.join(b, key=0, within=1, time=1), a.lookup(b, key=0)):
        with pytest.raises(ValueError, match=r"cannot take .* as a third.*union\(\)"):
            Stream().connect(node)


def test_a_self_join_through_a_pass_through_branch() -> None:
    s = Stream()
    out = s.join(Stream(s), key=0, within=0, time=1).sink_to_list()
    s.emit(("a", 1))
    assert out == [(("a", 1), ("a", 1))]


# -- lookup ------------------------------------------------------------------

TableEvent = tuple[str, int, Any]  # ("table", key, value | None | "tomb") / ("main", id, key)


@st.composite
def lookup_inputs(draw: Any) -> list[TableEvent]:
    events: list[TableEvent] = []
    for i in range(draw(st.integers(0, 40))):
        if draw(st.booleans()):
            value = draw(st.one_of(st.integers(0, 9), st.none(), st.just("tomb")))
            events.append(("table", draw(st.integers(0, 3)), value))
        else:
            events.append(("main", i, draw(st.integers(0, 3))))
    return events


def replay(events: list[TableEvent], default: Any) -> tuple[list[Any], list[Any]]:
    table: dict[int, Any] = {}
    out, missing = [], []
    for kind, a, b in events:
        if kind == "table":
            if b is None or b == "tomb":
                table.pop(a, None)
            else:
                table[a] = b
        elif b in table:
            out.append(((a, b), table[b]))
        elif default is not None:
            out.append(((a, b), default))
        else:
            missing.append((a, b))
    return out, missing


def feed_lookup(events: list[TableEvent], main: Stream[Any], table: Stream[Any]) -> None:
    for kind, a, b in events:
        if kind == "table":
            table.emit(Tombstone(a) if b == "tomb" else (a, b))
        else:
            main.emit((a, b))


@settings(max_examples=150, deadline=None)
@given(lookup_inputs(), st.sampled_from([None, -1]))
def test_lookup_equals_a_replay_of_the_table(events: list[TableEvent], default: Any) -> None:
    main, table = Stream(), Stream()
    kwargs = {} if default is None else {"default": default}
    joined = main.lookup(table, key=1, **kwargs).on_error("route")
    out, errors = joined.sink_to_list(), joined.errors.sink_to_list()
    feed_lookup(events, main, table)
    expected, missing = replay(events, default)
    assert out == expected
    assert [r.element for r in errors] == missing
    assert all(isinstance(r.exception, KeyError) for r in errors)


def test_a_missing_key_raises_by_default_saying_what_to_do() -> None:
    main, table = Stream(), Stream()
    main.lookup(table, key=0).sink_to_list()
    with pytest.raises(KeyError, match=r"lookup.*key 'x' is not in the table.*default="):
        main.emit(("x", 1))


def test_lookup_records_with_a_table_key_and_tombstones() -> None:
    events, users = Stream(), Stream()
    out = events.lookup(users, key="user", table_key="id", default=None).sink_to_list()
    users.emit({"id": 1, "name": "a"})
    users.emit({"id": 1, "name": "b"})
    events.emit({"user": 1})
    users.emit(Tombstone(1))
    events.emit({"user": 1})
    assert out == [({"user": 1}, {"id": 1, "name": "b"}), ({"user": 1}, None)]


def test_a_malformed_table_element_goes_to_the_error_policy() -> None:
    main, table = Stream(), Stream()
    joined = main.lookup(table, key=0)
    with pytest.raises(TypeError, match=r"lookup.*\(key, value\) pairs, got 5.*table_key="):
        table.emit(5)
    # A two-field record would unpack into its field names: refused, not misread.
    for record in [{"id": 1, "name": "a"}, "ab", {1, 2}]:
        with pytest.raises(TypeError, match=r"lookup.*\(key, value\) pairs, got .*table_key="):
            table.emit(record)
    assert joined.table == {}


# -- snapshot and restore ---------------------------------------------------


def build_join() -> tuple[Stream[Any], Stream[Any], list[Any]]:
    left, right = Stream(), Stream()
    joined = left.join(right, key=1, within=2.5, time=2, lateness=1.0).on_error("route")
    joined.errors.map(lambda r: ("late", r.element)).sink_to_list()
    out = joined.sink_to_list()
    return left, right, out


@settings(max_examples=60, deadline=None)
@given(join_inputs("any"), st.data())
def test_join_restored_from_a_snapshot_continues_as_an_uninterrupted_run(
        case: tuple[list[Event], float, float], data: Any) -> None:
    events, _, _ = case
    cut = data.draw(st.integers(0, len(events)))
    left, right, whole = build_join()
    for side, x in _elements(events):
        (left, right)[side].emit(x)
    left, right, first = build_join()
    for side, x in _elements(events[:cut]):
        (left, right)[side].emit(x)
    saved = pickle.dumps(snapshot_graph(left))
    left, right, second = build_join()
    restore_graph(left, pickle.loads(saved))
    for side, x in _elements(events[cut:]):
        (left, right)[side].emit(x)
    assert first + second == whole


def test_lookup_ends_with_the_stream_it_enriches_while_the_table_stays_open() -> None:
    # A window after it flushes at that close; the table (a changelog that
    # stays open) goes on changing for its other nodes, and its own close
    # changes nothing.
    orders: Stream[Any] = Stream()
    prices: Stream[Any] = Stream()
    windows = orders.lookup(prices, key=0, default=0.0).timed_window(10, time=lambda p: p[0][1])
    out, table = windows.sink_to_list(), prices.sink_to_list()
    prices.emit(("apple", 1.5))
    orders.emit(("apple", 1))
    orders.emit(("apple", 2))
    orders.close()
    assert out == [[(("apple", 1), 1.5), (("apple", 2), 1.5)]]
    prices.emit(("apple", 2.0))
    prices.close()
    assert out == [[(("apple", 1), 1.5), (("apple", 2), 1.5)]]
    assert table == [("apple", 1.5), ("apple", 2.0)]


@settings(max_examples=60, deadline=None)
@given(lookup_inputs(), st.data())
def test_lookup_restored_from_a_snapshot_continues_as_an_uninterrupted_run(
        events: list[TableEvent], data: Any) -> None:
    cut = data.draw(st.integers(0, len(events)))

    def make() -> tuple[Stream[Any], Stream[Any], list[Any]]:
        main, table = Stream(), Stream()
        return main, table, main.lookup(table, key=1, default=0).sink_to_list()

    main, table, whole = make()
    feed_lookup(events, main, table)
    main, table, first = make()
    feed_lookup(events[:cut], main, table)
    saved = pickle.dumps(snapshot_graph(main))
    main, table, second = make()
    restore_graph(main, pickle.loads(saved))
    feed_lookup(events[cut:], main, table)
    assert first + second == whole


# -- descriptions and engines ----------------------------------------------
# Dask runs join() when both sides branch from one scatter() and refuses
# lookup() (its output follows the interleaving, as combine_latest's); a
# Spark segment, one linear chain, refuses both.


def test_rebuilt_from_their_descriptions_they_compute_the_same() -> None:
    a, b = Stream(), Stream()
    joined = a.join(b, key=0, within=1, time=1)
    looked = a.lookup(b, key=0)
    assert looked.describe().params["default"] is not None  # NO_DEFAULT, kept
    a2, b2 = Stream(), Stream()
    rebuilt_join = build(joined.describe(), [a2, b2])
    rebuilt_lookup = build(looked.describe(), [a2, b2])
    assert isinstance(rebuilt_join, IntervalJoin) and isinstance(rebuilt_lookup, LookupJoin)
    outs = [n.sink_to_list() for n in (joined, looked, rebuilt_join, rebuilt_lookup)]
    for s, x in [(b, ("k", 1)), (a, ("k", 1.5)), (b, ("k", 3))]:
        s.emit(x)
        (a2 if s is a else b2).emit(x)
    assert outs[0] == outs[2] == [(("k", 1.5), ("k", 1))]
    assert outs[1] == outs[3] == [(("k", 1.5), 1)]


@pytest.mark.parametrize("make", [
    lambda seg, other: seg.lookup(other, key=0),
    lambda seg, other: other.lookup(seg, key=0),
])
def test_dask_refuses_lookup_at_build_time_naming_the_node_and_the_fix(make: Any) -> None:
    scattered = Stream().scatter()
    with pytest.raises(TypeError, match=r"lookup\(\) cannot run on a Dask segment: "
                                        r"lookup\(0\) \(its output depends on how the table's "
                                        r"and the stream's elements interleave in this "
                                        r"process\); call gather\(\) before lookup\(\)"):
        make(scattered.map(abs), Stream())
    with pytest.raises(TypeError, match=r"lookup\(\) cannot run on a Dask segment"):
        make(scattered.map(abs), scattered.map(str))
    make(scattered.gather(), Stream())  # gathered first, it runs in-process


@pytest.mark.parametrize("make", [
    lambda seg, other: seg.join(other, key=0, within=1, time=1),
    lambda seg, other: other.join(seg, key=0, within=1, time=1),
])
def test_dask_refuses_a_join_of_a_segment_and_a_local_stream(make: Any) -> None:
    scattered = Stream().scatter()
    with pytest.raises(ValueError, match=r"join\(0\): one upstream runs on Dask .* and "
                                         r".* does not: gather\(\) first, or scatter\(\) "
                                         r"both from one scatter\(\) node"):
        make(scattered.map(abs), Stream())
    # Both sides from one scatter(): it runs there (tests/streams_dask/test_joins_on_dask.py).
    node = make(scattered.map(abs), scattered.map(str))
    assert node._segment is scattered._segment
    with pytest.raises(TypeError, match=r"join\(\) cannot follow scatter\(ordered=False\)"):
        unordered = Stream().scatter(ordered=False)
        make(unordered.map(abs), unordered.map(str))


@pytest.mark.parametrize("make", [
    lambda seg, other: seg.join(other, key=0, within=1, time=1),
    lambda seg, other: seg.lookup(other, key=0),
])
def test_spark_refuses_them_at_build_time_naming_the_node_and_the_fix(make: Any) -> None:
    segment = Stream().to_spark().map(abs)
    with pytest.raises(TypeError, match=r"(join|lookup)\(\) cannot run in a Spark segment: "
                                        r"(join|lookup).*; call gather\(\) before "
                                        r"(join|lookup)\(\) to run it in-process"):
        make(segment, Stream())
    make(Stream().to_spark().map(abs).gather(), Stream())


def test_on_a_loop_await_emit_waits_for_coroutine_sinks_below_both() -> None:
    import asyncio

    seen: list[Any] = []

    async def slow_sink(x: Any) -> None:
        await asyncio.sleep(0)
        seen.append(x)

    async def main() -> None:
        left, right = Stream(asynchronous=True), Stream(asynchronous=True)
        left.join(right, key=0, within=1, time=1).sink(slow_sink)
        main_s, table = Stream(asynchronous=True), Stream(asynchronous=True)
        main_s.lookup(table, key=0, default=None).sink(slow_sink)
        await left.emit(("k", 1))
        await right.emit(("k", 1.5))
        assert seen == [(("k", 1), ("k", 1.5))]
        await table.emit(("k", "v"))
        await main_s.emit(("k",))
        assert seen[-1] == (("k",), "v")

    asyncio.run(main())


def test_late_elements_go_to_the_late_stream_when_it_is_sunk() -> None:
    left: Stream[Any] = Stream()
    right: Stream[Any] = Stream()
    joined = left.join(right, key=0, within=1, time=1)
    pairs, late = joined.sink_to_list(), joined.late.sink_to_list()
    left.emit(("a", 10))
    right.emit(("a", 10))
    left.emit(("a", 5))  # below the watermark, 10: late, and not joined
    right.emit(("a", 11))
    assert pairs == [(("a", 10), ("a", 10)), (("a", 10), ("a", 11))]
    assert late == [("a", 5)]
