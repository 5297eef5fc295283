"""Feedback loops: an endless one is refused at connect(), a runaway one is named."""

from __future__ import annotations

from typing import Any

import pytest

from streams import NodeError, Stream
from streams.cycles import recursion_error
from streams.operators.transform import Map


def test_a_node_connected_to_itself_is_refused_and_the_graph_is_unchanged() -> None:
    a: Stream[Any] = Stream(stream_name="a")
    with pytest.raises(ValueError, match=r"stream 'a' -> stream 'a' would be a loop that no "
                                         r"element ever leaves.*filter"):
        a.connect(a)
    assert a.downstreams == [] and a.upstreams == []
    out = a.sink_to_list()
    a.emit(1)
    assert out == [1]


def test_a_loop_of_maps_is_refused_naming_every_node() -> None:
    a: Stream[Any] = Stream(stream_name="a")
    b = a.map(lambda x: x + 1, stream_name="b")
    c = b.pluck(0, stream_name="c")
    with pytest.raises(ValueError) as info:
        c.connect(a)
    assert "stream 'a' -> map(<lambda>) 'b' -> pluck(0) 'c' -> stream 'a'" in str(info.value)
    assert a not in c.downstreams


def test_a_loop_that_can_let_elements_out_is_accepted_and_ends() -> None:
    source: Stream[int] = Stream()
    again = source.map(lambda x: x - 1)
    again.filter(lambda x: x > 0).connect(again)
    out = again.sink_to_list()
    source.emit(3)
    assert sorted(out) == [0, 1, 2]


def test_a_subclass_of_map_may_drop_elements_so_its_loop_is_accepted() -> None:
    class EvenOnly(Map):
        _local_only = "a test node"

        def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
            return self._emit(x - 1) if x > 0 else None

    source: Stream[int] = Stream()
    node = EvenOnly(source, lambda x: x)
    node.connect(node)
    out = node.sink_to_list()
    source.emit(3)
    assert out == [0, 1, 2]  # depth first: the loop's edge was connected before the sink


def test_a_loop_that_never_lets_an_element_out_raises_a_recursion_error_naming_it() -> None:
    source: Stream[int] = Stream(stream_name="numbers")
    step = source.map(lambda x: x + 1, stream_name="step")
    step.filter(lambda x: x > 0).connect(source)
    with pytest.raises(RecursionError) as info:
        source.emit(1)
    text = str(info.value)
    assert ("went round the loop stream 'numbers' -> map(<lambda>) 'step' -> "
            "filter(<lambda>) -> stream 'numbers'") in text
    assert "recursion limit" in text
    assert isinstance(info.value.__cause__, RecursionError)


def test_a_node_error_wrapping_the_recursion_keeps_its_node_and_gets_the_loop_as_a_note() -> None:
    source: Stream[int] = Stream()
    step = source.map(lambda x: x + 1)
    step.filter(lambda x: x > 0).connect(source)
    error = NodeError(step, 7, RecursionError("maximum recursion depth exceeded"))
    named = recursion_error(source, error)
    assert named is error and named.node is step and named.element == 7
    assert any("went round the loop" in note for note in named.__notes__)
