"""map, starmap, filter, remove, pluck, flatten."""

from __future__ import annotations

import asyncio

import pytest

from streams import Stream


def test_map_passes_extra_args_and_kwargs() -> None:
    source = Stream()
    out = source.map(lambda x, a, b=0: x + a + b, 10, b=100).sink_to_list()
    source.emit(1)
    assert out == [111]


def test_starmap_with_extra_args() -> None:
    source = Stream()
    out = source.starmap(lambda a, b, c: a * b + c, 5).sink_to_list()
    source.emit((2, 3))
    assert out == [11]


@pytest.mark.parametrize("predicate", [None, bool])
def test_filter_none_keeps_truthy(predicate) -> None:
    source = Stream()
    out = source.filter(predicate).sink_to_list()
    for x in [0, 1, "", "a", None, [], [0]]:
        source.emit(x)
    assert out == [1, "a", [0]]


def test_filter_and_remove_with_kwargs() -> None:
    source = Stream()
    kept = source.filter(lambda x, lo: x >= lo, lo=2).sink_to_list()
    removed = source.remove(lambda x, lo: x >= lo, lo=2).sink_to_list()
    for x in range(4):
        source.emit(x)
    assert kept == [2, 3] and removed == [0, 1]


def test_pluck_dict_key_and_list_of_keys() -> None:
    source = Stream()
    one = source.pluck("a").sink_to_list()
    many = source.pluck(["b", "a"]).sink_to_list()
    source.emit({"a": 1, "b": 2})
    assert one == [1] and many == [(2, 1)]


def test_flatten_and_concat_are_the_same_operator() -> None:
    source = Stream()
    a = source.flatten().sink_to_list()
    b = source.concat().sink_to_list()
    source.emit([1, 2])
    assert a == b == [1, 2]
    assert source.downstreams[1].describe().operator == "flatten"


def test_flatten_non_iterable_is_a_node_error() -> None:
    from streams import NodeError

    source = Stream()
    source.flatten().sink_to_list()
    with pytest.raises(NodeError, match=r"flatten failed on element 5: TypeError"):
        source.emit(5)


def test_coroutine_function_in_map_is_awaited_not_dropped() -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    source = Stream()
    out = source.map(double).sink_to_list()
    source.emit(1)  # no loop running: emit runs the coroutine to completion
    source.emit(2)
    assert out == [2, 4]


def test_coroutine_sink_is_awaited_by_async_emit() -> None:
    seen: list[int] = []

    async def slow_sink(x: int) -> None:
        await asyncio.sleep(0)
        seen.append(x)

    async def main() -> None:
        source = Stream(asynchronous=True)
        source.map(lambda x: x + 1).sink(slow_sink)
        for i in range(3):
            await source.emit(i)
            assert seen[-1] == i + 1  # finished when emit resolved: backpressure

    asyncio.run(main())
    assert seen == [1, 2, 3]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_pluck_reads_its_list_of_keys_at_every_element(fused: bool) -> None:
    # As streamz: the list is the user's; fused code wrote in the keys it held at the first.
    import contextlib

    from streams.fusion import unfused

    with contextlib.nullcontext() if fused else unfused():
        keys = ["a"]
        source: Stream[dict[str, int]] = Stream()
        out = source.pluck(keys).sink_to_list()
        source.emit({"a": 1, "b": 2})
        keys.append("b")
        source.emit({"a": 1, "b": 2})
        keys[0] = "c"
        with pytest.raises(KeyError):
            source.emit({"a": 1, "b": 2})
    assert out == [(1,), (1, 2)]


@pytest.mark.parametrize("operator", ["filter", "remove"])
def test_filter_and_remove_pass_metadata_on(operator: str) -> None:
    # They dropped it: a partition downstream then held an element whose
    # references (a Kafka offset) were already released.
    from streams import RefCounter

    source: Stream[int] = Stream()
    keep = (lambda x: True) if operator == "filter" else (lambda x: False)
    getattr(source, operator)(keep).partition(2).sink_to_list()
    ref = RefCounter()
    source.emit(1, metadata=[{"ref": ref}])
    assert ref.count == 1  # held by the partition until it emits
    source.emit(2)
    assert ref.count == 0
