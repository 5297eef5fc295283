"""How Python elements cross into and out of Spark as Arrow.

Batch mode moves elements in **chunks**: one row per few thousand elements,
whose binary cell is an Arrow IPC stream (:func:`pack`). Spark then carries
a handful of rows per micro-batch instead of converting every element to
and from its internal row format, which costs more than the Python work of
a typical chain; inside a chunk the values keep their Arrow types.

A chunk's values are a typed Arrow column when the chunk allows it: all
``int`` (within 64 bits), all ``float``, all ``str`` (that UTF-8 can encode:
no lone surrogate), all ``bool``, or all
tuples of one length whose positions each hold one of those types (a struct
column with fields ``_0, _1, ...``, read back as tuples). Anything else is
pickled, one binary value per element (values holding a class of the
user's ``__main__``: all of them in one, by value, see
:mod:`streams_spark.main_classes`). Typed columns are decoded
column-wise, which is much cheaper than unpickling element by element.

This module owns every kind of row that crosses to Spark and back (data,
errors, carried state, control rows, windows, packs), and how a value or an
error that cannot cross is turned into one that can.

Every table that Spark carries between the steps of a plan has the columns
of :data:`ROW_SCHEMA`: ``seq`` (the input position), ``sub`` (the position
among the outputs of that input), ``kind`` (data, error, or carried state)
and ``p`` (the payload: a packed chunk in batch mode, one pickled value in
stream mode).
"""

from __future__ import annotations

import functools
import itertools
import logging
import pickle
from collections import namedtuple
from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from . import main_classes
from .main_classes import by_value, holds_main_class, names_main

if TYPE_CHECKING:
    from streams.spec import NodeSpec

__all__ = [
    "CHUNK",
    "FLUSH",
    "FLUSH_MARK",
    "carried_error",
    "pickled_output",
    "picklable_rows",
    "DATA",
    "WINDOW",
    "WINDOW_ITEMS",
    "PACK",
    "ROW",
    "value_of",
    "ERROR",
    "ROW_SCHEMA",
    "STATE",
    "ErrorRecord",
    "OutputError",
    "fail_on_executor",
    "is_error",
    "mark_error",
    "pack",
    "elements_of",
    "unpack",
    "rows_table",
]

DATA, ERROR, STATE = 0, 1, 2
#: A control row: passes every step untouched; at the end of the stream it
#: flushes sequential steps and moves the watermark past every window.
FLUSH = 3
#: An input row holding a packed chunk of elements (never leaves a task).
CHUNK = 5
#: The payload of the end-of-stream row in a plan's input files.
FLUSH_MARK = b"streams-spark:flush"
#: A window: ``p`` pickles the list of its elements.
WINDOW = 4
#: A window assembled on the driver: ``p`` is the list of its elements itself.
WINDOW_ITEMS = 6
#: Elements of one group bound for one stateful stage, in one row: ``p``
#: pickles ``(seqs, subs, values)`` (see :mod:`streams_spark.packs`).
PACK = 7
#: Input rows bound for a window unchanged: the elements are the rows of the
#: list column ``r`` (see :mod:`streams_spark.input_rows`), the first at
#: ``seq``; ``p`` is null for one row, and for several holds their seqs as
#: little-endian int64s. Their ``sub`` is 0.
ROW = 8

ROW_SCHEMA = pa.schema([
    ("seq", pa.int64()), ("sub", pa.int64()), ("kind", pa.int8()), ("p", pa.binary()),
])

_SCALARS: dict[type, pa.DataType] = {
    int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_(),
}
def _one_type(values: Sequence[Any]) -> type | None:
    """The Python type of every value, if they all have the same one."""
    kinds = set(map(type, values))
    return kinds.pop() if len(kinds) == 1 else None


def _array(values: Sequence[Any], kind: type | None) -> pa.Array | None:
    t = _SCALARS.get(kind) if kind is not None else None
    if t is None:
        return None
    try:
        return pa.array(values, t)
    except (OverflowError, pa.ArrowInvalid):  # an int beyond 64 bits
        return None
    except UnicodeEncodeError:
        # A str with a lone surrogate (os.fsdecode's, surrogateescape's):
        # Arrow's strings are UTF-8, which cannot hold it; pickle can.
        return None


