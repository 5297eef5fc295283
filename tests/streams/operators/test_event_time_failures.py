"""A failing element or pair moves no event-time state: joins and keyed state with ttl."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from streams import NodeError, Stream


def test_a_pair_failing_downstream_loses_neither_the_other_pairs_nor_the_element() -> None:
    left, right = Stream(), Stream()
    joined = left.join(right, key=0, within=5, time=1)
    failed: list[Any] = []

    def fails_once(pair: Any) -> Any:
        if not failed:
            failed.append(pair)
            raise RuntimeError("the sink is down")
        return pair

    out = joined.map(fails_once).sink_to_list()
    left.emit(("k", 1))
    left.emit(("k", 1.5))
    with pytest.raises(NodeError, match="the sink is down"):
        right.emit(("k", 2))  # pairs with both; the first pair fails downstream
    left.emit(("k", 3))  # a later partner of the element whose pair failed
    assert failed == [(("k", 1), ("k", 2))]
    assert out == [(("k", 1.5), ("k", 2)), (("k", 3), ("k", 2))]
    assert joined.held == 4


@pytest.mark.parametrize("make", [
    lambda s: s.scan(lambda acc, x: acc + x[2], start=0, key=0, ttl=10, time=1),
    lambda s: s.stateful_map(lambda st, x: ((st or 0) + x[2], [(x[0], (st or 0) + x[2])]),
                             key=0, ttl=10, time=1),
], ids=["scan", "stateful_map"])
def test_an_element_whose_key_fails_moves_no_time_and_expires_no_key(make: Any) -> None:
    source = Stream()
    out = make(source).on_error("skip").sink_to_list()
    logging.disable(logging.CRITICAL)  # the skipped element is logged
    try:
        source.emit(("a", 0, 1))
        source.emit((["not", "hashable"], 100, 1))  # skipped: its time must not count
        source.emit(("a", 1, 1))
    finally:
        logging.disable(logging.NOTSET)
    assert out == [("a", 1), ("a", 2)]  # "a" was not expired by the skipped element's time
