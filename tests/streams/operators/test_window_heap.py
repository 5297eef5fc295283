"""Event-time windows close by their ends: what each closing looks at, and what it emits.

The open windows are kept by end (a heap of their indexes; a key's sessions
by start, which orders their ends too), so a closing takes the windows it
closes and looks at no other. The properties compare every run path with a
brute-force reference written from the docstrings: each element is in
exactly the windows its timestamp belongs to, or in ``late``; windows come
out by end, then in the order they were opened; the same after a snapshot
restored at any point, and when the node is driven key group by key group
as an engine drives it.
"""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import NodeError, Stream
from streams.fusion import unfused

# Elements are (key, time, id): ids tell equal timestamps apart.
Element = tuple[str, float, int]
# What a run gives: the windows, the late elements, and how many windows were
# out after each element, then after close: when each window closed.
Outcome = tuple[list[Any], list[Element], list[int]]

times = st.one_of(st.integers(-20, 60), st.integers(-200, 600).map(lambda n: n / 10))
elements = st.lists(st.tuples(st.sampled_from("abc"), times), max_size=40).map(
    lambda xs: [(k, t, i) for i, (k, t) in enumerate(xs)])
# Mostly rising times, with jumps that close several windows at once.
rising = st.lists(st.tuples(st.sampled_from("abc"), st.integers(-5, 40)), max_size=40).map(
    lambda xs: [(k, sum(d for _, d in xs[:i + 1]) / 10, i) for i, (k, _) in enumerate(xs)])
# (size, slide): slide None is the tumbling TimedWindow, slide == size the keyed one.
shapes = st.sampled_from([(10, None), (1, None), (0.3, None), (10, 10), (10, 5), (10, 3),
                          (0.3, 0.1), (5, 2)])
latenesses = st.sampled_from([0, 0.1, 3, 10, 1000])


def us(t: float) -> int:
    return round(t * 1_000_000)


def maker(size: float, slide: float | None, lateness: float, keyed: bool) -> Any:
    key = 0 if keyed else None
    if slide is None and not keyed:
        return lambda s: s.timed_window(size, time=1, lateness=lateness)
    return lambda s: s.timed_window(size, slide=slide, time=1, lateness=lateness, key=key)


def session_maker(gap: float, lateness: float, keyed: bool) -> Any:
    return lambda s: s.session_window(gap, time=1, lateness=lateness, key=0 if keyed else None)


