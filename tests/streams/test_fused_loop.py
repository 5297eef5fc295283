"""A source's compiled loop (streams.fused_loop) behaves as the reference loop.

Each case runs a pipeline twice, once as compiled and once under
``unfused()`` (every node through ``update``, the source's plain loop), and
compares what the user can see: outputs, the order of calls of user
functions, the items read from the input, offsets, errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import NodeError, Stream, fusion
from streams.fused_loop import drive, loop_for

Build = Callable[[Stream[Any], list[Any]], None]


def run_both(build: Build, items: list[Any], kind: str = "generator"
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a run shows, compiled and as the reference, for ``build`` over ``items``.

    ``kind``: the source iterates a generator that logs what it reads, or
    the list or tuple itself (looped over without numbering, see
    streams.fused_loop).
    """
    return _run(build, items, True, kind), _run(build, items, False, kind)


def _run(build: Build, items: list[Any], fused: bool, kind: str = "generator") -> dict[str, Any]:
    log: list[Any] = []

    def reading() -> Iterator[Any]:
        for x in items:
            log.append(("read", x))
            yield x

    def go() -> dict[str, Any]:
        iterable = {"generator": lambda: _Replayable(reading), "list": lambda: list(items),
                    "tuple": lambda: tuple(items)}[kind]()
        source = Stream.from_iterable(iterable)
        build(source, log)
        error = None
        try:
            source.start()
        except Exception as e:
            error = (type(e).__name__, str(e))
        return {"log": log, "offset": source.offset, "error": error,
                "closed": source._closed}

    if fused:
        return go()
    with fusion.unfused():
        return go()


class _Replayable:
    """An iterable whose every iteration reads afresh (and logs what it reads)."""

    def __init__(self, make: Callable[[], Iterator[Any]]) -> None:
        self.make = make

    def __repr__(self) -> str:
        return "items"  # the same in both runs' messages

    def __iter__(self) -> Iterator[Any]:
        return self.make()


def test_the_loop_is_compiled_with_the_chain_written_in() -> None:
    source = Stream.from_iterable(range(3))
    source.map(abs).sink_to_list()
    loop = loop_for(source._pusher())
    import linecache

    text = "".join(linecache.getlines(loop.__code__.co_filename))
    assert "for _n, x_" in text and "= f_" in text and ".append(" in text


def test_user_functions_run_depth_first_in_the_same_order() -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        a = source.map(lambda x: log.append(("a", x)) or x + 1)
        a.filter(lambda x: log.append(("even?", x)) or x % 2 == 0).sink(
            lambda x: log.append(("sink1", x)))
        source.sink(lambda x: log.append(("sink2", x)))
        a.scan(lambda acc, x: log.append(("scan", x)) or acc + x, start=0).sink(
            lambda x: log.append(("total", x)))

    fused, reference = run_both(build, list(range(6)))
    assert fused == reference
    # Item 1 is read only once item 0 went through every node.
    log = fused["log"]
    assert log.index(("read", 1)) > log.index(("total", 1))


def test_stop_from_inside_the_graph_ends_the_run_without_closing() -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        source.sink(lambda x: log.append(("out", x)))
        source.filter(lambda x: x == 4).sink(lambda x: source.stop())

    fused, reference = run_both(build, list(range(10)))
    assert fused == reference
    assert fused["offset"] == 5 and not fused["closed"]


