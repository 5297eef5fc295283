"""What a Dask segment refuses, when the graph is built, and what it says."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import streams_dask  # noqa: F401
from streams import Stream


def test_scatter_and_to_dask_are_registered() -> None:
    source: Stream[Any] = Stream()
    node = source.to_dask().scatter()
    assert node.describe().operator == "scatter"
    assert node.describe().backend == "dask"
    assert node.upstream is not None and node.upstream.describe().operator == "to_dask"


def test_nodes_on_the_segment_describe_the_dask_backend() -> None:
    source: Stream[Any] = Stream()
    mapped = source.scatter().map(abs)
    back = mapped.gather()
    assert mapped.describe().backend == "dask"
    assert back.describe().backend is None
    assert source.describe().backend is None


@pytest.mark.parametrize("build, operator", [
    (lambda s: s.latest(), "latest"),
    (lambda s: s.sink(print), "sink"),
    (lambda s: s.combine_latest(s.map(abs)), "combine_latest"),
    (lambda s: s.scatter(), "scatter"),
    (lambda s: s.collect(), "collect"),
])
def test_unsupported_operator_is_refused_naming_it(build: Any, operator: str) -> None:
    seg = Stream().scatter()
    with pytest.raises(TypeError) as info:
        build(seg)
    message = str(info.value)
    assert f"{operator}()" in message
    assert f"gather() before {operator}()" in message


def test_partition_with_timeout_is_refused() -> None:
    seg = Stream().scatter()
    with pytest.raises(TypeError, match=r"timeout is wall-clock time.*gather\(\) before partition"):
        seg.partition(3, timeout=1.0)


def test_combining_a_segment_with_an_in_process_stream_is_refused() -> None:
    source: Stream[Any] = Stream()
    seg = source.scatter()
    with pytest.raises(ValueError, match="gather"):
        seg.zip(source.map(abs))


def test_a_node_combining_two_segments_runs_here_after_a_gather_of_each() -> None:
    a: Stream[Any] = Stream()
    b: Stream[Any] = Stream()
    zipped = a.scatter().map(abs).zip(b.scatter())
    assert [u.describe().operator for u in zipped.upstreams] == ["gather", "gather"]
    assert zipped.describe().backend is None  # it runs in this process
    back = zipped.gather()  # accepted, as in streamz: it passes results on
    assert back.upstream is zipped


def test_a_step_after_a_combination_of_segments_is_refused_with_the_way_out() -> None:
    source: Stream[Any] = Stream()
    joined = source.scatter().union(source.scatter())
    with pytest.raises(ValueError) as info:
        joined.map(abs)
    message = str(info.value)
    assert "map(abs)" in message and "union" in message
    assert "call gather() after union(), and scatter() again" in message


def test_unpicklable_function_is_refused_naming_it() -> None:
    lock = threading.Lock()

    def holds_a_lock(x: int) -> int:
        with lock:
            return x

    with pytest.raises(TypeError) as info:
        Stream().scatter().map(holds_a_lock, stream_name="locked")
    message = str(info.value)
    assert "holds_a_lock" in message and "'locked'" in message
    assert "cannot be pickled" in message


def test_unpicklable_parameter_is_refused() -> None:
    with pytest.raises(TypeError, match="parameter kwargs="):
        Stream().scatter().map(lambda x, lock: x, lock=threading.Lock())


def test_gather_without_scatter_is_refused_by_the_core() -> None:
    with pytest.raises(ValueError, match="scatter"):
        Stream().map(abs).gather()


@pytest.mark.parametrize("kwargs, error", [({"batch_size": 0}, ValueError),
                                           ({"max_in_flight": -1}, ValueError),
                                           ({"batch_size": 2.5}, TypeError)])
def test_bad_scatter_arguments(kwargs: dict[str, Any], error: type[Exception]) -> None:
    # The one check every operator uses: a wrong type is a TypeError.
    with pytest.raises(error, match="scatter"):
        Stream().scatter(**kwargs)


def test_unordered_scatter_refuses_a_step_with_state() -> None:
    with pytest.raises(TypeError, match=r"scan\(\)|accumulate\(\)"):
        Stream().scatter(ordered=False).map(abs).scan(max)


@pytest.mark.dask
@pytest.mark.parametrize("which", ["scatter", "map", "timed_window", "gather"])
def test_a_node_of_a_running_segment_is_not_destroyed_and_the_graph_goes_on(
        client: Any, which: str) -> None:
    # The workers run the plan made at the first element: cut from the
    # graph here, the node would go on running there (and close() failed).
    source: Stream[int] = Stream()
    entry = source.scatter(client=client)
    mapped = entry.map(abs)
    window = mapped.timed_window(3600)
    back = window.gather()
    out = back.sink_to_list()
    node = {"scatter": entry, "map": mapped, "timed_window": window, "gather": back}[which]
    source.emit(-1)
    with pytest.raises(RuntimeError, match=rf"destroy\(\): {which}.* Dask segment that is "
                       "already running"):
        node.destroy()
    source.emit(-2)
    source.close()
    assert out == [[1, 2]]


@pytest.mark.parametrize("which", ["map", "gather"])
def test_a_node_of_a_segment_not_started_yet_is_destroyed(which: str) -> None:
    source: Stream[int] = Stream()
    mapped = source.scatter().map(abs)
    back = mapped.gather()
    node = {"map": mapped, "gather": back}[which]
    node.destroy()
    assert node not in source.downstreams[0].downstreams + mapped.downstreams