def windows_of(t: float, size: float, slide: float) -> list[int]:
    """Every i whose window [i * slide, i * slide + size) holds t's microsecond."""
    u, size_us, slide_us = us(t), us(size), us(slide)
    return [i for i in range(u // slide_us - size_us // slide_us - 2, u // slide_us + 2)
            if i * slide_us <= u < i * slide_us + size_us]


def sliding_reference(xs: list[Element], size: float, slide: float | None, lateness: float,
                      keyed: bool, fails: frozenset[int] = frozenset()) -> Outcome:
    """Each window, emitted once the watermark reaches its end, by end then opening.

    ``fails``: the numbers of the windows (in emission order) that fail
    downstream; those closed with one and after it are sent at the next
    closing (the next rise of the largest time), or at close.
    """
    slide = size if slide is None else slide
    size_us, slide_us, late_us = us(size), us(slide), us(lateness)
    open_: dict[tuple[int, Any], tuple[int, list[Element]]] = {}
    out: list[Any] = []
    late: list[Element] = []
    emitted: list[int] = []
    unsent: list[Any] = []
    top = -math.inf  # the largest time seen, in microseconds

    def close(watermark: float) -> None:
        nonlocal unsent
        ready = sorted((i * slide_us + size_us, opened, i, k)
                       for (i, k), (opened, _) in open_.items()
                       if i * slide_us + size_us <= watermark)
        taken = [*unsent, *((k, open_.pop((i, k))[1]) for _, _, i, k in ready)]
        unsent = []
        for n, (k, window) in enumerate(taken):
            out.append((k, window) if keyed else window)
            if len(out) - 1 in fails and watermark < math.inf:  # close() sends them all
                unsent = taken[n + 1:]
                break

    for n, x in enumerate(xs):
        mine = windows_of(x[1], size, slide)
        if min(i * slide_us + size_us for i in mine) <= top - late_us:
            late.append(x)
            emitted.append(len(out))
            continue
        k = x[0] if keyed else None
        for i in mine:
            open_.setdefault((i, k), (n, []))[1].append(x)
        if us(x[1]) > top:
            top = us(x[1])
            close(top - late_us)
        emitted.append(len(out))
    close(math.inf)
    return out, late, [*emitted, len(out)]


def session_reference(xs: list[Element], gap: float, lateness: float,
                      keyed: bool) -> Outcome:
    """Sessions closed once the watermark is past their last time plus gap, by end then first."""
    gap_us, late_us = us(gap), us(lateness)
    sessions: list[list[Any]] = []  # [key, first, last, [(arrival, x)...], created]
    out: list[Any] = []
    late: list[Element] = []
    emitted: list[int] = []
    top = -math.inf

    def close(watermark: float) -> None:
        ready = sorted((s for s in sessions if s[2] + gap_us < watermark),
                       key=lambda s: (s[2] + gap_us, s[4]))
        for s in ready:
            sessions.remove(s)
            window = [x for _, x in sorted(s[3])]
            out.append((s[0], window) if keyed else window)

    for n, x in enumerate(xs):
        k, u = x[0] if keyed else None, us(x[1])
        touching = [s for s in sessions if s[0] == k and s[1] - gap_us <= u <= s[2] + gap_us]
        if not touching and u + gap_us < top - late_us:
            late.append(x)
            emitted.append(len(out))
            continue
        for s in touching:
            sessions.remove(s)
        sessions.append([k, min([u] + [s[1] for s in touching]),
                         max([u] + [s[2] for s in touching]),
                         [e for s in touching for e in s[3]] + [(n, x)],
                         min([n] + [s[4] for s in touching])])
        if u > top:
            top = u
            close(top - late_us)
        emitted.append(len(out))
    close(math.inf)
    return out, late, [*emitted, len(out)]


def run(make: Any, xs: list[Element], fused: bool = True) -> Outcome:
    def go() -> Outcome:
        source = Stream()
        node = make(source)
        out, late = node.sink_to_list(), node.late.sink_to_list()
        emitted = []
        for x in xs:
            source.emit(x)
            emitted.append(len(out))
        source.close()
        return out, late, [*emitted, len(out)]

    if fused:
        return go()
    with unfused():
        return go()


def as_written_before(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with each key's sessions in no order, as checkpoints held them before."""
    if "_sessions" in state:
        state["_sessions"] = {k: sessions[::-1] for k, sessions in state["_sessions"].items()}
    return state


def run_restored(make: Any, xs: list[Element], cut: int, rewind: bool) -> Outcome:
    """Run ``xs[:cut]``, snapshot through a pickle, then the rest on a restored node.

    ``rewind``: the node itself goes on past the cut first, then is set back
    to the snapshot (what it held since is dropped), as a replay restores it.
    """
    source = Stream()
    node = make(source)
    out, late = node.sink_to_list(), node.late.sink_to_list()
    emitted = []
    for x in xs[:cut]:
        source.emit(x)
        emitted.append(len(out))
    saved = pickle.dumps(node.snapshot())
    if rewind:
        kept = len(out), len(late)
        for x in xs[cut:]:
            source.emit(x)
        del out[kept[0]:], late[kept[1]:]
        node.restore(as_written_before(pickle.loads(saved)))
    else:
        source = Stream()
        node = make(source)
        node.restore(as_written_before(pickle.loads(saved)))
        node.sink(out.append)
        node.late.sink(late.append)
    for x in xs[cut:]:
        source.emit(x)
        emitted.append(len(out))
    source.close()
    return out, late, [*emitted, len(out)]


def elements_counted(out: list[Any], keyed: bool) -> dict[Element, int]:
    counts: dict[Element, int] = {}
    for w in out:
        for x in (w[1] if keyed else w):
            counts[x] = counts.get(x, 0) + 1
    return counts


# -- the properties -------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(xs=elements, shape=shapes, lateness=latenesses, keyed=st.booleans(), fused=st.booleans())
def test_each_element_is_in_exactly_its_windows_or_in_late(
        xs: list[Element], shape: tuple[float, float | None], lateness: float, keyed: bool,
        fused: bool) -> None:
    size, slide = shape
    out, late, emitted = run(maker(size, slide, lateness, keyed), xs, fused)
    assert (out, late, emitted) == sliding_reference(xs, size, slide, lateness, keyed)
    counts = elements_counted(out, keyed)
    for x in xs:
        assert late.count(x) + (counts.get(x, 0) > 0) == 1
        if x not in late:
            assert counts[x] == len(windows_of(x[1], size, size if slide is None else slide))


@settings(max_examples=150, deadline=None)
@given(xs=elements, gap=st.sampled_from([0.5, 2, 5]), lateness=latenesses, keyed=st.booleans(),
       fused=st.booleans())
def test_each_element_is_in_exactly_one_session_or_in_late(
        xs: list[Element], gap: float, lateness: float, keyed: bool, fused: bool) -> None:
    out, late, emitted = run(session_maker(gap, lateness, keyed), xs, fused)
    assert (out, late, emitted) == session_reference(xs, gap, lateness, keyed)
    counts = elements_counted(out, keyed)
    assert all(late.count(x) + counts.get(x, 0) == 1 for x in xs)


@settings(max_examples=150, deadline=None)
@given(xs=elements, shape=shapes, lateness=latenesses, keyed=st.booleans(), cut=st.integers(0, 40),
       rewind=st.booleans())
def test_a_snapshot_restored_at_any_point_goes_on_the_same(
        xs: list[Element], shape: tuple[float, float | None], lateness: float, keyed: bool,
        cut: int, rewind: bool) -> None:
    make = maker(*shape, lateness, keyed)
    assert run_restored(make, xs, cut % (len(xs) + 1), rewind) == run(make, xs)


@settings(max_examples=150, deadline=None)
@given(xs=elements, gap=st.sampled_from([0.5, 2, 5]), lateness=latenesses, keyed=st.booleans(),
       cut=st.integers(0, 40), rewind=st.booleans())
def test_sessions_restored_at_any_point_go_on_the_same(
        xs: list[Element], gap: float, lateness: float, keyed: bool, cut: int,
        rewind: bool) -> None:
    make = session_maker(gap, lateness, keyed)
    assert run_restored(make, xs, cut % (len(xs) + 1), rewind) == run(make, xs)


def close_before(node: Any, rises: list[tuple[int, float]], rise: int, limit: int,
                 tagged: list[Any]) -> int:
    """Close what the rises from ``rise`` before position ``limit`` close; the next rise."""
    while rise < len(rises) and rises[rise][0] < limit:
        pos, top = rises[rise]
        if top >= node._next_close():
            tagged.extend(((pos, 1, *order), "window", w) for order, w in node._close_to(top))
        rise += 1
    return rise


def run_by_key_group(make: Any, xs: list[Element], cut: int) -> Outcome:
    """Drive one node per key as an engine does (``_arrive_as``, ``_next_close``,
    ``_close_to``), each snapshot and restored into a new node at ``cut``, and
    merge their outputs by position, then by ``(end, opened)``."""
    rises: list[tuple[int, float]] = []  # where the stream's largest time rises
    for pos, x in enumerate(xs):
        if not rises or x[1] > rises[-1][1]:
            rises.append((pos, x[1]))
    tagged: list[tuple[Any, str, Any]] = []
    for key in sorted({x[0] for x in xs}):
        node = make(Stream())
        late = node.late.sink_to_list()
        rise = 0
        restored = False
        for pos, x in enumerate(xs):
            if x[0] != key:
                continue
            if pos >= cut and not restored:
                saved = pickle.dumps(node.snapshot())
                node = make(Stream())
                node.restore(pickle.loads(saved))
                late = node.late.sink_to_list()
                restored = True
            rise = close_before(node, rises, rise, pos, tagged)
            node._arrive_as(pos, max(t for p, t in rises if p <= pos))
            node.update(x)
            tagged.extend(((pos, 0, 0, 0), "late", e) for e in late)
            late.clear()
        close_before(node, rises, rise, len(xs), tagged)
        tagged.extend(((len(xs), 1, *order), "window", w) for order, w in node._close_to(math.inf))
    tagged.sort(key=lambda e: e[0])
    closed_at = [tag[0] for tag, kind, _ in tagged if kind == "window"]
    return ([w for _, kind, w in tagged if kind == "window"],
            [e for _, kind, e in tagged if kind == "late"],
            [sum(pos <= n for pos in closed_at) for n in range(len(xs) + 1)])


@settings(max_examples=150, deadline=None)
@given(xs=elements, shape=st.sampled_from([(10, 10), (10, 5), (10, 3), (0.3, 0.1), (2, "session"),
                                           (0.5, "session")]),
       lateness=latenesses, cut=st.integers(0, 40))
def test_run_by_key_group_gives_what_one_node_gives(
        xs: list[Element], shape: tuple[float, Any], lateness: float, cut: int) -> None:
    size, slide = shape
    make = (session_maker(size, lateness, True) if slide == "session"
            else maker(size, slide, lateness, True))
    assert run_by_key_group(make, xs, cut % (len(xs) + 1)) == run(make, xs)


@settings(max_examples=400, deadline=None)
@given(xs=st.one_of(elements, rising), shape=shapes, lateness=latenesses, keyed=st.booleans(),
       fused=st.booleans(), bombs=st.sets(st.integers(0, 8), max_size=3))
def test_a_window_failing_downstream_is_sent_once_and_the_others_still_come(
        xs: list[Element], shape: tuple[float, float | None], lateness: float, keyed: bool,
        fused: bool, bombs: set[int]) -> None:
    size, slide = shape
    seen: list[Any] = []
    seen_after: list[int] = []  # how many windows were seen after each element, and close

    def sink(w: Any) -> None:
        seen.append(w)
        if len(seen) - 1 in bombs:
            raise RuntimeError("the sink is down")

    def go() -> None:
        source = Stream()
        node = maker(size, slide, lateness, keyed)(source)
        node.sink(sink)
        node.late.sink(lambda x: None)
        for x in [*xs, None]:
            try:
                source.emit(x) if x is not None else source.close()
            except NodeError as e:
                assert "the sink is down" in str(e)
            seen_after.append(len(seen))

    if fused:
        go()
    else:
        with unfused():
            go()
    out, _, emitted = sliding_reference(xs, size, slide, lateness, keyed, frozenset(bombs))
    assert (seen, seen_after) == (out, emitted)


# -- what a closing looks at ----------------------------------------------------------


class CountingDict(dict):  # type: ignore[type-arg]
    """A dict that counts the walks through it."""

    walks = 0

    def __iter__(self) -> Any:
        self.walks += 1
        return super().__iter__()


class CountingList(list):  # type: ignore[type-arg]
    """A list that counts the items read from it."""

    read = 0

    def __iter__(self) -> Any:
        for item in super().__iter__():
            self.read += 1
            yield item

    def __getitem__(self, i: Any) -> Any:
        item = super().__getitem__(i)
        self.read += len(item) if isinstance(i, slice) else 1
        return item


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("slide", [None, 1, 0.5], ids=["tumbling", "keyed", "sliding"])
def test_a_closing_walks_none_of_the_windows_left_open(slide: float | None, fused: bool) -> None:
    # Thousands of windows open behind a long lateness: each element closes
    # one (or two) and looks at no other.
    def go() -> None:
        source = Stream()
        node = (source.timed_window(1, time=lambda x: x, lateness=2000) if slide is None
                else source.timed_window(1, slide=slide, time=lambda x: x, lateness=2000,
                                         key=None if slide != 1 else lambda x: 0))
        out = node.sink_to_list()
        for t in range(3000):
            source.emit(float(t))
        node._windows = windows = CountingDict(node._windows)
        before = len(out)
        for t in range(3000, 3100):
            source.emit(float(t))
        assert len(out) - before == (200 if slide == 0.5 else 100)  # closings there were
        assert windows.walks == 0

    if fused:
        go()
    else:
        with unfused():
            go()


def test_an_element_reads_only_the_sessions_of_its_key_it_may_touch() -> None:
    source = Stream()
    node = source.session_window(0.5, time=lambda x: x, lateness=1000)
    out = node.sink_to_list()
    for t in range(2000):  # a session each, 1000 of them open
        source.emit(float(t))
    node._sessions[None] = sessions = CountingList(node._sessions[None])
    for t in [*range(2000, 2050), 1500.2, 1700.7, 1800]:  # in order, out of order, joining one
        source.emit(float(t))
    assert len(out) == 1049
    assert sessions.read <= 10 * 53  # a walk through them all would read 1000 for each
