"""Packed rows between the stages of a streaming plan: order, errors, routing."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams import Stream
from streams.spec import NodeSpec
from streams_spark.codec import DATA, ERROR, FLUSH, PACK, ROW
from streams_spark.packs import opened, pack_payload, windows_and_firsts, windows_of
from streams_spark.plan import Route
from streams_spark.route_columns import KEY_BUCKETS, ONE_GROUP, key_bucket
from streams_spark.routing import FAR_FUTURE, NodeFailure, Router

ITEM = pa.struct([("seq", pa.int64()), ("sub", pa.int64()), ("kind", pa.int8()),
                  ("p", pa.binary())])


def rows_of(router: Router) -> list[dict[str, Any]]:
    return router.batch().to_pylist()  # type: ignore[no-any-return]


@st.composite
def packed_rows(draw: Any) -> tuple[list[tuple[int, int, int, Any]], list[Any]]:
    """Elements in (seq, sub) order, cut into rows (packs, data, control), shuffled."""
    n = draw(st.integers(0, 30))
    seqs = sorted(draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n, unique=True)))
    elements = [(s, draw(st.integers(0, 3)), draw(st.one_of(st.integers(), st.text())))
                for s in seqs]
    rows: list[tuple[int, int, int, Any]] = []
    i = 0
    while i < n:
        size = draw(st.integers(1, 5))
        part = elements[i:i + size]
        i += size
        kind = draw(st.sampled_from([PACK, DATA, FLUSH]))
        if kind == PACK:
            rows.append((part[0][0], part[0][1], PACK, pack_payload(
                [e[0] for e in part], [e[1] for e in part], [e[2] for e in part])))
        else:
            rows.extend((s, sb, kind, pickle.dumps(x) if kind == DATA else x)
                        for s, sb, x in part)
    expected = [(s, sb) for s, sb, _ in elements]
    return draw(st.permutations(rows)), expected


@given(packed_rows())
def test_opened_rows_come_in_element_order_with_control_rows_in_place(
        case: tuple[list[tuple[int, int, int, Any]], list[Any]]) -> None:
    rows, expected = case
    seqs, subs, kinds, items, _ = opened(*zip(*rows, strict=True)) if rows else opened(
        [], [], [], [])
    assert list(zip(seqs, subs, strict=True)) == expected
    by_position = {(s, sb): (k, p) for s, sb, k, p in rows if k != PACK}
    for s, sb, kind, item in zip(seqs, subs, kinds, items, strict=True):
        if (s, sb) in by_position and by_position[(s, sb)][0] == FLUSH:
            assert (kind, item) == by_position[(s, sb)]
        else:
            assert kind == DATA and not isinstance(item, bytes)


def keyed() -> Route:
    return Route("key", Stream().scan(lambda a, b: a, key=0).describe(), KEY_BUCKETS)


def f(x: Any) -> Any:
    return x


def mapped() -> NodeSpec:
    """A node named ``map(f)``, as the one that returned a value."""
    return Stream().map(f).describe()


@given(st.lists(st.tuples(st.sampled_from("abcdefghij"), st.integers()), max_size=40))
def test_rows_for_a_keyed_scan_are_one_pack_per_bucket_of_keys(xs: list[tuple[str, int]]) -> None:
    router = Router(keyed(), None)
    for i, x in enumerate(xs):
        router.add(i, 0, DATA, x)
    rows = rows_of(router)
    keys = {pickle.dumps(k, protocol=5) for k, _ in xs}
    assert sorted(r["k"] for r in rows) == sorted({key_bucket(k) for k in keys})
    seen = []
    for row in rows:
        assert row["kind"] == PACK
        seqs, _, _, values, _ = opened([row["seq"]], [row["sub"]], [PACK], [row["p"]])
        assert {key_bucket(pickle.dumps(x[0], protocol=5)) for x in values} == {row["k"]}
        assert values == [xs[s] for s in seqs]
        seen.extend(seqs)
    assert sorted(seen) == list(range(len(xs)))


def test_an_unpicklable_value_leaves_its_pack_as_an_error_in_its_place() -> None:
    last = mapped()
    router = Router(keyed(), last)
    router.add(0, 0, DATA, ("a", 1))
    router.add(1, 0, DATA, ("a", lambda: 2))
    router.add(2, 0, DATA, ("a", 3))
    rows = rows_of(router)
    (pack,) = [r for r in rows if r["kind"] == PACK]
    (error,) = [r for r in rows if r["kind"] == ERROR]
    assert opened([pack["seq"]], [0], [PACK], [pack["p"]])[3] == [("a", 1), ("a", 3)]
    assert (error["seq"], error["k"]) == (1, b"")  # its own row, in no key's group
    assert pack["k"] == key_bucket(pickle.dumps("a", protocol=5))
    node_id, _, exc = pickle.loads(error["p"])
    assert node_id == last.id and "map(f) returned" in str(exc)


def test_rows_for_a_sequential_stage_are_one_pack() -> None:
    router = Router(Route("group"), None)
    for i in range(5):
        router.add(i, 0, DATA, i * 10)
    router.passthrough(9, 0, FLUSH, b"end")
    rows = rows_of(router)
    assert [(r["kind"], r["k"]) for r in rows] == [(FLUSH, ONE_GROUP), (PACK, ONE_GROUP)]
    assert opened(*zip(*[(r["seq"], r["sub"], r["kind"], r["p"]) for r in rows],
                       strict=True))[3] == [0, 10, 20, 30, 40, b"end"]


def window(interval: float = 1.0) -> Route:
    return Route("window", Stream().timed_window(interval, time=lambda x: x).describe())


def test_rows_for_a_window_are_one_pack_per_spark_window_at_its_latest_time() -> None:
    router = Router(window(), None)
    # Spark takes a time's nearest microsecond, then floors by the width:
    # 0.9999996 is 1 s, 0.9999994 not.
    times = [0.2, 0.9999994, 0.5, 1.0, 2.5, 0.9999996, 1.9999994, -0.5]
    for i, t in enumerate(times):
        router.add(i, 0, DATA, t)
    rows = rows_of(router)
    packs = {r["t"]: opened([r["seq"]], [0], [PACK], [r["p"]])[3]
             for r in rows if r["kind"] == PACK}
    assert packs == {0.9999994: [0.2, 0.9999994, 0.5], 1.9999994: [1.0, 0.9999996, 1.9999994]}
    # An element alone in its window is a row of its own; before 1970 Spark's
    # window start is no floor: such elements go alone too.
    assert [(r["kind"], r["t"]) for r in rows if r["kind"] != PACK] == [(DATA, 2.5), (DATA, -0.5)]


def first(x: tuple[Any, str]) -> Any:
    return x[0]


def second(x: tuple[Any, str]) -> str:
    return x[1]


# A NaN time is refused (tests/streams_spark/test_native_windows.py).
@given(st.lists(st.tuples(st.one_of(st.floats(-3, 40, allow_nan=False),
                                    st.integers(-3, 40)),
                          st.sampled_from("ab")), max_size=40),
       st.sampled_from([(4.0, None), (4.0, 1.5), (0.5, 0.25)]), st.booleans())
def test_window_packs_hold_the_elements_spark_puts_in_the_same_windows(
        xs: list[tuple[Any, str]], size_slide: tuple[float, float | None],
        by_key: bool) -> None:
    size, slide = size_slide
    node = Stream().timed_window(size, slide=slide, time=first, key=second if by_key else None)
    router = Router(Route("window", node.describe()), None)
    for i, x in enumerate(xs):
        router.add(i, 0, DATA, x)
    rows = rows_of(router)
    # The reference, one element at a time: its time's nearest microsecond
    # floored by the slide (and its key) names its windows; an element before
    # 1970 (or without a time) goes alone, first.
    step, alone, packs = round((slide or size) * 1e6), [], {}
    for x in xs:
        t = float(x[0])
        if not 0 <= t < FAR_FUTURE:
            alone.append(x)
            continue
        us = round(t * 1e6)
        group = (us // step, (us - round(size * 1e6)) // step if slide else None,
                 x[1] if by_key else None)
        packs.setdefault(group, []).append(x)
    # An element alone in its windows is a row of its own, before those.
    alone = [p[0] for p in packs.values() if len(p) == 1] + alone
    shared = [p for p in packs.values() if len(p) > 1]
    got_alone = [pickle.loads(r["p"]) for r in rows if r["kind"] == DATA]
    got_packs = [opened([r["seq"]], [0], [PACK], [r["p"]])[3] for r in rows if r["kind"] == PACK]
    assert repr(got_alone) == repr(alone)  # NaN is not equal to itself
    assert got_packs == shared
    assert [r["t"] for r in rows if r["kind"] == PACK] == [
        max(float(x[0]) for x in pack) for pack in shared]
    assert all(r["k"] == (pickle.dumps(r_x[1], protocol=5) if by_key else None)
               for r, r_x in zip([r for r in rows if r["kind"] == PACK],
                                 [p[0] for p in shared], strict=True))


def test_an_error_before_a_window_fails_with_the_first_error_in_order() -> None:
    last = mapped()
    router = Router(window(), last, [last])
    router.add(0, 0, DATA, 0.5)
    unpicklable = type("F", (float,), {"__reduce__": lambda self: 1 / 0})(0.7)
    router.add(1, 0, DATA, unpicklable)
    router.add(2, 0, DATA, "not a time")  # the window's own error, later
    with pytest.raises(NodeFailure) as info:
        router.batch()  # a batch's times are turned into seconds as it closes
    # Readable (no driver may read it), then the payload for a driver.
    text, payload = str(info.value).split(f" ({NodeFailure.MARK}")
    assert text.startswith("map(f) failed on element 0.7: ") and "map(f) returned" in text
    node_id, _, exc = pickle.loads(bytes.fromhex(payload.rstrip(")")))
    assert node_id == last.id and "map(f) returned" in str(exc)


def keyed_window(size: float = 5.0) -> Route:
    node = Stream().timed_window(size, time=lambda x: x[0], key=lambda x: x[1])
    return Route("window", node.describe())


def test_a_window_s_keys_and_times_fail_with_the_first_error_in_element_order() -> None:
    # Keys and times are computed when the batch closes, all at once: the
    # times first. The key of element 1 fails before the time of element 2
    # (None[0]), and the seconds of element 3's.
    router = Router(keyed_window(), None)
    assert router.defers
    for i, x in enumerate([(0.5, "a"), (0.7,), None, ("noon", "b")]):
        router.add(i, 0, DATA, x)
    with pytest.raises(NodeFailure) as info:
        router.batch()
    assert str(info.value).startswith("timed_window(5.0) failed on element (0.7,): IndexError")


def test_after_a_stateful_step_a_window_takes_keys_and_times_as_elements_arrive() -> None:
    # A scan emitting its own list, changed in place after: in-process the
    # window reads its time as it arrives (0.5, then 20.0).
    scan = Stream().scan(lambda acc, x: acc.append(x) or acc, start=[]).describe()
    router = Router(keyed_window(), scan, [scan])
    assert not router.defers
    acc = [0.5, "a"]
    router.add(0, 0, DATA, acc)
    acc[0] = 20.0
    router.add(1, 0, DATA, acc)
    assert sorted(r["t"] for r in rows_of(router)) == [0.5, 20.0]


def test_windows_open_packs_and_order_their_elements() -> None:
    def item(seq: int, kind: int, p: bytes) -> dict[str, Any]:
        return {"seq": seq, "sub": 0, "kind": kind, "p": p}

    items = pa.array([
        [item(4, PACK, pack_payload([4, 6], [0, 0], ["d", "f"])),
         item(1, PACK, pack_payload([1, 5], [0, 0], ["a", "e"])),
         item(2, DATA, pickle.dumps("b"))],
        [item(9, FLUSH, b"end of stream")],
        [item(3, DATA, pickle.dumps("c"))],
    ], pa.list_(ITEM))
    assert windows_of(items) == [["a", "b", "d", "e", "f"], [], ["c"]]


CARRIED = pa.struct([("seq", pa.int64()), ("sub", pa.int64()), ("kind", pa.int8()),
                     ("p", pa.binary()),
                     ("r", pa.list_(pa.struct([("a", pa.int64()), ("b", pa.string())])))])


@st.composite
def aggregated_windows(draw: Any) -> list[list[dict[str, Any]]]:
    """Windows as Spark aggregates them: their items in any order."""
    windows: list[list[dict[str, Any]]] = []
    seqs = iter(draw(st.permutations(range(200))))
    for _ in range(draw(st.integers(0, 6))):
        elements = sorted((next(seqs), draw(st.integers(0, 2))) for _ in range(
            draw(st.integers(0, 6))))
        items: list[dict[str, Any]] = []
        i = 0
        while i < len(elements):
            kind = draw(st.sampled_from([PACK, DATA, ROW, FLUSH]))
            part = elements[i:i + (draw(st.integers(1, 3)) if kind in (PACK, ROW) else 1)]
            if kind == ROW:  # input rows: outputs 0 of their elements
                part = [(s, 0) for s, _ in part]
                elements[i:i + len(part)] = part
            i += len(part)
            values = [{"a": s, "b": f"{s}.{sb}"} for s, sb in part]
            s, sb = part[0]
            if kind == FLUSH:  # a control row: no element of the window
                items.append({"seq": s, "sub": sb, "kind": FLUSH, "p": b"end", "r": None})
                continue
            expected_part = [(v["a"], v["b"]) for v in values]
            if kind == PACK:
                p = pack_payload([e[0] for e in part], [e[1] for e in part], expected_part)
                items.append({"seq": s, "sub": sb, "kind": PACK, "p": p, "r": None})
            elif kind == DATA:
                items.append({"seq": s, "sub": sb, "kind": DATA,
                              "p": pickle.dumps(expected_part[0]), "r": None})
            else:  # input rows carried as their columns; several with their seqs in p
                p = None if len(part) == 1 else b"".join(
                    e[0].to_bytes(8, "little") for e in part)
                items.append({"seq": s, "sub": 0, "kind": ROW, "p": p, "r": values})
        windows.append(draw(st.permutations(items)))
    return windows


@given(aggregated_windows(), st.booleans())
def test_windows_hold_their_elements_in_order_whatever_rows_carried_them(
        windows: list[list[dict[str, Any]]], large: bool) -> None:
    # Spark sends binary columns with 64-bit offsets where it is told to
    # (spark.sql.execution.arrow.useLargeVarTypes).
    carried = CARRIED if not large else pa.struct(
        [f if f.name != "p" else pa.field("p", pa.large_binary()) for f in CARRIED])
    got, firsts = windows_and_firsts(pa.array(windows, pa.list_(carried)))
    # The reference: every element of a window with its (seq, sub), sorted.
    for window, values, first in zip(windows, got, firsts, strict=True):
        elements: list[tuple[tuple[int, int], Any]] = []
        for item in window:
            if item["kind"] == PACK:
                pseqs, psubs, pvalues, _ = pickle.loads(item["p"])
                elements.extend(zip(zip(pseqs, psubs, strict=True), pvalues, strict=True))
            elif item["kind"] == DATA:
                elements.append(((item["seq"], item["sub"]), pickle.loads(item["p"])))
            elif item["kind"] == ROW:
                elements.extend(((r["a"], 0), (r["a"], r["b"])) for r in item["r"])
        elements.sort()
        assert [tuple(v) for v in values] == [v for _, v in elements]
        assert first == (elements[0][0][0] if elements else -1)


def sessions(gap: float) -> Route:
    node = Stream().session_window(gap, time=first, key=second)
    return Route("window", node.describe(), spans=True)


def test_rows_for_a_table_s_keyed_sessions_are_packs_of_spans_with_first_and_last_time(
        ) -> None:
    router = Router(sessions(1.0), None)
    xs = [(5.0, "a"), (0.0, "a"), (1.0, "b"), (1.0000004, "a"), (2.5, "a"), (2.0, "b"),
          (6.0, "a")]
    for i, x in enumerate(xs):
        router.add(i, 0, DATA, x)
    rows = rows_of(router)
    packs = [(opened([r["seq"]], [0], [PACK], [r["p"]])[3], r["t"], r["u"], pickle.loads(r["k"]))
             for r in rows if r["kind"] == PACK]
    # 1.0000004 is 1 s to Spark: a gap after 0 (one session); 2.5 is more
    # than a gap after it. Packs in the order of their first elements.
    assert packs == [([(5.0, "a"), (6.0, "a")], 5.0, 6.0, "a"),
                     ([(0.0, "a"), (1.0000004, "a")], 0.0, 1.0000004, "a"),
                     ([(1.0, "b"), (2.0, "b")], 1.0, 2.0, "b")]
    # A span of one element is a row of its own, as a time Spark may not read.
    alone = [(repr(pickle.loads(r["p"])), r["u"]) for r in rows if r["kind"] == DATA]
    assert alone == [("(2.5, 'a')", None)]


@given(st.lists(st.tuples(st.floats(-3, 40, allow_nan=False), st.sampled_from("ab")),
                max_size=40), st.sampled_from([0.5, 2.0]))
def test_session_spans_are_a_key_s_runs_of_times_within_one_gap(
        times_keys: list[tuple[float, str]], gap: float) -> None:
    xs = [(t, k, i) for i, (t, k) in enumerate(times_keys)]  # each element told apart
    router = Router(sessions(gap), None)
    for i, x in enumerate(xs):
        router.add(i, 0, DATA, x)
    rows = rows_of(router)
    packs = [opened([r["seq"]], [0], [r["kind"]], [r["p"]])[3] for r in rows]
    # The reference: each key's times in order, cut where the next is more
    # than a gap (in microseconds, as Spark reads them) after; each span in
    # element order.
    spans = []
    for key in dict.fromkeys(k for _, k, _ in xs):
        run: list[tuple[float, str, int]] = []
        for x in sorted((x for x in xs if x[1] == key), key=lambda x: round(x[0] * 1e6)):
            if run and round(x[0] * 1e6) - round(run[-1][0] * 1e6) > round(gap * 1e6):
                spans.append(sorted(run, key=lambda x: x[2]))
                run = []
            run.append(x)
        spans.append(sorted(run, key=lambda x: x[2]))
    assert sorted(packs) == sorted(s for s in spans if s)
    for r, pack in zip(rows, packs, strict=True):
        assert r["kind"] == (PACK if len(pack) > 1 else DATA)
        us = [round(t * 1e6) for t, _, _ in pack]  # the times as Spark reads them
        assert round(r["t"] * 1e6) == min(us)
        assert r["u"] is None if len(pack) == 1 else round(r["u"] * 1e6) == max(us)
        assert pickle.loads(r["k"]) == pack[0][1]
