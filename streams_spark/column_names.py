"""Column names ``mapInArrow`` cannot take: renamed for the pass, given back in it.

PySpark's ``mapInArrow`` hands the pass a DataFrame's columns as
``df[name]``, which reads the name as a path: ``a.b`` is the field ``b`` of
a column ``a`` (``UNRESOLVED_COLUMN``), and a backtick breaks the path's
syntax (``INVALID_ATTRIBUTE_NAME_SYNTAX``). A step that ran in Python over
such a DataFrame failed so, where a step lowered to Spark columns worked.
So before a pass over the user's rows, where one name needs it, every
column is renamed by position (``_0``, ``_1``...), and the pass gives the
rows their own names back: its elements are the Rows ``r["a.b"]`` reads,
as in-process.

Examples
--------
>>> import streams_spark
>>> spark = streams_spark.default_session()
>>> df, names = renamed_for_pass(spark.createDataFrame([(1, 2)], "`a.b` long, `c` long"))
>>> df.columns, names
(['_0', '_1'], ('a.b', 'c'))
>>> renamed_for_pass(df)[1] is None  # nothing to rename
True
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .round_trips import select_expr
from .row_values import quoted

__all__ = ["named", "renamed_for_pass"]


def _unreadable(name: str) -> bool:
    """Whether ``df[name]`` does not read the column ``name`` (a path, or broken syntax)."""
    return "." in name or "`" in name


def renamed_for_pass(df: Any) -> tuple[Any, tuple[str, ...] | None]:
    """``df`` with columns ``mapInArrow`` can pass, and their names before (None: kept)."""
    names = df.columns
    if not any(map(_unreadable, names)):
        return df, None
    return (select_expr(df, [f"{quoted(n)} AS `_{i}`" for i, n in enumerate(names)]),
            tuple(names))


def named(batch: pa.RecordBatch, names: tuple[str, ...] | None) -> pa.RecordBatch:
    """``batch`` of a renamed DataFrame (see :func:`renamed_for_pass`), its columns named back."""
    if names is None:
        return batch
    return pa.RecordBatch.from_arrays(batch.columns, names=list(names))
