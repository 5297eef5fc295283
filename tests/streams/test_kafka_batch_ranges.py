"""``get_message_batch`` takes a consumed batch whole only where its loop would take it all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from streams.sources.kafka_batched import _all_of_range


@dataclass(frozen=True)
class Msg:
    """The part of ``confluent_kafka.Message`` the test reads (a message is not built in Python)."""

    part: int
    off: int
    err: Any = None

    def error(self) -> Any:
        return self.err

    def offset(self) -> int:
        return self.off

    def partition(self) -> int:
        return self.part


def loop_takes_all(msgs: list[Msg], partition: int, low: int, high: int) -> bool:
    """Whether ``get_message_batch``'s per-message loop would append every one of ``msgs``."""
    expected = low
    for msg in msgs:
        if msg.error() is not None:
            return False  # raised
        off = msg.offset()
        if msg.partition() != partition or off < expected or off > high:
            return False  # passed over, or held for the next range
        expected = off + 1
    return bool(msgs)


def test_a_batch_of_the_range_in_order_is_taken_whole() -> None:
    assert _all_of_range(Msg, [Msg(0, o) for o in (3, 4, 6, 9)], 0, 3, 9)


def test_anything_the_loop_would_not_take_sends_the_batch_through_it() -> None:
    run = [Msg(0, o) for o in range(3, 8)]
    assert not _all_of_range(Msg, [], 0, 0, 9)
    assert not _all_of_range(Msg, [*run, Msg(0, -1, err="broker down")], 0, 0, 9)
    assert not _all_of_range(Msg, [Msg(1, 2), *run], 0, 0, 9)  # another partition
    assert not _all_of_range(Msg, run, 0, 4, 9)  # before the range
    assert not _all_of_range(Msg, run, 0, 0, 6)  # past it: the next range's
    assert not _all_of_range(Msg, [*run, Msg(0, 7)], 0, 0, 9)  # twice
    assert not _all_of_range(Msg, [Msg(0, 5), Msg(0, 4)], 0, 0, 9)  # out of order


batches = st.lists(st.builds(Msg, st.integers(0, 1), st.integers(0, 12),
                             st.sampled_from([None, None, None, "error"])), max_size=8)


@given(msgs=batches, low=st.integers(0, 12), span=st.integers(0, 12))
def test_the_batch_test_agrees_with_the_loop(msgs: list[Msg], low: int, span: int) -> None:
    assert _all_of_range(Msg, msgs, 0, low, low + span) == loop_takes_all(msgs, 0, low, low + span)
