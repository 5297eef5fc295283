"""Fused code must behave exactly like the generic ``update`` protocol."""

from __future__ import annotations

import contextlib
import operator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import Stream, StreamClosedError
from streams.fusion import compile_push, is_fusable, unfused
from streams.graph import walk

# Each builder adds one operator; all are total on ints so no error paths.
BUILDERS = {
    "map": lambda s: s.map(lambda x: x * 3 - 1),
    "starmap": lambda s: s.map(lambda x: (x, 2)).starmap(operator.mul),
    "filter": lambda s: s.filter(lambda x: x % 2 == 0),
    "filter_none": lambda s: s.filter(None),
    "remove": lambda s: s.remove(lambda x: x % 3 == 0),
    "scan": lambda s: s.scan(operator.add, start=0),
    "scan_nostart": lambda s: s.scan(max),
    "scan_keyed": lambda s: s.scan(operator.add, start=0, key=lambda x: x % 3).pluck(1),
    "scan_with_state": lambda s: s.scan(operator.add, with_state=True).pluck(0),
    "pluck": lambda s: s.map(lambda x: (x, -x)).pluck(1),
    "pluck_list": lambda s: s.map(lambda x: (x, -x, x)).pluck([0, 2]).starmap(operator.sub),
}


def _build(ops: list[list[str]], fused: bool) -> tuple[Stream[Any], list[list[Any]]]:
    source: Stream[Any] = Stream()
    outs = []
    for branch in ops:
        node = source
        for op in branch:
            node = BUILDERS[op](node)
        outs.append(node.sink_to_list())
    if not fused:
        # Replace every compiled push with the reference: update() on each downstream.
        for n in walk(source):
            n._push = _reference_push(n)
    return source, outs


def _reference_push(n: Stream[Any]) -> Any:
    def push(x: Any) -> Any:
        for d in n.downstreams:
            d.update(x, n)

    return push


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(st.lists(st.sampled_from(sorted(BUILDERS)), max_size=4), min_size=1, max_size=3),
    data=st.lists(st.integers(-50, 50), max_size=30),
)
def test_fused_equals_generic(ops: list[list[str]], data: list[int]) -> None:
    fused_src, fused_out = _build(ops, fused=True)
    generic_src, generic_out = _build(ops, fused=False)
    for x in data:
        fused_src.emit(x)
        generic_src.emit(x)
    assert fused_out == generic_out


def test_fan_out_runs_branches_in_connection_order() -> None:
    source = Stream()
    seen: list[tuple[str, int]] = []
    source.map(lambda x: ("a", x)).sink(seen.append)
    source.map(lambda x: ("b", x)).sink(seen.append)
    source.emit(1)
    source.emit(2)
    assert seen == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]


def test_subclass_overriding_update_is_called_not_inlined() -> None:
    from streams.operators import Map

    class Loud(Map):
        __slots__ = ()

        def update(self, x, who=None, metadata=None):
            return self._emit(("loud", x))

    source = Stream()
    out = Loud(source, str).sink_to_list()
    source.emit(1)
    assert out == [("loud", 1)]
    assert not is_fusable(source.downstreams[0])


def test_graph_change_after_first_emit_is_seen() -> None:
    source = Stream()
    a = source.map(str).sink_to_list()
    source.emit(1)
    b = source.map(lambda x: -x).sink_to_list()
    source.emit(2)
    assert a == ["1", "2"] and b == [-2]


def test_feedback_loop_compiles_and_terminates() -> None:
    source = Stream()
    loop = source.map(lambda x: x - 1)
    stop = loop.filter(lambda x: x > 0)
    stop.connect(loop)
    out = loop.sink_to_list()
    source.emit(3)
    # Depth first, as streamz: the loop's first branch recurses before its sink runs.
    assert out == [0, 1, 2]


def test_compile_push_on_leaf_is_a_no_op() -> None:
    assert compile_push(Stream())(1) is None


