"""streamz's element metadata and RefCounter through the operators that hold elements."""

from __future__ import annotations

from typing import Any

from streams import RefCounter, Stream


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
