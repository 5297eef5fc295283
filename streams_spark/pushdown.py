"""What a lowered filter implies of its rows, in a form Spark pushes into its source.

A filter lowered to Spark (:mod:`streams_spark.native`) is one ``CASE``
that checks each row as Python would, failing the query where Python
raises (:mod:`streams_spark.checks`). Spark pushes no part of such a
``CASE`` into the scan: a hand-written ``where(kind = 2)`` skips the
Parquet row groups, and the partitions, whose statistics rule it out, but
the lowered filter read every row. So the lowering adds, before the
``CASE``, a condition that every row the filter keeps or fails on
satisfies: the tests of input columns against constants that lead to
them. Spark pushes that down; the ``CASE`` still decides, so the results
and the failures are Python's.

A row that fails a check must still reach it: a test taken after a check
on the path is left out (a row failing that check never made the test),
as is the result's own test where the path has a check; except where the
check is the test's own, the first on the path, of its column being None
(``r.price > 10`` fails on a None price): the test then lets those rows
through too (``price IS NULL OR price > 10``).

The tests made on every path (:func:`certain`) hold for every row the
``CASE`` sees: it is traced again with them known, and its branches do not
make them again (Nexmark's q1, hand-written with and without its ``CASE``
testing ``kind <=> 2`` again: 1.037x and 1.073x PySpark's rate, 31 paired
rounds, 2026-11-29); its guard tests them once, first
(:func:`streams_spark.checks.kept_rows`).

Examples
--------
>>> from pyspark.sql.types import LongType, StructField
>>> from streams_spark.row_values import RowValue
>>> from streams_spark.tracing import trace
>>> row = RowValue([StructField("kind", LongType()), StructField("auction", LongType())])
>>> leaves: list[Leaf] = []
>>> _ = trace(lambda r: r.kind == 2 and r.auction % 123 == 0, row, [], leaves=leaves)
>>> print(implied(leaves))
(`kind` = 2L)

An ordering fails on a None, and so lets it through:

>>> leaves = []
>>> _ = trace(lambda r: r.auction > 10, row, [], leaves=leaves)
>>> print(implied(leaves))
((`auction` IS NULL) OR (`auction` > 10L))

A row whose ``auction`` is None fails before the test of its kind, whatever
its kind: nothing can be pushed.

>>> leaves = []
>>> _ = trace(lambda r: (r.auction + 1, r.kind == 2)[1], row, [], leaves=leaves)
>>> print(implied(leaves))
None

The tests made on every path, which the checks take as done:

>>> leaves = []
>>> _ = trace(lambda r: r.kind == 2 and r.auction % 123 == 0, row, [], leaves=leaves)
>>> certain(leaves)
{'(`kind` <=> 2L)': True}
>>> leaves = []
>>> _ = trace(lambda r: r.kind == 0 or r.kind == 1, row, [], leaves=leaves)
>>> certain(leaves)  # either holds, neither on every path
{}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .column_values import Value, functions, has_constant, truth

__all__ = ["Leaf", "certain", "implied", "narrowed", "own_width"]

#: Paths an implied condition joins with OR, at most: beyond, Spark's
#: optimiser spends more on it than a scan gains.
MAX_ALTERNATIVES = 8


@dataclass(frozen=True)
class Leaf:
    """One path of a traced function, followed to its end."""

    #: The branches taken: the value branched on, the way taken, and how many
    #: guards the trace held before it.
    branches: list[tuple[Value, bool, int]]
    #: What the function returned on this path.
    result: Any
    #: How many guards the trace held when this path began, and when it ended.
    first_guard: int
    last_guard: int


def implied(leaves: list[Leaf], keep_when: bool = True) -> Any | None:
    """A condition true of every row the paths keep or fail on; None if there is none.

    A row is kept where the result's truth is ``keep_when`` (a ``filter``;
    ``remove`` keeps where it is false). The condition never fails itself:
    only pushable tests (:attr:`Value.pushable`), with AND and OR.
    """
    F = functions()
    alternatives = _alternatives(leaves, keep_when)
    if alternatives is None:
        return None
    if not alternatives:
        return F.lit(False)  # no row is kept, none fails
    texts = list(dict.fromkeys(
        atoms[0][0] if len(atoms) == 1 else "(" + " AND ".join(a for a, _ in atoms) + ")"
        for atoms in alternatives))
    return F.Sql(texts[0] if len(texts) == 1 else "(" + " OR ".join(texts) + ")")


def certain(leaves: list[Leaf], keep_when: bool = True) -> dict[str, bool]:
    """The tests :func:`implied` holds on every path: their truth's text, and the way taken.

    The checking filter tests :func:`implied`'s condition first, as its
    guard (:func:`streams_spark.checks.kept_rows`), which makes them known
    to the check's branches: they need not test them again
    (:class:`~streams_spark.column_values.Trace`'s ``known``).
    (See the module's examples.)
    """
    alternatives = _alternatives(leaves, keep_when)
    if not alternatives:
        return {}
    common = {test for _, test in alternatives[0] if test is not None}
    for atoms in alternatives[1:]:
        common &= {test for _, test in atoms if test is not None}
    return dict(common)


#: An atom of a path's condition: its text, and the test it is (the text of a
#: value's truth, and the way taken) or None where it lets a check's failures through.
_Atom = tuple[str, tuple[str, bool] | None]


def _alternatives(leaves: list[Leaf], keep_when: bool) -> list[list[_Atom]] | None:
    """Each path's atoms (ANDed; the paths ORed), or None where a path allows any row."""
    alternatives: list[list[_Atom]] = []
    for leaf in leaves:
        first = leaf.first_guard
        atoms: list[_Atom] = []
        for value, decision, guards_before in leaf.branches:
            if guards_before == first:  # no row has failed on this path yet
                if value.pushable:
                    atoms.append(_test(value, decision))
                continue
            # A row failing a guard before this branch did not come this way:
            # only the branch's own test, with its own failures, holds for it.
            failing = _own(value, first, guards_before)
            if failing is not None:
                atoms.append((f"({failing} OR {_way(value, decision, raw=True)})", None))
            break
        else:
            kept = _truth_on(leaf)
            if kept is not None and kept != keep_when and leaf.last_guard == first:
                continue  # no row is kept here, and none fails
            result = leaf.result
            if kept is None and isinstance(result, Value) and result.pushable:
                if leaf.last_guard == first:
                    atoms.append(_test(result, keep_when))
                elif (failing := _own(result, first, leaf.last_guard)) is not None:
                    atoms.append((f"({failing} OR {_way(result, keep_when, raw=True)})",
                                  None))
        atoms = list(dict.fromkeys(atoms))
        if not atoms:
            return None  # any row may be kept or fail here
        if atoms not in alternatives:
            alternatives.append(atoms)
    if len(alternatives) > MAX_ALTERNATIVES:
        return None
    return alternatives


def _test(value: Value, decision: bool) -> _Atom:
    return _way(value, decision), (str(truth(value)), decision)


def narrowed(df: Any, conditions: Sequence[str]) -> Any:
    """``df`` where ``conditions`` hold: a filter Spark pushes into the source.

    Before a check, :func:`streams_spark.checks.kept_rows` puts these tests
    at the head of the checking filter instead, and tests them again in the
    check's ``CASE``: the checks see only the rows these tests keep.
    """
    return df.where(" AND ".join(conditions)) if conditions else df


def _way(value: Value, decision: bool, raw: bool = False) -> str:
    """The test of ``value`` being ``decision``; ``raw``: its column as is, NULL where None."""
    if decision and not raw and value.where_true is not None:
        return str(value.where_true)  # an operand of AND and OR only (see _alternatives)
    test = value.col if raw else truth(value)
    return str(test if decision else ~test)


def _own(value: Value, first: int, last: int) -> Any | None:
    """Where ``value``'s own guards hold, if they are exactly the guards ``first:last``."""
    own = value.fails_where
    if own is None or own[0] != first or own[1] != last:
        return None
    return own[2]


def _truth_on(leaf: Leaf) -> bool | None:
    """Whether the result is true on this path, where that is known."""
    result = leaf.result
    for value, decision, _ in leaf.branches:
        if result is value:  # ``a and b``, ``a or b``: the operand branched on
            return decision
    if isinstance(result, tuple | list | dict):
        return len(result) > 0
    if isinstance(result, Value):
        return bool(result.constant) if has_constant(result) else None
    if result is None or isinstance(result, bool | int | float | str):
        return bool(result)
    return None


#: The smallest and largest value of a 32-bit integer column.
_INT = (-(2 ** 31), 2 ** 31 - 1)


def own_width(a: Value, b: Value) -> Any:
    """``a == b`` of a pushable test, an ``int`` column against a constant at its own width.

    ``kind = 2``, not ``CAST(kind AS BIGINT) = 2L``: the same rows (Spark's
    optimiser unwraps the cast itself), one cast less to analyse and
    unwrap on every query.

    >>> from pyspark.sql.types import IntegerType, StructField
    >>> from streams_spark.column_values import lift
    >>> from streams_spark.row_values import column
    >>> kind = column(functions().col("`kind`"), StructField("kind", IntegerType()))
    >>> print(own_width(kind, lift(2)), own_width(kind, lift(2 ** 40)))
    (`kind` = 2) (CAST(`kind` AS BIGINT) = 1099511627776L)
    """
    for x, y in ((a, b), (b, a)):
        if (x.raw is not None and x.dtype is not None and x.dtype.typeName() == "integer"
                and type(y.constant) is int and _INT[0] <= y.constant <= _INT[1]):
            return functions().Sql(f"({x.raw} = {y.constant})")
    return a.col == b.col
