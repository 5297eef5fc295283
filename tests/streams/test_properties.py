"""Properties from the core issue, against the reference implementations."""

from __future__ import annotations

import itertools
import operator

import toolz
from hypothesis import given
from hypothesis import strategies as st

from streams import Stream

ints = st.lists(st.integers(-1000, 1000), max_size=200)


@given(ints, st.integers(1, 7))
def test_map_filter_chain_loses_and_reorders_nothing(data: list[int], k: int) -> None:
    source = Stream()
    out = source.map(lambda x: (x, x * k)).filter(lambda t: t[1] % 2 == 0).pluck(0).sink_to_list()
    for x in data:
        source.emit(x)
    assert out == [x for x in data if (x * k) % 2 == 0]


@given(ints)
def test_scan_equals_itertools_accumulate(data: list[int]) -> None:
    source = Stream()
    with_start = source.scan(operator.add, start=0).sink_to_list()
    without = source.scan(operator.add).sink_to_list()
    for x in data:
        source.emit(x)
    assert with_start == list(itertools.accumulate(data, operator.add, initial=0))[1:]
    assert without == list(itertools.accumulate(data, operator.add))


@given(ints, st.integers(1, 9))
def test_partition_agrees_with_toolz(data: list[int], n: int) -> None:
    source = Stream()
    out = source.partition(n).sink_to_list()
    for x in data:
        source.emit(x)
    assert out == list(toolz.partition(n, data))
    source.close()  # the end of the stream flushes the partial group
    assert out == list(toolz.partition_all(n, data))


@given(ints, st.integers(1, 9))
def test_sliding_window_agrees_with_toolz(data: list[int], n: int) -> None:
    source = Stream()
    out = source.sliding_window(n, return_partial=False).sink_to_list()
    for x in data:
        source.emit(x)
    assert out == list(toolz.sliding_window(n, data))


@given(ints, st.integers(1, 9))
def test_sliding_window_partial_windows_are_the_prefixes(data: list[int], n: int) -> None:
    source = Stream()
    out = source.sliding_window(n).sink_to_list()
    for x in data:
        source.emit(x)
    assert out == [tuple(data[max(0, i + 1 - n): i + 1]) for i in range(len(data))]


@given(st.lists(st.integers(0, 20), max_size=100), st.integers(1, 5))
def test_unique_with_maxsize_matches_an_lru_model(data: list[int], maxsize: int) -> None:
    source = Stream()
    out = source.unique(maxsize=maxsize).sink_to_list()
    for x in data:
        source.emit(x)
    recent: list[int] = []
    expected = []
    for x in data:
        if x in recent:
            recent.remove(x)
        else:
            expected.append(x)
        recent.append(x)
        del recent[:-maxsize]
    assert out == expected


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(-9, 9)), max_size=60))
def test_keyed_scan_equals_one_scan_per_key(data: list[tuple[str, int]]) -> None:
    source = Stream()
    out = source.scan(lambda s, x: s + x[1], start=0, key=0).sink_to_list()
    for x in data:
        source.emit(x)
    totals: dict[str, int] = {}
    expected = []
    for k, v in data:
        totals[k] = totals.get(k, 0) + v
        expected.append((k, totals[k]))
    assert out == expected


@given(st.lists(st.lists(st.integers(), max_size=4), max_size=30))
def test_flatten_equals_concat(data: list[list[int]]) -> None:
    source = Stream()
    out = source.flatten().sink_to_list()
    for x in data:
        source.emit(x)
    assert out == list(toolz.concat(data))


@given(st.lists(st.integers(), max_size=50), st.integers(0, 10), st.integers(0, 60),
       st.integers(1, 4))
def test_slice_equals_islice(data: list[int], start: int, end: int, step: int) -> None:
    source = Stream()
    out = source.slice(start, end, step).sink_to_list()
    for x in data:
        source.emit(x)
    assert out == list(itertools.islice(data, start, end, step))
