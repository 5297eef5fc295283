"""Input rows that reach a window unchanged travel as their own columns.

A task over the user's DataFrame makes each row an element
(:func:`~streams_spark.codec.elements_of`); where the steps before a window
only select elements (``filter``), the element bound for the window is
that row itself. Pickled, carried by Spark as bytes and unpickled by the
window's task, it would cost about 5 us of Python for a Row of five
fields, more than the work of most steps. Here it leaves in a row of kind
:data:`~streams_spark.codec.ROW` whose column ``r`` is a list of input rows,
taken from the task's input batch at once, and the window's task builds
the elements again from them, as the first task did. Rows that share a
window and key (see :class:`~streams_spark.routing.Router`) share one such
row, as elements share a pickled pack: one row each made Nexmark's q5
(sliding windows, each bid in five) and q7 take 2.1x and 1.5x the time.

Only over a static DataFrame: a stream's window keeps its rows in Spark's
state store, whose schema a checkpoint fixes, so its rows keep one schema.
And only for columns of immutable values (numbers, strings, bytes, times,
decimals): a step may change a list or a dict in place, and the window
must see the element as the steps left it, as in-process.

Examples
--------
>>> import pyarrow as pa
>>> batch = pa.RecordBatch.from_pydict({"k": ["a", "b"], "n": [1, 2]})
>>> carried = InputRows()
>>> elements = carried.start(batch, base=10)

A row is the very object the batch's row became, as its element's first
output; an equal tuple is not:

>>> carried.rows_of([11, 11, 10], [0, 1, 0], [elements[1], elements[1], ("a", 1)]).tolist()
[1, -1, -1]
>>> column = carried.column([0, 2, 1], [1, 0, 1])  # no rows, rows 1 and 0, row 1
>>> column.to_pylist()[0], len(column[1]), rows_at(column, [2])
(None, 2, [Row(k='b', n=2)])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .codec import elements_of

__all__ = ["InputRows", "carries", "rows_at"]


def carries(schema: Any) -> bool:
    """Whether rows of ``schema`` (Spark's) can travel as columns: every value immutable.

    Examples
    --------
    >>> from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType
    >>> carries(StructType([StructField("k", StringType()), StructField("n", LongType())]))
    True
    >>> carries(StructType([StructField("xs", ArrayType(LongType()))]))
    False
    """
    from pyspark.sql.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        NullType,
        NumericType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    # Python values no step can change in place: numbers, text, bytes,
    # dates and times (a list, a dict or a Row of a nested struct could be).
    atomic = (BinaryType, BooleanType, DateType, DecimalType, NullType, NumericType,
              StringType, TimestampNTZType, TimestampType)
    names = schema.fieldNames()
    return (bool(names) and len(set(names)) == len(names)  # a struct's fields: unique
            and all(isinstance(f.dataType, atomic) for f in schema.fields))


class InputRows:
    """A task's current input batch, from which unchanged elements leave as columns."""

    __slots__ = ("base", "elements", "rows")

    def __init__(self) -> None:
        self.elements: Sequence[Any] = ()
        self.rows: pa.StructArray | None = None
        self.base = 0

    def start(self, batch: pa.RecordBatch, base: int) -> list[Any]:
        """The elements of ``batch``, whose first is at ``seq`` ``base``; kept to be found."""
        elements = elements_of(batch)
        self.elements = elements
        self.rows = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))
        self.base = base
        return elements

    def rows_of(self, seqs: Sequence[int], subs: Sequence[int], values: Sequence[Any]
                ) -> np.ndarray:
        """The row of the current batch each of ``values`` is, or -1.

        Value ``i`` is output ``subs[i]`` of the element at ``seqs[i]``. It is
        a row where it is the very object the batch's row became, unchanged
        (its values are immutable), as the first output of that element.
        """
        elements, base = self.elements, self.base
        n = len(elements)
        return np.fromiter(  # type: ignore[no-any-return]
            (i if sub == 0 and 0 <= i < n and elements[i] is x else -1
             for i, sub, x in zip((s - base for s in seqs), subs, values, strict=True)),
            dtype=np.int64, count=len(values))

    def column(self, counts: Sequence[int], rows: Sequence[int]) -> pa.Array:
        """Column ``r`` of output rows holding ``counts[j]`` of the current batch's ``rows`` each.

        ``rows`` holds each output row's rows in turn; an output row of none
        is null. Of the input's own Arrow types, as Spark wrote them (its
        time zone, its string type), which it reads back as the input's schema.
        """
        assert self.rows is not None, "no input batch yet"
        n = np.asarray(counts, dtype=np.int32)
        offsets: np.ndarray = np.zeros(len(n) + 1, dtype=np.int32)
        np.cumsum(n, out=offsets[1:])
        return pa.ListArray.from_arrays(
            pa.array(offsets), self.rows.take(pa.array(rows, pa.int64())),
            mask=pa.array(n == 0))


def rows_at(column: pa.ListArray, at: Sequence[int]) -> list[Any]:
    """The elements the rows ``at`` of a column ``r`` hold, in turn, as the first task made them."""
    taken = pc.list_flatten(column.take(pa.array(at, pa.int64())))
    return elements_of(pa.RecordBatch.from_struct_array(taken))
