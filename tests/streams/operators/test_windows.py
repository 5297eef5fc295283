"""partition, partition_unique, sliding_window."""

from __future__ import annotations

from typing import Any

import pytest

from streams import Stream


def test_partition_by_key_groups_separately_and_flushes_all_at_close() -> None:
    source = Stream()
    out = source.partition(2, key=lambda x: x % 2).sink_to_list()
    for i in range(5):
        source.emit(i)
    assert out == [(0, 2), (1, 3)]
    source.close()
    assert out == [(0, 2), (1, 3), (4,)]


def test_partition_key_by_index() -> None:
    source = Stream()
    out = source.partition(2, key=0).sink_to_list()
    for x in [("a", 1), ("b", 2), ("a", 3)]:
        source.emit(x)
    assert out == [(("a", 1), ("a", 3))]


def test_partition_unique_keep_last_orders_by_last_seen() -> None:
    source = Stream()
    out = source.partition_unique(3, keep="last").sink_to_list()
    for x in [1, 2, 1, 3]:
        source.emit(x)
    # 1, 2, then 1 again moves 1 after 2: the group is (2, 1, 3)
    assert out == [(2, 1, 3)]


def test_partition_unique_key_and_flush_at_close() -> None:
    source = Stream()
    out = source.partition_unique(3, key=lambda x: x // 10).sink_to_list()
    for x in [11, 12, 21]:
        source.emit(x)
    source.close()
    assert out == [(11, 21)]


def test_sliding_window_short_stream_flushes_its_partial_window_at_close() -> None:
    source = Stream()
    out = source.sliding_window(3, return_partial=False).sink_to_list()
    source.emit(1)
    source.close()
    assert out == [(1,)]


@pytest.mark.parametrize("make", [
    lambda s: s.partition(2.0), lambda s: s.partition_unique(2.0),
    lambda s: s.sliding_window(2.0, return_partial=False), lambda s: s.buffer(2.0).partition(2)])
def test_a_count_given_as_a_float_with_no_fraction_is_its_int(make: Any) -> None:
    """streamz takes partition(2.0) (a count computed as n / 2): so does this library."""
    source = Stream()
    out = make(source).sink_to_list()
    for x in range(4):
        source.emit(x)
    assert [list(w) for w in out][:2] in ([[0, 1], [2, 3]], [[0, 1], [1, 2]])


@pytest.mark.parametrize("make", [lambda s: s.partition(2.5), lambda s: s.sliding_window(0.5),
                                  lambda s: s.buffer(True)])
def test_a_count_that_is_no_whole_number_is_refused_when_built(make: Any) -> None:
    with pytest.raises(TypeError, match=r"n must be an int, got"):
        make(Stream())