def _typed(elements: Sequence[Any]) -> pa.Array | None:
    """A typed Arrow array of ``elements``, or None if their types do not allow it."""
    kind = _one_type(elements)
    if kind is not tuple:
        return _array(elements, kind)
    # Whole-column checks run in C (map, set): this runs on the driver, on
    # every element, before Spark sees a micro-batch.
    widths = set(map(len, elements))
    if len(widths) != 1 or 0 in widths:
        return None
    arrays = []
    for i in range(widths.pop()):
        col = list(map(itemgetter(i), elements))
        array = _array(col, _one_type(col))
        if array is None:
            return None
        arrays.append(array)
    fields = [pa.field(f"_{i}", a.type, nullable=False) for i, a in enumerate(arrays)]
    return pa.StructArray.from_arrays(arrays, fields=fields)


def value_of(kind: int, p: Any) -> Any:
    """The element carried by a data or window row.

    Examples
    --------
    >>> value_of(WINDOW, pickle.dumps([1, "a"]))
    [1, 'a']
    >>> value_of(WINDOW_ITEMS, [1, "a"])
    [1, 'a']
    """
    if kind == WINDOW_ITEMS:
        return p
    return pickle.loads(p)


def rows_table(seq: list[int], sub: list[int], kind: list[int], p: list[bytes]) -> pa.RecordBatch:
    """A record batch of :data:`ROW_SCHEMA` from its four columns."""
    return pa.RecordBatch.from_arrays(
        [pa.array(seq, pa.int64()), pa.array(sub, pa.int64()),
         pa.array(kind, pa.int8()), pa.array(p, pa.binary())],
        schema=ROW_SCHEMA,
    )


def _column(values: Sequence[Any], to_executors: bool = False) -> tuple[str, pa.Array]:
    """``("v", typed array)`` if the types allow, else ``("p", pickles)``.

    Or ``("c", [the list pickled by value])`` for values holding a class of
    ``__main__`` (see :mod:`streams_spark.main_classes`): the class pickled
    once for them all. ``to_executors``: the values leave the driver, where
    such a class pickles plainly (by name), so the pickles are searched.
    """
    column = _typed(values) if values else None
    if column is not None:
        return "v", column
    dumps = pickle.dumps
    try:
        ps = [dumps(x, protocol=5) for x in values]
    except Exception:
        # On an executor a class of __main__ came by value; else this raises.
        return "c", pa.array([main_classes.dumps(list(values), values)], pa.binary())
    column = pa.array(ps, pa.binary())
    if to_executors and names_main(memoryview(column.buffers()[2])) and holds_main_class(values):
        return "c", pa.array([by_value(list(values))], pa.binary())
    return "p", column


def pack(values: Sequence[Any], errors: dict[int, bytes] | None = None,
         to_executors: bool = False) -> bytes:
    """One Arrow IPC stream holding ``values`` in order, typed where possible.

    ``errors`` maps positions to pickled error records: those positions of
    ``values`` are placeholders, and the values are then pickled (errors are
    rare; keeping them in place keeps the order of events). ``to_executors``:
    the driver's elements, whose classes of ``__main__`` travel by value
    (see :func:`_column`).

    Examples
    --------
    >>> unpack(pack([1, 2, 3]))
    [1, 2, 3]
    >>> unpack(pack([("a", 1.5)]))
    [('a', 1.5)]
    >>> pa.ipc.open_stream(pack([("a", 1.5)])).schema.field("v").type
    StructType(struct<_0: string not null, _1: double not null>)
    >>> unpack(pack([2**70, 1]))  # beyond int64: pickled
    [1180591620717411303424, 1]
    >>> unpack(pack(["a", "b\\udcff"]))  # a lone surrogate (not UTF-8): pickled
    ['a', 'b\\udcff']
    >>> unpack(pack([{"a": 1}, None]))
    [{'a': 1}, None]
    """
    if errors:
        marks = [errors.get(i) for i in range(len(values))]
        p = pa.array([None if i in errors else main_classes.dumps(x)
                      for i, x in enumerate(values)], pa.binary())
        table = pa.table({"p": p, "e": pa.array(marks, pa.binary())})
    else:
        name, column = _column(values, to_executors)
        table = pa.table({name: column})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def elements_of(batch: pa.RecordBatch) -> list[Any]:
    """The elements a batch of Spark rows stands for: one column's values, else Rows.

    Examples
    --------
    >>> elements_of(pa.RecordBatch.from_pydict({"n": [1, 2]}))
    [1, 2]
    >>> elements_of(pa.RecordBatch.from_pydict({"k": ["a"], "n": [1]}))
    [Row(k='a', n=1)]
    """
    if batch.num_columns == 1:
        return batch.column(0).to_pylist()  # type: ignore[no-any-return]
    cls = row_class(tuple(batch.schema.names))
    return list(map(tuple.__new__, itertools.repeat(cls),
                    zip(*(c.to_pylist() for c in batch.columns), strict=True)))


