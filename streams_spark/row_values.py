"""An input row while a function is traced: its fields as column values.

A :class:`RowValue` stands for the row a ``map``, ``filter`` or window
function receives (see :mod:`streams_spark.native`); it builds each field's
column when the function first reads it, and records which fields were read,
for the checks' messages (:class:`streams_spark.checks.ElementText`).
"""

from __future__ import annotations

from typing import Any

from .column_values import BOOL, FLOAT, INT, Untraceable, Value, functions, kind_of

__all__ = ["RowValue", "column", "fields_of", "quoted", "reads_of"]


class RowValue:
    """Stands for an input row: its fields are :class:`Value` columns.

    Its own attributes are name-mangled, so that no column name is hidden.
    ``prefix`` qualifies its columns (```l`.``: a side of a join).
    """

    def __init__(self, fields: list[Any], non_null: set[str] | frozenset[str] = frozenset(),
                 prefix: str = "", read: set[int] | None = None) -> None:
        self.__non_null = non_null  # columns a check before this step proved never None
        self.__prefix = prefix
        self.__fields = fields
        self.__names = [f.name for f in fields]
        self.__values: dict[int, Value] = {}  # built when read: each costs Spark calls
        #: The positions of the fields read, shared with the copies made for this element.
        self.__read = set() if read is None else read

    def __value(self, i: int) -> Value:
        v = self.__values.get(i)
        if v is None:
            f = self.__fields[i]
            v = column(functions().col(quoted(f.name)), f)
            non_null = str(v.col) in self.__non_null
            if self.__prefix:
                v = column(functions().col(self.__prefix + quoted(f.name)), f)
            if non_null:
                v.nullable = False
            self.__values[i] = v
            self.__read.add(i)
        return v

    def __getattr__(self, name: str) -> Value:
        if name.startswith("__") or name.startswith("_RowValue__"):
            raise AttributeError(name)
        if name not in self.__names:
            raise Untraceable(f"the row has no field {name!r}")
        if _row_attribute(name):
            # In Python ``r.count`` is the Row's (a tuple's) method, not the
            # field (:func:`~streams_spark.codec.row_class`): run it there.
            raise Untraceable(f"row.{name} is the Row's own attribute in Python")
        return self.__value(self.__names.index(name))

    def __getitem__(self, key: Any) -> Value:
        n = len(self.__names)
        if type(key) is int and -n <= key < n:
            return self.__value(key % n)
        if type(key) is str and key in self.__names:
            return self.__value(self.__names.index(key))
        raise Untraceable(f"row[{key!r}]")

    def __bool__(self) -> bool:
        return bool(self.__names)

    def __eq__(self, other: Any) -> bool:
        raise Untraceable("comparing a whole row")

    __hash__ = None  # type: ignore[assignment]


def _row_attribute(name: str) -> bool:
    """Whether a ``pyspark.sql.Row`` answers ``name`` itself (``count``, ``index``, ``asDict``)."""
    from pyspark.sql import Row

    return hasattr(Row, name)


def fields_of(row: RowValue) -> list[Any]:
    """The input fields ``row`` stands for (not an attribute: that would hide a column)."""
    fields: list[Any] = vars(row)["_RowValue__fields"]
    return fields


def reads_of(row: RowValue) -> set[int]:
    """Where the fields read from ``row`` so far are: a set its copies share (``read=``)."""
    read: set[int] = vars(row)["_RowValue__read"]
    return read


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def column(col: Any, field: Any) -> Value:
    kind = kind_of(field.dataType)
    # Python holds every integer and float at full width: so must the arithmetic
    # (a long or a double column is that already).
    name = field.dataType.typeName()
    read = (col.cast("long") if kind == INT and name != "long"
            else col.cast("double") if kind == FLOAT and name != "double" else col)
    value = Value(read, kind, field.nullable, dtype=field.dataType, raw=col)
    value.pushable = kind == BOOL
    return value
