"""zip, combine_latest, zip_latest, union."""

from __future__ import annotations

import logging

import pytest

from streams import Stream


def test_zip_pairs_in_order_with_literals() -> None:
    a, b = Stream(), Stream()
    out = a.zip(b, 0).sink_to_list()
    for i in range(3):
        a.emit(i)
    b.emit("x")
    b.emit("y")
    assert out == [(0, "x", 0), (1, "y", 0)]


def test_zip_with_itself_pairs_each_element() -> None:
    a = Stream()
    out = a.zip(a).sink_to_list()
    a.emit(1)
    a.emit(2)
    assert out == [(1, 1), (2, 2)]


def test_zip_connect_adds_a_buffer() -> None:
    a, b, c = Stream(), Stream(), Stream()
    z = a.zip(b)
    out = z.sink_to_list()
    c.connect(z)
    a.emit(1)
    b.emit(2)
    assert out == []
    c.emit(3)
    assert out == [(1, 2, 3)]


def test_zip_unpaired_elements_at_close_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    a, b = Stream(), Stream()
    a.zip(b).sink_to_list()
    a.emit(1)
    with caplog.at_level(logging.WARNING, logger="streams"):
        a.close()
        b.close()
    assert "1 unpaired element(s), by input: {0: [1]}" in caplog.text


def test_combine_latest_emits_once_all_have_values() -> None:
    a, b = Stream(), Stream()
    out = a.combine_latest(b).sink_to_list()
    a.emit(1)
    b.emit("x")
    a.emit(2)
    assert out == [(1, "x"), (2, "x")]


def test_combine_latest_emit_on_index() -> None:
    a, b = Stream(), Stream()
    out = a.combine_latest(b, emit_on=1).sink_to_list()
    a.emit(1)
    b.emit("x")
    a.emit(2)
    b.emit("y")
    assert out == [(1, "x"), (2, "y")]


def test_zip_latest_buffers_lossless_until_others_arrive() -> None:
    a, b = Stream(), Stream()
    out = a.zip_latest(b).sink_to_list()
    a.emit(1)
    a.emit(2)
    b.emit("x")
    b.emit("y")
    a.emit(3)
    assert out == [(1, "x"), (2, "x"), (3, "y")]


def test_union_passes_everything_in_arrival_order() -> None:
    a, b, c = Stream(), Stream(), Stream()
    out = a.union(b, c).sink_to_list()
    a.emit(1)
    c.emit(3)
    b.emit(2)
    assert out == [1, 3, 2]


def test_combine_latest_follows_connect_and_disconnect_as_streamz() -> None:
    a, b, c = Stream(), Stream(), Stream()
    cl = a.combine_latest(b)
    out = cl.sink_to_list()
    c.connect(cl)
    a.emit(1)
    b.emit(2)
    c.emit(3)
    c.emit(4)
    assert out == [(1, 2, 3), (1, 2, 4)]
    c.disconnect(cl)
    a.emit(5)
    assert out[-1] == (5, 2)


def test_combine_latest_refuses_removing_its_only_emit_on_stream() -> None:
    a, b = Stream(), Stream()
    cl = a.combine_latest(b, emit_on=b)
    with pytest.raises(ValueError, match="the only stream it emits on"):
        b.disconnect(cl)
    assert b in cl.upstreams and cl in b.downstreams  # nothing half-removed


@pytest.mark.parametrize("end", ["partner_closes", "zip_closes", "partner_removed"])
def test_zip_producer_waiting_for_room_stops_when_no_partner_can_come(end: str) -> None:
    # a runs ahead of b by more than maxsize and waits for room; once b can
    # send nothing more (it ended, was disconnected, or the zip closed) the
    # wait is over: it used to last forever.
    import asyncio

    async def main() -> list[tuple[int, int]]:
        a, b = Stream(asynchronous=True), Stream(asynchronous=True)
        zipped = a.zip(b, maxsize=1)
        out = zipped.sink_to_list()
        await a.emit(1)
        waiting = asyncio.ensure_future(a.emit(2))
        await asyncio.sleep(0)
        assert not waiting.done()  # backpressure: a is more than maxsize ahead
        if end == "partner_closes":
            await b.aclose()
        elif end == "zip_closes":
            await zipped.aclose()
        else:
            b.disconnect(zipped)
        await asyncio.wait_for(waiting, 10)
        return out

    assert asyncio.run(main()) == []
