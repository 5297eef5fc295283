"""How values cross into and out of Spark: packed chunks, typed where possible."""

from __future__ import annotations

import gc
import pickle
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams import Stream
from streams.operators.window_bounds import Window
from streams_spark.batch import _task, encode_chunks
from streams_spark.codec import is_error, pack, row_class, unpack, value_of
from streams_spark.stages import collected_rows

scalars = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(), st.booleans(),
                    st.none())
values = st.one_of(scalars, st.tuples(scalars, scalars), st.lists(scalars, max_size=3))


def exact(xs: list[Any]) -> list[tuple[type, Any]]:
    return [(type(x), tuple(exact(list(x))) if isinstance(x, (tuple, list)) else x) for x in xs]


@given(st.lists(values, max_size=30))
def test_pack_round_trips_values_and_their_types(xs: list[Any]) -> None:
    assert exact(unpack(pack(xs))) == exact(xs)


@given(st.one_of(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1),
                 st.lists(st.tuples(st.text(), st.floats(allow_nan=False)), min_size=1)))
def test_uniform_chunks_cross_as_typed_arrow(xs: list[Any]) -> None:
    schema = pa.ipc.open_stream(pack(xs)).schema
    assert schema.names == ["v"]
    assert not pa.types.is_binary(schema.field("v").type)


def test_errors_keep_their_place_among_values() -> None:
    got = unpack(pack([1, None, 3], {1: b"err"}))
    assert got[0] == 1 and got[2] == 3
    assert is_error(got[1]) and bytes(got[1]) == b"err"
    assert not any(is_error(x) for x in unpack(pack([b"err"])))


@given(st.lists(st.integers(), max_size=50), st.integers(1, 4))
def test_chunks_split_a_batch_into_partitions_in_order(xs: list[int], parts: int) -> None:
    table = encode_chunks(xs, 100, parts)
    assert len(table.to_batches()) <= parts
    got = [x for b in table.column("b").to_pylist() for x in unpack(b)]
    assert got == xs
    seqs = table.column("seq").to_pylist()
    assert seqs == sorted(seqs) and all(s >= 100 for s in seqs)


def test_an_unpicklable_output_becomes_an_error_of_its_step_in_place() -> None:
    def f(x: int) -> Any:
        return (lambda: x) if x == 2 else x

    spec = Stream().map(f).describe()
    task = _task([spec], {}, flush=False, with_state=False)
    rows = list(task(iter(encode_chunks([1, 2, 3], 0, 1).to_batches())))
    out = [x for batch in rows for p in batch.column("p").to_pylist() for x in unpack(p)]
    assert out[0] == 1 and out[2] == 3
    node_id, element, error = pickle.loads(out[1])
    assert node_id == spec.id and repr(element).startswith("<function")  # stands for the value
    assert "map(f) returned" in str(error) and "gather()" in str(error)


#: An item of an aggregated window, as Spark collects it.
ITEM = pa.struct([("seq", pa.int64()), ("sub", pa.int64()), ("kind", pa.int8()),
                  ("p", pa.binary())])


def data(seq: int, value: Any) -> dict[str, Any]:
    """An item holding the pickled element ``value`` at ``seq``."""
    return {"seq": seq, "sub": 0, "kind": 0, "p": pickle.dumps(value)}


def test_windows_assembled_on_the_driver_come_by_end_then_opening_then_element() -> None:
    table = pa.table({
        "start": pa.array([2_000_000, 0, 1_000_000, 0, 0], pa.int64()),
        "end": pa.array([3_000_000, 2_000_000, 2_000_000, 2_000_000, 9_000_000], pa.int64()),
        "k": pa.array([None, pickle.dumps("y"), None, pickle.dumps("x"), None], pa.binary()),
        "items": pa.array([
            [data(5, "c")],
            [data(4, "e"), data(3, "d")],  # a key's window opened by element 3
            [data(2, "b"), data(1, "a")],  # opened by element 1
            [data(6, "f")],  # closes with the two above, opened last
            [{"seq": 9, "sub": 0, "kind": 3, "p": b"end of stream"}],  # control only
        ], pa.list_(ITEM)),
    })
    windows = [value_of(kind, p) for kind, p in collected_rows(table)]
    assert windows == [["a", "b"], ("y", ["d", "e"]), ("x", ["f"]), ["c"]]


def test_keyed_windows_with_bounds_come_with_their_key_and_bounds_in_seconds() -> None:
    table = pa.table({
        "start": pa.array([300_000, 0, 1_000_001, 0], pa.int64()),
        "end": pa.array([1_300_000, 1_000_000, 2_000_001, 9_000_000], pa.int64()),
        "k": pa.array([pickle.dumps(("a", 1)), pickle.dumps(2), pickle.dumps(("a", 1)), b""],
                      pa.binary()),
        "items": pa.array([[data(3, "c")], [data(1, "a"), data(2, "b")], [data(4, "d")],
                           [{"seq": 9, "sub": 0, "kind": 3, "p": b"end of stream"}]],
                          pa.list_(ITEM)),
        "bounds": pa.array([True] * 4),
    })
    # By end; the end-of-stream row's window holds no element: none. A table
    # collected from several batches holds several chunks.
    for chunked in (table, pa.concat_tables([table.slice(0, 1), table.slice(1)])):
        windows = [value_of(kind, p) for kind, p in collected_rows(chunked)]
        assert windows == [(2, Window(0.0, 1.0, ["a", "b"])),
                           (("a", 1), Window(0.3, 1.3, ["c"])),
                           (("a", 1), Window(1.000001, 2.000001, ["d"]))]
        assert all(type(w) is Window for _, w in windows)


def test_a_row_class_is_built_whole_when_the_collector_runs_meanwhile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # row_class() once read its field readers through a vars() view of a
    # class nothing else held: a garbage collection while it read them
    # cleared the class's dict, and it failed with KeyError: 'f0' (a CI run
    # of 2026-11-29). Here a full collection runs at each field it reads.
    from streams_spark import codec

    def collecting_hasattr(obj: Any, name: str) -> bool:
        gc.collect()
        return hasattr(obj, name)

    monkeypatch.setattr(codec, "hasattr", collecting_hasattr, raising=False)
    cls = row_class.__wrapped__(("key", "value"))  # not the cached class
    row = tuple.__new__(cls, ("a", 1))
    assert (row.key, row.value, row["key"]) == ("a", 1, "a")