@functools.lru_cache(maxsize=64)
def row_class(names: tuple[str, ...]) -> type:
    """A subclass of ``pyspark.sql.Row`` with fields ``names``, read by attribute fast.

    PySpark's ``Row`` finds ``r.name`` by a search of its field list, and is
    built through a factory: about 2 us each, more than the work of most
    pipelines' functions. This subclass is built with ``tuple.__new__`` and
    reads a field through a property; it is a ``Row`` in every other way
    (``r["name"]``, ``r[1]``, ``asDict()``, its repr). It pickles as a Row
    of this class: a plain ``Row`` unpickles through PySpark's factory (about
    1 us each, several times the pickling) into a Row whose fields are found
    by search again, and elements cross Spark's stages pickled.

    Examples
    --------
    >>> from pyspark.sql import Row
    >>> r = tuple.__new__(row_class(("key", "value")), ("a", 1))
    >>> r.value, r["key"], r[1], isinstance(r, Row), r == Row(key="a", value=1), r
    (1, 'a', 1, True, True, Row(key='a', value=1))
    >>> back = pickle.loads(pickle.dumps(r))
    >>> type(back) is type(r), back.value
    (True, 1)
    """
    from pyspark.sql import Row

    def __reduce__(self: Any) -> tuple[Any, ...]:
        # The names tuple is one object for every Row of the class: a list of
        # Rows pickles it once (pickle's memo).
        return (_row_of, (names, tuple(self)))

    attrs: dict[str, Any] = {"__fields__": list(names), "__reduce__": __reduce__,
                             "_row_names": names}
    # namedtuple's field readers read a tuple's slot in C; an itemgetter
    # would go through Row.__getitem__, a Python method. The class is held
    # while they are read: a garbage collection of it clears its __dict__,
    # which a vars() view alone does not keep it from.
    readers = _slot_readers(len(names))
    for i, name in enumerate(names):
        # A name tuple or Row already answers (count, index, asDict) stays theirs.
        if name.isidentifier() and not hasattr(Row, name):
            attrs[name] = readers.__dict__[f"f{i}"]
    return type("Row", (Row,), attrs)


def _slot_readers(n: int) -> type:
    """A namedtuple class of ``n`` fields ``f0``, ``f1``...: its readers of a tuple's slots."""
    return namedtuple("_slots", [f"f{i}" for i in range(n)])


class _RowBlock:
    """Rows of one :func:`row_class`, pickled as its names and plain tuples."""

    __slots__ = ("names", "rows")

    def __init__(self, names: tuple[str, ...], rows: list[Any]) -> None:
        self.names = names
        self.rows = rows

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rows_of, (self.names, list(map(tuple, self.rows))))


def picklable_rows(values: list[Any]) -> Any:
    """``values``, or an object that pickles them faster and unpickles as their list.

    Elements that are input Rows (of :func:`row_class`, one class) pickle
    as one call's worth of plain tuples: pickle calls no ``__reduce__`` per
    Row, and unpickling builds them in one pass.

    Examples
    --------
    >>> cls = row_class(("k", "n"))
    >>> rows = [tuple.__new__(cls, ("a", 1)), tuple.__new__(cls, ("b", 2))]
    >>> back = pickle.loads(pickle.dumps(picklable_rows(rows)))
    >>> back, [type(r) is cls for r in back], picklable_rows([1, 2])
    ([Row(k='a', n=1), Row(k='b', n=2)], [True, True], [1, 2])
    """
    if not values:
        return values
    kinds = set(map(type, values))
    names = getattr(next(iter(kinds)), "_row_names", None) if len(kinds) == 1 else None
    return values if names is None else _RowBlock(names, values)


