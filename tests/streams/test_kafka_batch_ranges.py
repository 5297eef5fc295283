"""``get_message_batch`` takes a consumed batch at once only where its loop would take as much."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from streams.sources.kafka_batched import _taken_whole


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


def loop_outcome(msgs: list[Msg], partition: int, low: int, high: int) -> tuple[int, bool]:
    """What ``get_message_batch``'s per-message loop does with ``msgs``.

    How many it appends before it stops, and whether it only appended them
    and kept the rest (from the first past ``high``) for the next range;
    False where it raises or passes over a message.
    """
    expected = low
    for i, msg in enumerate(msgs):
        if msg.error() is not None:
            return i, False  # raised
        off = msg.offset()
        if msg.partition() != partition or off < expected:
            return i, False  # passed over
        if off > high:
            return i, True  # kept, with the rest, for the next range
        expected = off + 1
    return len(msgs), True


def test_a_batch_of_the_range_in_order_is_taken_whole() -> None:
    assert _taken_whole(Msg, [Msg(0, o) for o in (3, 4, 6, 9)], 0, 3, 9) == 4


def test_a_batch_past_the_range_is_taken_up_to_its_end() -> None:
    # A topic written in transactions: 3 and 7 are commit markers, never
    # delivered, so a batch of the range's size (0-7) reaches past it.
    batch = [Msg(0, o) for o in (0, 1, 2, 4, 5, 6, 8, 9)]
    assert _taken_whole(Msg, batch, 0, 0, 7) == 6


def test_anything_else_sends_the_batch_through_the_loop() -> None:
    run = [Msg(0, o) for o in range(3, 8)]
    assert _taken_whole(Msg, [], 0, 0, 9) == 0
    assert _taken_whole(Msg, [*run, Msg(0, -1, err="broker down")], 0, 0, 9) == 0
    assert _taken_whole(Msg, [Msg(1, 2), *run], 0, 0, 9) == 0  # another partition
    assert _taken_whole(Msg, run, 0, 4, 9) == 0  # before the range
    assert _taken_whole(Msg, run, 0, 0, 2) == 0  # all past it: the next range's
    assert _taken_whole(Msg, [*run, Msg(0, 7)], 0, 0, 9) == 0  # twice
    assert _taken_whole(Msg, [Msg(0, 5), Msg(0, 4)], 0, 0, 9) == 0  # out of order


batches = st.lists(st.builds(Msg, st.integers(0, 1), st.integers(0, 12),
                             st.sampled_from([None, None, None, "error"])), max_size=8)


@given(msgs=batches, low=st.integers(0, 12), span=st.integers(0, 12))
def test_what_is_taken_at_once_is_what_the_loop_takes(msgs: list[Msg], low: int,
                                                      span: int) -> None:
    taken = _taken_whole(Msg, msgs, 0, low, low + span)
    appended, only_appended = loop_outcome(msgs, 0, low, low + span)
    if taken:  # taken at once: as the loop takes them, keeping the rest
        assert (taken, only_appended) == (appended, True)
    # A batch the loop takes whole is always taken at once.
    assert taken == appended or not (only_appended and appended == len(msgs) > 0)