def test_tracebacks_show_the_fused_code() -> None:
    import traceback

    source = Stream()
    source.map(lambda x: 1 // x).sink_to_list()
    try:
        source.emit(0)
    except Exception as e:
        text = "".join(traceback.format_exception(e))
    assert "<streams fused code" in text
    assert "= f_" in text  # the generated line itself, not "Could not get source"


def test_code_fused_again_after_a_restore_is_not_compiled_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A keyed stage on a Dask worker restores its node to each key group's
    # state in turn: the same code each time, compiled once.
    import builtins
    import traceback

    from streams import fusion

    source = Stream()
    total = source.map(lambda x: 1 // x).scan(operator.add, start=0)
    out = total.sink_to_list()
    source.emit(1)
    compiled: list[Any] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        compiled.append(args)
        return builtins.compile(*args, **kwargs)

    monkeypatch.setattr(fusion, "compile", counting, raising=False)
    for state in (10, 20):
        total.restore({"state": state})
        source.emit(1)
    assert out == [1, 11, 21]
    assert not compiled
    try:  # and its tracebacks still show the line that raised
        source.emit(0)
    except ZeroDivisionError as e:
        text = "".join(traceback.format_exception(e))
    assert "<streams fused code" in text and "= f_" in text


def test_a_push_taken_before_the_first_element_compiles_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # from_redis takes the source's push into a local for a batch: before
    # the first element that is the compiling push, which compiled the graph
    # again for every element of the batch (a Redis pipeline ran at 0.64x).
    from streams import fusion

    source = Stream()
    out = source.map(lambda x: x + 1).sink_to_list()
    push = source._push
    compiled: list[Any] = []

    def counting(node: Any) -> Any:
        compiled.append(node)
        return compile_push(node)

    monkeypatch.setattr(fusion, "compile_push", counting)
    for x in range(5):
        push(x)
    assert out == [1, 2, 3, 4, 5] and compiled == [source]
    source.map(str).sink(out.append)  # the graph changes: compiled again, once
    for x in range(2):
        push(x)
    assert out[5:] == [1, "0", 2, "1"] and compiled == [source, source]
    source.close()
    with pytest.raises(StreamClosedError, match=r"^stream is closed"):  # the source's own
        push(9)


def test_no_fusion_switch_runs_every_node_through_update() -> None:
    import subprocess
    import sys

    script = (
        "from streams import Stream\n"
        "from streams.operators import Map\n"
        "calls = []\n"
        "original = Map.update\n"
        "def update(self, x, who=None, metadata=None):\n"
        "    calls.append(x)\n"
        "    return original(self, x, who, metadata)\n"
        "Map.update = update\n"
        "s = Stream(); out = s.map(abs).sink_to_list()\n"
        "s.emit(-1); s.emit(-2)\n"
        "print(out, calls)\n")
    for env, expected in (("1", "[1, 2] [-1, -2]"), ("", "[1, 2] []")):
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env={**__import__("os").environ, "STREAMS_NO_FUSION": env},
                             check=True)
        assert run.stdout.strip() == expected


def _fan_out_changed_by_a_sink(change: str, run: str) -> tuple[list[int], list[Any]]:
    """A sink on one branch changes the graph below the other branch on element 2."""
    items = [1, 2, 3]
    source: Stream[int] = Stream.from_iterable(items) if run == "loop" else Stream()
    late: list[Any] = []

    def on_first_branch(x: int) -> None:
        if x != 2:
            return
        if change == "connect":
            mapped.sink(late.append)
        elif change == "destroy":
            sink.destroy()
        else:
            mapped.close()

    source.sink(on_first_branch)
    mapped = source.map(lambda x: x * 10).on_error("route")
    mapped.errors.sink(lambda r: late.append(r.element))
    below: list[int] = []
    sink = mapped.sink(below.append)
    if run == "loop":
        source.start()
    else:
        for x in items:
            try:
                source.emit(x)
            except StreamClosedError as e:
                late.append(str(e).split(" was not")[0][-9:])
    return below, late


@pytest.mark.parametrize("run", ["emit", "loop"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize(("change", "expected"), [
    ("connect", ([10, 20, 30], [20, 30])),  # the new sink gets the element on its way
    ("destroy", ([10], [])),                # the removed one does not
])
def test_a_sink_changing_a_later_branch_changes_it_for_the_element_on_its_way(
        change: str, expected: Any, run: str, fused: bool) -> None:
    # Fused code ran the later branch as compiled for the rest of the element.
    with contextlib.nullcontext() if fused else unfused():
        assert _fan_out_changed_by_a_sink(change, run) == expected


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_an_element_does_not_slip_through_a_node_a_sink_closed_on_its_way(
        fused: bool) -> None:
    with contextlib.nullcontext() if fused else unfused():
        below, refused = _fan_out_changed_by_a_sink("close", "emit")
    assert below == [10]
    assert refused == ["element 2", "element 3"]


@pytest.mark.parametrize("fused", [True, False])
def test_a_function_set_anew_runs_from_the_next_element(fused: bool) -> None:
    """node.func = other after the first element: the compiled code held the old one."""

    def run() -> tuple[list[Any], ...]:
        source: Stream[Any] = Stream()
        m = source.map(lambda x: x + 1)
        mapped = m.sink_to_list()
        acc = source.scan(lambda a, x: a + x, start=0)
        totals = acc.sink_to_list()
        kept = source.filter(lambda x: x > 0)
        passed = kept.sink_to_list()
        first: list[Any] = []
        then: list[Any] = []
        sink = source.sink(first.append)
        source.emit(1)
        m.func = lambda x: x * 100
        acc.func = lambda a, x: a * 10 + x
        kept.func = lambda x: x > 5
        sink.func = then.append
        source.emit(2)
        source.emit(7)
        return mapped, totals, passed, first, then

    if fused:
        out = run()
    else:
        with unfused():
            out = run()
    assert out == ([2, 200, 700], [1, 12, 127], [1, 7], [1], [2, 7])