def _rows_of(names: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[Any]:
    """The Rows of a :class:`_RowBlock` (how one unpickles)."""
    return list(map(tuple.__new__, itertools.repeat(row_class(names)), rows))


def _row_of(names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
    """A Row of :func:`row_class` ``(names)`` (how one unpickles)."""
    return tuple.__new__(row_class(names), values)


def unpack(blob: bytes) -> list[Any]:
    """The values of :func:`pack` (error positions hold their pickled record)."""
    table = pa.ipc.open_stream(blob).read_all()
    names = table.schema.names
    if "v" in names:
        col = table.column("v").combine_chunks()
        if pa.types.is_struct(col.type):
            return list(zip(*(c.to_pylist() for c in col.flatten()), strict=True))
        return col.to_pylist()  # type: ignore[no-any-return]
    loads = pickle.loads
    if "c" in names:  # the list, pickled by value
        return loads(table.column("c")[0].as_py())  # type: ignore[no-any-return]
    ps = table.column("p").to_pylist()
    if "e" not in names:
        return [loads(b) for b in ps]
    return [loads(b) if e is None else ErrorRecord(e)
            for b, e in zip(ps, table.column("e").to_pylist(), strict=True)]


class ErrorRecord(bytes):
    """A pickled error record in the values of :func:`unpack`."""


def mark_error(p: bytes) -> bytes:
    """Mark a pickled error record so that it travels among values."""
    return ErrorRecord(p)


def is_error(value: Any) -> bool:
    """Whether an unpacked value is an error record (see :func:`pack`)."""
    return type(value) is ErrorRecord


def carried_error(node_id: int, x: Any, exc: BaseException) -> bytes:
    """Pickle ``(node id, element, exception)``, degrading what cannot be.

    Examples
    --------
    >>> node, element, error = pickle.loads(carried_error(3, lambda: 1, ValueError("v")))
    >>> node, repr(element).startswith("<function"), error
    (3, True, ValueError('v'))
    """
    try:  # an element of a class of __main__ crosses by value (see main_classes)
        return main_classes.dumps((node_id, x, exc), (x, exc))
    except Exception:
        pass
    # The element or the exception cannot cross processes: keep their text.
    text = RuntimeError(f"{type(exc).__name__}: {exc}")
    for element, error in ((_Unpicklable(repr(x)), exc), (x, text),
                           (_Unpicklable(repr(x)), text)):
        try:
            return pickle.dumps((node_id, element, error), protocol=5)
        except Exception:
            continue
    raise AssertionError("unreachable: text always pickles")


def pickled_output(kind: int, value: Any, last: NodeSpec | None) -> tuple[int, bytes]:
    """Pickle a value leaving a stage, as ``(kind, bytes)``.

    A value Spark cannot carry becomes an error row of ``last``, the node
    that returned it, whose message says what to do; with no node (the input
    itself) the pickling error is raised.
    """
    try:
        return kind, main_classes.dumps(value)
    except Exception as e:
        if last is None:
            raise
        return ERROR, carried_error(last.id, value, TypeError(
            f"{last.name} returned {value!r:.80}, which Spark cannot carry "
            f"(pickling failed: {e}); return plain data, or call gather() "
            f"before {last.operator}()"))


class OutputError(Exception):
    """An element of a ``to_dataframe()`` segment failed, on a Spark executor."""


def fail_on_executor(p: bytes, nodes: dict[int, tuple[str, str]]) -> None:
    """Apply its node's policy to a pickled failure, on an executor with no driver to tell.

    ``nodes`` maps a node id to its label and policy: ``skip`` logs the
    failure there, ``raise`` fails the job naming the node and the element.
    """
    node_id, x, exc = pickle.loads(p)
    label, policy = nodes[node_id]
    message = f"{label} failed on element {x!r:.120}: {type(exc).__name__}: {exc}"
    if policy == "skip":
        logging.getLogger("streams").warning("%s", message)
        return
    raise OutputError(message) from exc


class _Unpicklable:
    """Stands for an element that cannot be sent back to the driver."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text
