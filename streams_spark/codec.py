"""How Python elements cross into and out of Spark as Arrow.

Elements enter as a typed Arrow column when the micro-batch allows it:
all ``int``, all ``float``, all ``str``, all ``bool``, or all tuples of one
length whose positions each hold one of those types (a struct column with
fields ``_0, _1, ...``, read back as tuples). Anything else is pickled, one
binary value per element. Typed columns are decoded column-wise, which is
much cheaper than unpickling element by element.

Every table that Spark carries between the steps of a plan has the columns
of :data:`ROW_FIELDS`: ``seq`` (the input position), ``sub`` (the position
among the outputs of that input), ``kind`` (data, error, or carried state)
and ``p`` (the pickled value).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

__all__ = [
    "DATA",
    "WINDOW",
    "value_of",
    "ERROR",
    "ROW_SCHEMA",
    "STATE",
    "decode_values",
    "encode_input",
    "rows_table",
]

DATA, ERROR, STATE = 0, 1, 2
#: A window: ``p`` pickles the list of its elements' pickles (not re-pickled).
WINDOW = 4

ROW_SCHEMA = pa.schema([
    ("seq", pa.int64()), ("sub", pa.int64()), ("kind", pa.int8()), ("p", pa.binary()),
])

_SCALARS: dict[type, pa.DataType] = {
    int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_(),
}
_INT64 = (-(2**63), 2**63 - 1)


def _scalar_type(values: Iterable[Any]) -> pa.DataType | None:
    """The Arrow type if every value has exactly one scalar Python type."""
    kinds = {type(v) for v in values}
    if len(kinds) != 1:
        return None
    (kind,) = kinds
    t = _SCALARS.get(kind)
    if t is pa.int64() and any(not _INT64[0] <= v <= _INT64[1] for v in values):
        return None
    return t


def encode_input(elements: Sequence[Any], first_seq: int) -> pa.Table:
    """The Arrow table for one micro-batch: ``seq`` and ``v`` (typed) or ``p``.

    Examples
    --------
    >>> encode_input([1, 2], 10).schema.names
    ['seq', 'v']
    >>> encode_input([("a", 1.0)], 0).column("v").type
    StructType(struct<_0: string not null, _1: double not null>)
    >>> encode_input([{"a": 1}], 0).schema.names
    ['seq', 'p']
    """
    seq = pa.array(range(first_seq, first_seq + len(elements)), pa.int64())
    column = _typed(elements) if elements else None
    if column is not None:
        return pa.table({"seq": seq, "v": column})
    p = pa.array([pickle.dumps(x, protocol=5) for x in elements], pa.binary())
    return pa.table({"seq": seq, "p": p})


def _typed(elements: Sequence[Any]) -> pa.Array | None:
    t = _scalar_type(elements)
    if t is not None:
        return pa.array(elements, t)
    first = elements[0]
    if type(first) is not tuple or not first:
        return None
    width = len(first)
    if any(type(x) is not tuple or len(x) != width for x in elements):
        return None
    columns = list(zip(*elements, strict=True))
    arrays = []
    for col in columns:
        ct = _scalar_type(col)
        if ct is None:
            return None
        arrays.append(pa.array(col, ct))
    fields = [pa.field(f"_{i}", a.type, nullable=False) for i, a in enumerate(arrays)]
    return pa.StructArray.from_arrays(arrays, fields=fields)


def decode_values(batch: pa.RecordBatch) -> list[Any]:
    """The Python elements of an input batch (see :func:`encode_input`).

    Examples
    --------
    >>> t = encode_input([(1, "a"), (2, "b")], 0)
    >>> decode_values(t.to_batches()[0])
    [(1, 'a'), (2, 'b')]
    """
    names = batch.schema.names
    if "v" in names:
        col = batch.column(names.index("v"))
        if pa.types.is_struct(col.type):
            return list(zip(*(c.to_pylist() for c in col.flatten()), strict=True))
        return col.to_pylist()  # type: ignore[no-any-return]
    loads = pickle.loads
    return [loads(b) for b in batch.column(names.index("p")).to_pylist()]


def value_of(kind: int, p: bytes) -> Any:
    """The element carried by a data or window row.

    Examples
    --------
    >>> value_of(WINDOW, pickle.dumps([pickle.dumps(1), pickle.dumps("a")]))
    [1, 'a']
    """
    if kind == WINDOW:
        return [pickle.loads(b) for b in pickle.loads(p)]
    return pickle.loads(p)


def rows_table(seq: list[int], sub: list[int], kind: list[int], p: list[bytes]) -> pa.RecordBatch:
    """A record batch of :data:`ROW_SCHEMA` from its four columns."""
    return pa.RecordBatch.from_arrays(
        [pa.array(seq, pa.int64()), pa.array(sub, pa.int64()),
         pa.array(kind, pa.int8()), pa.array(p, pa.binary())],
        schema=ROW_SCHEMA,
    )
