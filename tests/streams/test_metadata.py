"""streamz's element metadata and RefCounter through the operators that hold elements."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import NodeError, RefCounter, Stream, VirtualClock, use_clock


class Metadata(Stream[Any]):
    """Emits the metadata each element arrives with (streamz's test helper)."""

    def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
        return self._emit(metadata) if metadata else None


def test_map_passes_metadata_and_holds_no_reference() -> None:
    source = Stream()
    out = Metadata(source.map(str)).sink_to_list()
    r = RefCounter()
    source.emit(1, metadata=[{"ref": r, "v": 1}])
    source.emit(2)
    assert out == [[{"ref": r, "v": 1}]]
    assert r.count == 0


def test_partition_holds_a_reference_until_its_group_is_emitted() -> None:
    done: list[int] = []
    source = Stream()
    out = Metadata(source.partition(2)).sink_to_list()
    refs = [RefCounter(cb=lambda i=i: done.append(i)) for i in range(4)]
    for i, r in enumerate(refs):
        source.emit(i, metadata=[{"ref": r}])
        assert r.count == (1 if i % 2 == 0 else 0)
    assert done == [0, 1, 2, 3]
    assert out == [[{"ref": refs[0]}, {"ref": refs[1]}], [{"ref": refs[2]}, {"ref": refs[3]}]]


def test_sliding_window_releases_an_element_when_no_window_needs_it() -> None:
    source = Stream()
    out = Metadata(source.sliding_window(2)).sink_to_list()
    source.emit(0)  # no metadata: the fast path
    a, b = RefCounter(), RefCounter()
    source.emit(1, metadata=[{"ref": a}])
    assert a.count == 1
    source.emit(2, metadata=[{"ref": b}])
    assert (a.count, b.count) == (0, 1)
    assert out == [[{"ref": a}], [{"ref": a}, {"ref": b}]]


def test_collect_releases_at_flush_and_close_flushes() -> None:
    source = Stream()
    collector = source.collect()
    out = Metadata(collector).sink_to_list()
    r = RefCounter()
    source.emit(1, metadata=[{"ref": r}])
    assert r.count == 1
    source.close()
    assert r.count == 0
    assert out == [[{"ref": r}]]


def test_zip_pairs_metadata_with_its_elements_also_after_elements_without() -> None:
    a, b = Stream(), Stream()
    out = Metadata(a.zip(b)).sink_to_list()
    a.emit(0)  # no metadata: the fast path, until some comes
    r1, r2 = RefCounter(), RefCounter()
    a.emit(1, metadata=[{"ref": r1}])
    b.emit(0, metadata=[{"v": 0}])
    assert r1.count == 1  # still buffered, behind 0
    b.emit(1, metadata=[{"ref": r2}])
    assert (r1.count, r2.count) == (0, 0)
    assert out == [[{"v": 0}], [{"ref": r1}, {"ref": r2}]]


def test_combine_latest_holds_each_latest_element_until_replaced() -> None:
    a, b = Stream(), Stream()
    out = Metadata(a.combine_latest(b, emit_on=a)).sink_to_list()
    ra, rb1, rb2 = RefCounter(), RefCounter(), RefCounter()
    b.emit("x", metadata=[{"ref": rb1}])
    b.emit("y", metadata=[{"ref": rb2}])
    assert (rb1.count, rb2.count) == (0, 1)
    a.emit(1, metadata=[{"ref": ra}])
    assert (ra.count, rb2.count) == (1, 1)
    assert out == [[{"ref": ra}, {"ref": rb2}]]


def test_zip_latest_releases_lossless_elements_once_emitted() -> None:
    a, b = Stream(), Stream()
    out = Metadata(a.zip_latest(b)).sink_to_list()
    r0, r1, rb = RefCounter(), RefCounter(), RefCounter()
    a.emit(0, metadata=[{"ref": r0}])
    a.emit(1, metadata=[{"ref": r1}])
    assert (r0.count, r1.count) == (1, 1)  # buffered until b has a value
    b.emit("x", metadata=[{"ref": rb}])
    assert (r0.count, r1.count, rb.count) == (0, 0, 1)
    assert out == [[{"ref": r0}, {"ref": rb}], [{"ref": r1}, {"ref": rb}]]


def test_timed_window_holds_references_until_its_window_is_emitted() -> None:
    with use_clock(VirtualClock()) as clock:
        source = Stream()
        out = Metadata(source.timed_window(1.0)).sink_to_list()
    r = RefCounter()
    source.emit(0)
    source.emit(1, metadata=[{"ref": r}])
    assert r.count == 1
    clock.advance(1.0)
    source.emit(2, metadata=[{"v": 2}])  # checks the deadline: the first window goes
    assert r.count == 0
    source.close()
    assert out == [[{"ref": r}], [{"v": 2}]]


def test_event_time_windows_carry_their_own_elements_metadata() -> None:
    source = Stream()
    out = Metadata(source.timed_window(10, time=lambda x: x, lateness=5)).sink_to_list()
    for t in [1, 12, 3, 25]:
        source.emit(t, metadata=[{"t": t}])
    source.close()
    assert out == [[{"t": 1}, {"t": 3}], [{"t": 12}], [{"t": 25}]]


def _emit_refs(source: Stream[Any], items: list[Any]) -> list[RefCounter]:
    refs = []
    for x in items:
        refs.append(RefCounter())
        source.emit(x, metadata=[{"ref": refs[-1], "x": x}])
    return refs


def test_keyed_sliding_and_session_windows_hold_references_until_emitted() -> None:
    # Each window holds its elements' refs (one per window an element is in)
    # and emits their metadata: a Kafka offset is not committed while a
    # window still holds its element.
    cases = [  # (window, counts after the four elements, each window's elements)
        (lambda s: s.timed_window(10, time=1, key=0), [0, 0, 1, 1],
         [[("a", 1)], [("b", 2)], [("a", 12)], [("b", 13)]]),
        (lambda s: s.timed_window(10, time=1, slide=5), [0, 1, 2, 2],
         [[("a", 1)], [("a", 1), ("b", 6)], [("b", 6), ("a", 12), ("b", 13)],
          [("a", 12), ("b", 13)]]),
        (lambda s: s.session_window(5, time=1, key=0), [0, 1, 1, 1],
         [[("a", 1)], [("b", 6), ("b", 9)], [("a", 12)]]),
    ]
    for make, counts, windows in cases:
        source = Stream()
        out = Metadata(make(source)).sink_to_list()
        items = [x for w in windows for x in w]
        items = sorted(set(items), key=items.index)
        refs = _emit_refs(source, items)
        assert [r.count for r in refs] == counts
        source.close()
        assert [r.count for r in refs] == [0] * len(refs)
        assert [[m["x"] for m in ms] for ms in out] == windows


def test_a_join_holds_references_while_it_holds_elements_and_pairs_carry_both() -> None:
    left, right = Stream(), Stream()
    out = Metadata(left.join(right, key=0, within=5, time=1)).sink_to_list()
    [a1] = _emit_refs(left, [("a", 1)])
    [a2] = _emit_refs(right, [("a", 2)])
    assert out == [[{"ref": a1, "x": ("a", 1)}, {"ref": a2, "x": ("a", 2)}]]  # the pair's order
    assert (a1.count, a2.count) == (1, 1)  # both held for partners to come
    [l30] = _emit_refs(left, [("a", 30)])
    [r30] = _emit_refs(right, [("a", 30)])  # the watermark, 30, forgets both
    assert (a1.count, a2.count, l30.count, r30.count) == (0, 0, 1, 1)
    right.close()  # the left's elements wait for nothing now: theirs go, the right's stay
    assert (l30.count, r30.count) == (0, 1)
    [l31] = _emit_refs(left, [("a", 31)])  # paired with the right's 30, not held
    assert (l31.count, r30.count) == (0, 1)
    assert out[-1] == [{"ref": l31, "x": ("a", 31)}, {"ref": r30, "x": ("a", 30)}]
    left.close()
    assert r30.count == 0


def test_restored_windows_and_joins_let_go_of_the_references_they_held() -> None:
    # A restore replaces what a node holds: the refs held for it go, and the
    # arrival numbers and windows of the restored state pick up none of them.
    from streams.snapshot import restore_graph, snapshot_graph

    for make in (lambda s: s.timed_window(10, time=1, key=0),
                 lambda s: s.session_window(5, time=1, key=0)):
        source = Stream()
        out = Metadata(make(source)).sink_to_list()
        snapshot = snapshot_graph(source)
        held = _emit_refs(source, [("a", 1), ("a", 2)])
        assert [r.count for r in held] == [1, 1]
        restore_graph(source, snapshot)
        assert [r.count for r in held] == [0, 0]
        [fresh] = _emit_refs(source, [("a", 3)])
        source.close()
        assert out == [[{"ref": fresh, "x": ("a", 3)}]] and fresh.count == 0
    left, right = Stream(), Stream()
    left.join(right, key=0, within=5, time=1)
    snapshot = snapshot_graph(left)
    [held1] = _emit_refs(left, [("a", 1)])
    restore_graph(left, snapshot)
    assert held1.count == 0


def test_lookup_and_stateful_map_pass_the_elements_metadata_on() -> None:
    source, table = Stream(), Stream()
    looked = Metadata(source.lookup(table, key=0)).sink_to_list()
    mapped = Metadata(source.stateful_map(lambda n, x: (n + 1, [x, n]), start=0)).sink_to_list()
    table.emit(("a", 5))
    [r] = _emit_refs(source, [("a",)])
    assert looked == [[{"ref": r, "x": ("a",)}]]
    assert mapped == [[{"ref": r, "x": ("a",)}]] * 2
    assert r.count == 0


def test_delay_holds_references_until_it_releases_the_element() -> None:
    with use_clock(VirtualClock()) as clock:
        source = Stream()
        out = Metadata(source.delay(1.0)).sink_to_list()
    source.emit(0)
    r = RefCounter()
    source.emit(1, metadata=[{"ref": r}])
    assert r.count == 1
    clock.advance(1.0)
    source.emit(2)  # releases what is due
    assert r.count == 0
    source.close()
    assert out == [[{"ref": r}]]


def test_buffer_and_map_async_carry_metadata_to_their_elements() -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    refs = [RefCounter() for _ in range(6)]

    async def main() -> list[Any]:
        source = Stream(asynchronous=True)
        out = Metadata(source.buffer(2).map_async(double, parallelism=2)).sink_to_list()
        for i, r in enumerate(refs):
            await source.emit(i, metadata=[{"ref": r, "i": i}] if i % 2 else None)
        assert any(r.count for r in refs)  # some are still held
        await source.aclose()
        return out

    out = asyncio.run(main())
    assert out == [[{"ref": refs[i], "i": i}] for i in (1, 3, 5)]
    assert [r.count for r in refs] == [0] * 6


def test_latest_holds_the_newest_element_until_replaced_or_closed() -> None:
    source = Stream()
    out = Metadata(source.latest()).sink_to_list()
    r1, r2 = RefCounter(), RefCounter()
    source.emit(1, metadata=[{"ref": r1}])
    source.emit(2, metadata=[{"ref": r2}])
    assert (r1.count, r2.count) == (0, 1)
    source.close()
    assert r2.count == 0
    assert out == [[{"ref": r1}], [{"ref": r2}]]


def test_emission_put_off_by_the_outbox_holds_its_own_reference() -> None:
    # A timer fires while downstream still works on the previous window: the
    # window waits behind it, and its elements stay referenced meanwhile.
    async def main() -> None:
        gate = asyncio.Event()

        async def slow(x: Any) -> None:
            await gate.wait()

        with use_clock(VirtualClock()) as clock:
            source = Stream(asynchronous=True)
            window = source.timed_window(1.0)
        window.sink(slow)
        await source.emit(0)
        await clock.advance_async(1.0)  # [0] goes; the sink blocks
        r = RefCounter()
        pending = source.emit(1, metadata=[{"ref": r}])  # waits for [0] (backpressure)
        await clock.advance_async(1.0)  # [1] waits behind [0]
        assert r.count == 1
        gate.set()
        await pending
        await source.aclose()
        assert r.count == 0

    asyncio.run(main())


def test_a_failing_branch_leaves_no_reference_held_by_the_branches_it_stopped() -> None:
    done: list[str] = []
    source = Stream()
    source.map(lambda x: 1 // x).sink(done.append)
    out = source.sink_to_list()  # a later branch: not reached when the first fails
    r = RefCounter(cb=lambda: done.append("released"))
    with pytest.raises(NodeError):
        source.emit(0, metadata=[{"ref": r}])
    assert out == []
    assert r.count == 0 and done == ["released"]  # a source commits what is released


@pytest.mark.parametrize(("keep", "released", "groups"), [
    ("first", [1, 0, 2], [[0, 2], [3]]),  # the second 1 is dropped: done at once
    ("last", [0, 1, 2], [[1, 2], [3]]),  # the first 1 is replaced: done then
])
def test_partition_unique_holds_references_until_its_group_is_emitted(
        keep: str, released: list[int], groups: list[list[int]]) -> None:
    done: list[int] = []
    source = Stream()
    out = Metadata(source.partition_unique(2, keep=keep)).sink_to_list()
    refs = [RefCounter(cb=lambda i=i: done.append(i)) for i in range(4)]
    for r, x in zip(refs, [1, 1, 2, 3], strict=True):
        source.emit(x, metadata=[{"ref": r}])
    assert done == released and refs[3].count == 1  # 3 waits for its group
    source.close()
    assert done == [*released, 3]
    assert out == [[{"ref": refs[i]} for i in group] for group in groups]


def test_slice_passes_the_metadata_of_the_elements_it_keeps() -> None:
    source = Stream()
    out = Metadata(source.slice(1, None, 2)).sink_to_list()
    refs = [RefCounter() for _ in range(4)]
    for i, r in enumerate(refs):
        source.emit(i, metadata=[{"ref": r}])
    assert out == [[{"ref": refs[1]}], [{"ref": refs[3]}]]
    assert all(r.count == 0 for r in refs)