def test_offset_after_a_failure_counts_the_items_before_it() -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        source.map(lambda x: 10 // x).sink(lambda x: log.append(("out", x)))

    fused, reference = run_both(build, [5, 2, 0, 1])
    assert fused == reference
    assert fused["offset"] == 2
    assert fused["error"][0].startswith("NodeError")


def test_offset_when_the_input_itself_fails() -> None:
    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise OSError("disk gone")

    source = Stream.from_iterable(_Replayable(failing))
    out = source.sink_to_list()
    with pytest.raises(Exception, match="disk gone"):
        source.start()
    assert out == [1, 2] and source.offset == 2


def test_a_restored_source_resumes_at_its_offset_and_keeps_counting() -> None:
    calls: list[int] = []
    broken = {0}

    def divide(x: int) -> int:
        calls.append(x)
        return 10 // x if x not in broken else 10 // 0

    source = Stream.from_iterable([1, 2, 0, 5])
    out = source.map(divide).sink_to_list()
    with pytest.raises(NodeError):
        source.start()
    state = source.snapshot()
    assert state == {"offset": 2}

    broken.clear()
    again = Stream.from_iterable([1, 2, 0, 5])
    out = again.filter(lambda x: x != 0).map(divide).sink_to_list()
    again.restore(state)
    again.start()
    assert out == [2] and again.offset == 4


def test_a_node_connected_mid_run_receives_the_next_items() -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        def grow(x: int) -> None:
            log.append(("out", x))
            if x == 2:
                source.map(lambda y: -y).sink(lambda y: log.append(("new", y)))

        source.sink(grow)

    fused, reference = run_both(build, list(range(5)))
    assert fused == reference
    assert ("new", -3) in fused["log"] and ("new", -2) not in fused["log"]


def test_a_node_destroyed_mid_run_is_no_longer_fed() -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        side = source.map(lambda y: log.append(("side", y)))

        def cut(x: int) -> None:
            log.append(("out", x))
            if x == 1:
                side.destroy()

        source.sink(cut)

    fused, reference = run_both(build, list(range(4)))
    assert fused == reference


@pytest.mark.parametrize("policy", ["skip", "route", "raise"])
def test_error_policies(policy: str) -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        node = source.map(lambda x: 10 // x).on_error(policy)  # type: ignore[arg-type]
        node.sink(lambda x: log.append(("out", x)))
        if policy == "route":
            node.errors.sink(lambda r: log.append(("error", r.element)))

    fused, reference = run_both(build, [1, 0, 2, 0, 5])
    assert fused == reference
    assert fused["offset"] == (1 if policy == "raise" else 5)


def test_pending_work_is_finished_before_the_next_item() -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        async def slow(x: int) -> None:
            await asyncio.sleep(0)
            log.append(("slow", x))

        source.map(lambda x: x * 2).sink(slow)
        source.sink(lambda x: log.append(("fast", x)))

    fused, reference = run_both(build, [1, 2, 3])
    assert fused == reference
    log = fused["log"]
    assert log.index(("slow", 2)) < log.index(("read", 2))


def test_routed_errors_to_a_coroutine_sink_are_awaited() -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        async def record(r: Any) -> None:
            await asyncio.sleep(0)
            log.append(("error", r.element))

        node = source.map(lambda x: 1 // x).on_error("route")
        node.sink(lambda x: log.append(("out", x)))
        node.errors.sink(record)

    fused, reference = run_both(build, [1, 0, 2])
    assert fused == reference
    assert fused["log"].index(("error", 0)) < fused["log"].index(("read", 2))


def test_no_fusion_keeps_the_reference_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import streams.sources.iterable as iterable

    def refuse(*args: Any) -> bool:
        raise AssertionError("the compiled loop ran")

    monkeypatch.setattr(iterable, "drive", refuse)
    with fusion.unfused():
        source = Stream.from_iterable([1, 2])
        out = source.sink_to_list()
        source.start()
    assert out == [1, 2] and source.offset == 2


def test_drive_reports_a_stop() -> None:
    source = Stream.from_iterable([])
    out = source.sink_to_list()
    source.stopped = False
    source.filter(lambda x: x == 1).sink(lambda x: source.stop())
    counted: list[int] = []
    assert drive(source, iter([0, 1, 2, 3]), counted.append) is False
    assert out == [0, 1] and sum(counted) == 2


def test_a_body_with_its_own_loop_is_called_not_inlined() -> None:
    # A loop of the body holding a ``return`` could not be written into the
    # item loop (its ``continue`` would bind to the inner loop).
    import ast

    from streams.fused_loop import _inlinable

    body = ast.parse("for i in y:\n    if i:\n        return i\nreturn None").body
    assert not _inlinable(body)
    assert _inlinable(ast.parse("for i in y:\n    f(i)\nreturn None").body)


# -- the property: any pipeline, any input --------------------------------------------

STEPS: dict[str, Callable[[Stream[Any], list[Any], str], Stream[Any]]] = {
    "map": lambda s, log, tag: s.map(lambda x: log.append((tag, x)) or x * 3 - 1),
    "divide": lambda s, log, tag: s.map(lambda x: log.append((tag, x)) or 60 // x),
    "filter": lambda s, log, tag: s.filter(lambda x: log.append((tag, x)) or x % 2 == 0),
    "scan": lambda s, log, tag: s.scan(lambda a, x: log.append((tag, x)) or a + x, start=0),
    "partition": lambda s, log, tag: s.partition(2).map(sum),
    "flatten": lambda s, log, tag: s.map(lambda x: [x, x + 1]).flatten(),
    "skip": lambda s, log, tag: s.map(lambda x: 7 // (x % 4)).on_error("skip"),
    "route": lambda s, log, tag: _routed(s, log, tag),
}


def _routed(s: Stream[Any], log: list[Any], tag: str) -> Stream[Any]:
    node = s.map(lambda x: 5 // (x % 3)).on_error("route")
    node.errors.sink(lambda r: log.append((tag + "!", r.element)))
    return node


@settings(max_examples=80, deadline=None)
@given(
    branches=st.lists(st.lists(st.sampled_from(sorted(STEPS)), max_size=4),
                      min_size=1, max_size=3),
    items=st.lists(st.integers(-20, 20), max_size=25),
    stop_at=st.none() | st.integers(-20, 20),
    grow_at=st.none() | st.integers(-20, 20),
    kind=st.sampled_from(["generator", "list", "tuple"]),
)
def test_compiled_loop_equals_reference(branches: list[list[str]], items: list[int],
                                        stop_at: int | None, grow_at: int | None,
                                        kind: str) -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        for b, branch in enumerate(branches):
            node = source
            for i, step in enumerate(branch):
                node = STEPS[step](node, log, f"{b}.{i}.{step}")
            node.sink(lambda x, b=b: log.append((f"out{b}", x)))

        def control(x: int) -> None:
            if x == stop_at:
                source.stop()
            if x == grow_at:
                source.map(lambda y: -y).sink(lambda y: log.append(("grown", y)))

        source.sink(control)

    fused, reference = run_both(build, items, kind)
    assert fused == reference


@pytest.mark.parametrize("kind", [iter, list])  # a list: the loop counts nothing
def test_a_source_with_nothing_downstream_counts_every_item(kind: Any) -> None:
    source = Stream.from_iterable(kind(range(5)))
    source.start()
    assert source.offset == 5 and source._closed


@pytest.mark.parametrize("kind", ["generator", "list"])
def test_a_source_closed_from_inside_the_graph_fails_as_the_reference(kind: str) -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        def close_at_2(x: int) -> None:
            log.append(("out", x))
            if x == 2:
                source.close()

        source.sink(close_at_2)

    fused, reference = run_both(build, list(range(5)), kind)
    assert fused == reference
    assert fused["offset"] == 3 and "closed" in fused["error"][1]


# -- a list or a tuple: looped over without numbering ---------------------------------

def test_a_list_is_looped_over_without_numbering_its_items() -> None:
    import linecache

    source = Stream.from_iterable([1, 2])
    source.map(abs).sink_to_list()
    push = source._pusher()
    texts = ["".join(linecache.getlines(loop_for(push, positional).__code__.co_filename))
             for positional in (False, True)]
    assert "_enumerate(_it, 1)" in texts[0]
    assert "_enumerate" not in texts[1] and "for x_" in texts[1]


@pytest.mark.parametrize("kind", ["list", "tuple"])
@pytest.mark.parametrize("case", ["stop", "fail", "grow", "pending", "end"])
def test_offsets_over_a_sequence_are_the_references(kind: str, case: str) -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        async def later(x: int) -> None:
            log.append(("later", x))

        def control(x: int) -> None:
            log.append(("out", x))
            if case == "stop" and x == 3:
                source.stop()
            if case == "grow" and x == 2:
                source.map(lambda y: -y).sink(lambda y: log.append(("grown", y)))

        node = source.map(lambda x: 12 // (x - 4)) if case == "fail" else source
        node.sink(control)
        if case == "pending":
            source.filter(lambda x: x % 2 == 0).sink(later)

    fused, reference = run_both(build, list(range(7)), kind)
    assert fused == reference
    assert fused["offset"] == {"stop": 4, "fail": 4}.get(case, 7)


def test_items_appended_to_the_list_during_the_run_are_emitted_and_counted() -> None:
    items = [1, 2, 3]
    source = Stream.from_iterable(items)
    out = source.sink_to_list()
    source.filter(lambda x: x < 3).sink(lambda x: items.append(x + 10))
    source.start()
    assert out == [1, 2, 3, 11, 12] and source.offset == 5


def test_a_list_cut_below_the_position_counts_as_read_to_its_end() -> None:
    # The list iterator forgets its index when it runs out: the source then
    # stands at the list's end (documented in streams.fused_loop).
    items = list(range(6))
    source = Stream.from_iterable(items)
    out = source.sink_to_list()
    source.filter(lambda x: x == 3).sink(lambda x: items.__delitem__(slice(1, None)))
    source.start()
    assert out == [0, 1, 2, 3] and source.offset == 1


@pytest.mark.parametrize("kind", [list, tuple, iter])
def test_a_restored_source_over_a_sequence_resumes_at_its_offset(kind: Any) -> None:
    data = [1, 2, 0, 5, 4]
    source = Stream.from_iterable(kind(data))
    out = source.map(lambda x: 10 // x).sink_to_list()
    with pytest.raises(NodeError):
        source.start()
    again = Stream.from_iterable(kind(data[2:]) if kind is iter else kind(data))
    more = again.filter(lambda x: x != 0).map(lambda x: 10 // x).sink_to_list()
    again.restore({"offset": 2 if kind is not iter else 0})
    again.start()
    assert out + more == [10, 5, 2, 2] and again.offset == (5 if kind is not iter else 3)


def test_sink_to_list_loses_and_repeats_nothing_when_a_step_fails_mid_run() -> None:
    def run(fused: bool) -> tuple[list[Any], list[Any], int]:
        """A run that fails on 6, then its resumption from the snapshot, skipping 6."""
        # The failing branch first: the element it fails on reaches no other sink.
        source = Stream.from_iterable(list(range(10)))
        parts = source.map(lambda x: 60 // (x - 6)).sink_to_list()
        whole = source.sink_to_list()
        if fused:
            with pytest.raises(NodeError, match="ZeroDivisionError"):
                source.start()
        else:
            with fusion.unfused(), pytest.raises(NodeError, match="ZeroDivisionError"):
                source.start()
        state = source.snapshot()
        again = Stream.from_iterable(list(range(10)))
        again.map(lambda x: 60 // (x - 6)).on_error("skip").sink(parts.append)
        again.sink(whole.append)
        again.restore(state)
        again.start()
        return whole, parts, again.offset

    fused = run(True)
    assert fused == run(False)
    assert fused == (list(range(10)), [-10, -12, -15, -20, -30, -60, 60, 30, 20], 10)

