"""A source's compiled loop tests one flag an item (streams.fused_loop): a stop, a
change of the graph and a failure mid-run, with every step written in place.

As in test_fused_loop, each case runs compiled and as the reference
(``unfused()``) and compares what the user sees.
"""

from __future__ import annotations

from typing import Any

import pytest

from streams import NodeError, Stream
from streams.fused_loop import loop_for
from tests.streams.test_fused_loop import run_both


def _inlined(source: Stream[Any]) -> Stream[Any]:
    """Nexmark q1's shape: a filter whose predicate is a bool, a map, both written in place."""
    return source.filter(lambda x: type(x) is int).map(lambda x: x * 10)


def _stop(source: Any) -> None:
    source.stop()


def _set_stopped(source: Any) -> None:
    source.stopped = True  # as streamz code may stop a source


@pytest.mark.parametrize("how", [_stop, _set_stopped])
@pytest.mark.parametrize("kind", ["list", "tuple", "generator"])
def test_stop_from_a_sink_ends_an_inlined_chain_before_the_next_item(kind: str, how: Any
                                                                     ) -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        out = _inlined(source)
        out.sink(lambda y: log.append(("out", y)))
        out.filter(lambda y: y == 30).sink(lambda y: how(source))

    fused, reference = run_both(build, [1, "a", 2, 3, 4, 5], kind)
    assert fused == reference
    assert [e for e in fused["log"] if e[0] == "out"] == [("out", 10), ("out", 20), ("out", 30)]
    assert fused["offset"] == 4 and not fused["closed"]


@pytest.mark.parametrize("kind", ["list", "generator"])
def test_a_node_connected_by_a_sink_gets_the_next_items_of_an_inlined_chain(kind: str) -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        out = _inlined(source)

        def grow(y: int) -> None:
            log.append(("out", y))
            if y == 20:
                out.map(lambda z: -z).sink(lambda z: log.append(("new", z)))

        out.sink(grow)

    fused, reference = run_both(build, [1, 2, "a", 3, 4], kind)
    assert fused == reference
    assert [e for e in fused["log"] if e[0] == "new"] == [("new", -30), ("new", -40)]
    assert fused["offset"] == 5 and fused["closed"]


@pytest.mark.parametrize("kind", ["list", "generator"])
def test_a_stop_while_the_new_code_pushes_its_first_item_reads_as_the_reference(
        kind: str) -> None:
    # The graph changes on item 2, so item 3 goes through the new code, and
    # stops the source there: the next loop must read item 4 and stop, as
    # the source's own loop does (a generator's read is visible).
    def build(source: Stream[Any], log: list[Any]) -> None:
        def control(x: int) -> None:
            log.append(("out", x))
            if x == 2:
                source.sink(lambda y: log.append(("new", y)))
            if x == 3:
                source.stop()

        source.sink(control)

    fused, reference = run_both(build, list(range(7)), kind)
    assert fused == reference
    assert fused["offset"] == 4
    if kind == "generator":
        assert ("read", 4) in fused["log"] and ("read", 5) not in fused["log"]


@pytest.mark.parametrize("kind", ["list", "generator"])
@pytest.mark.parametrize("step", ["filter", "map"])
def test_an_inlined_step_failing_mid_list_keeps_the_offset(kind: str, step: str) -> None:
    def build(source: Stream[Any], log: list[Any]) -> None:
        node = (source.filter(lambda x: type(10 // x) is int) if step == "filter"
                else source.map(lambda x: 10 // x))
        node.sink(lambda y: log.append(("out", y)))

    fused, reference = run_both(build, [5, 2, 0, 1], kind)
    assert fused == reference
    assert fused["offset"] == 2
    assert fused["error"][0].startswith("NodeError") and "ZeroDivisionError" in fused["error"][1]


def test_the_loop_tests_one_flag_an_item_and_runs_no_instruction_for_try_lines() -> None:
    import dis
    import linecache

    source = Stream.from_iterable([1, 2])
    _inlined(source).sink_to_list()
    loop = loop_for(source._pusher(), True)
    text = "".join(linecache.getlines(loop.__code__.co_filename))
    # The stop is tested only once the flag is up (then the item taken is kept).
    # The item is kept for a new start() only where it stops, fails or returns
    # work (a pending result's return): no item going through pays for it.
    kept = text.count("_src._unsent = ")
    assert text.count("_src.") - kept == 3  # _interrupted; stopped and _push behind it
    assert "if _src._interrupted:\n" in text
    assert text.index("_src._interrupted") < text.index("_src.stopped")
    assert "NOP" not in {i.opname for i in dis.get_instructions(loop)}
    # Names bound in the namespace are locals of the loop; globals left:
    # the loop's own and the exception classes its handlers name.
    assert {i.argval for i in dis.get_instructions(loop) if i.opname == "LOAD_GLOBAL"} == {
        "_STOPPED", "_EXHAUSTED", "Exception", "BaseException"}


def test_a_loop_compiled_again_shows_its_own_lines_in_tracebacks() -> None:
    # The loop's code is kept per fused code: a pipeline built again reuses
    # it, under a file name of its own that holds its text.
    import linecache
    import traceback

    for _ in range(2):
        source = Stream.from_iterable([2, 0])
        source.map(lambda x: 10 // x).sink_to_list()
        with pytest.raises(NodeError) as info:
            source.start()
        frames = traceback.extract_tb(info.value.__cause__.__traceback__)
        loop = next(f for f in frames if f.name == "_loop")
        assert linecache.getline(loop.filename, loop.lineno).strip().startswith("x_")
        assert "f_" in linecache.getline(loop.filename, loop.lineno)
