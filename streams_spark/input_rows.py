"""Input rows that reach a window unchanged travel as their own columns.

A task over the user's DataFrame makes each row an element
(:func:`~streams_spark.codec.elements_of`); where the steps before a window
only select elements (``filter``), the element bound for the window is
that row itself. Alone in its window and key (see
:class:`~streams_spark.routing.Router`), it would be pickled, carried by
Spark as bytes and unpickled by the window's task: about 5 us of Python
for a Row of five fields, more than the work of most steps. Here it
leaves as a row of kind :data:`~streams_spark.codec.ROW` whose column
``r`` is the input row's columns, taken from the task's input batch at
once, and the window's task builds the element again from them, as the
first task did. Elements that share a window and key still go packed,
pickled together: one row each there made Nexmark's q5 (sliding windows,
each bid in five) and q7 take 2.1x and 1.5x the time.

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
>>> carried.index(11, 0, elements[1]), carried.index(11, 1, elements[1])
(1, None)
>>> carried.index(11, 0, ("b", 2)) is None  # an equal element, but not the row itself
True
>>> column = carried.column([None, 1])
>>> rows_at(column, [1])
[Row(k='b', n=2)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

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

    def index(self, seq: int, sub: int, value: Any) -> int | None:
        """The row of the current batch that ``value``, output ``sub`` of ``seq``, is; or None.

        The very object the batch's row became, unchanged (its values are
        immutable), as the first output of that element.
        """
        i = seq - self.base
        if sub == 0 and 0 <= i < len(self.elements) and self.elements[i] is value:
            return i
        return None

    def column(self, rows: list[int | None]) -> pa.Array:
        """Column ``r`` of output rows that are the current batch's ``rows`` (None: null).

        Of the input's own Arrow types, as Spark wrote them (its time zone,
        its string type), which it reads back as the input's schema.
        """
        assert self.rows is not None, "no input batch yet"
        return self.rows.take(pa.array(rows, pa.int64()))


def rows_at(column: pa.StructArray, at: list[int]) -> list[Any]:
    """The elements that rows ``at`` of a column ``r`` stand for, as the first task made them."""
    taken = column.take(pa.array(at, pa.int64()))
    return elements_of(pa.RecordBatch.from_struct_array(taken))
