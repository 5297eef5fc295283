"""``to_dataframe()``: a Spark segment as a DataFrame transformation, typed columns out.

A pipeline that starts from a Spark DataFrame (``Stream.from_spark(df)``)
and ends with ``.to_dataframe(schema)`` never passes an element through the
driver: the segment's plan is applied to ``df`` (streaming or static) and a
last ``mapInArrow`` pass turns each output element into a row of ``schema``.
The result is an ordinary DataFrame, written with any Spark sink
(``writeStream.format("parquet")...``, ``foreachBatch``, ``toTable``), with
Spark's own checkpoints and exactly-once file sink.

How an element becomes a row: a ``dict`` by column name, a ``pyspark.sql.Row``
by name (else by position), a tuple or list by position, anything else is
the one column ``value``. Simple ``map`` and ``filter`` functions run as
Spark columns rather than in that pass (:mod:`streams_spark.native`).
Without ``schema``, a static DataFrame's schema is inferred by running the
segment in-process over its first rows (Spark's own inference of what comes
out); a streaming DataFrame needs ``schema``.

Several outputs may be taken from one segment (its branches), and a union
of several ``from_spark()`` inputs ends in one: each output is its own plan,
one per source DataFrame, their outputs joined by Spark's ``union`` (see
:mod:`streams_spark.segment` for what is refused, and why). An interval
``join`` of two ``from_spark()`` inputs becomes Spark's stream-stream join
(:mod:`streams_spark.join`).
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from functools import lru_cache, partial
from operator import itemgetter
from typing import Any

import pyarrow as pa

from streams.core import Stream
from streams.operators._late import LateSide
from streams.spec import build
from streams_spark.round_trips import select_expr

from .codec import DATA, ERROR, OutputError, carried_error, elements_of, fail_on_executor
from .join import join_frame
from .late import watch_dropped
from .listener import count_input
from .native import lower_native
from .plan import lower
from .row_values import quoted
from .segment import SparkSegment, outside_resident
from .shipping import ship_library
from .stages import COLUMNS
from .stream import build_query_frame
from .typed_payloads import payload_frame

__all__ = ["to_dataframe"]

#: Rows of a static DataFrame run in-process to infer the output schema.
INFER_ROWS = 100


@lru_cache(maxsize=128)
def _schema_json(ddl: str, timestamp_type: str | None) -> str:
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl).json()  # type: ignore[no-any-return]


def _parsed_schema(ddl: str, session: Any) -> Any:
    """``ddl`` as a new ``StructType`` (or other type), parsed by Spark once per text.

    Spark's parser takes two round trips to the JVM and 5-10 ms: a query
    built anew for each run (a notebook cell, a batch job's loop) paid it
    each time. Only ``TIMESTAMP`` depends on the session (its
    ``spark.sql.timestampType``), so that setting is part of the key. Each
    call gets its own object: a ``StructType`` is mutable (``add()``).
    """
    from pyspark.sql.types import _parse_datatype_json_string

    timestamp_type = (session.conf.get("spark.sql.timestampType", None)
                      if "timestamp" in ddl.lower() else None)
    return _parse_datatype_json_string(_schema_json(ddl, timestamp_type))


def _fields(value: Any, names: list[str]) -> list[Any]:
    """The column values of ``value`` for a row of ``names``."""
    if isinstance(value, dict):
        return [value.get(n) for n in names]
    fields = getattr(value, "__fields__", None)  # a pyspark Row
    if fields is not None and set(names) <= set(fields):
        return [value[n] for n in names]
    if isinstance(value, tuple | list):
        if len(value) != len(names):
            raise ValueError(f"has {len(value)} values for the {len(names)} columns {names}")
        return list(value)
    if len(names) != 1:
        raise ValueError(f"is one value, but the schema has {len(names)} columns {names}; "
                         "return a dict, Row or tuple")
    return [value]


def _by_name(kind: type, names: list[str]) -> Callable[[Any], tuple[Any, ...]] | None:
    """The output columns of a Row class whose fields are its class's (as ``_fields``).

    None when the class does not name every column (or names them per
    instance, as PySpark's own ``Row``).
    """
    fields = vars(kind).get("__fields__")
    if fields is None or not set(names) <= set(fields):
        return None
    at = [fields.index(n) for n in names]
    if len(at) == 1:
        return lambda row: (row[at[0]],)
    return itemgetter(*at)


class TypedRows:
    """Receives a last stage's outputs and failures as rows of the output schema.

    Used in place of the routing to a next stage (see
    :func:`streams_spark.stream.build_query_frame`): the values never cross
    Spark as pickles. A failure goes to its node's policy: ``skip`` logs it
    on the executor, ``raise`` fails the job naming the node and element.
    """

    def __init__(self, schema_json: str, nodes: dict[int, tuple[str, str]], last: str,
                 timezone: str = "UTC", batch_rows: int = 0) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType

        # Timestamps leave in the session's time zone, as Spark's own Arrow
        # batches do: an aware datetime keeps its instant, a naive one is a
        # wall time there (see _wall_times).
        self.schema = to_arrow_schema(StructType.fromJson(pickle.loads(bytes.fromhex(
            schema_json))), timezone=timezone)
        self.timezone = timezone
        self._zoned = {f.name for f in self.schema
                       if pa.types.is_timestamp(f.type) and f.type.tz is not None}
        self._integral = {f.name for f in self.schema if pa.types.is_integer(f.type)}
        self.names = self.schema.names
        self.nodes = nodes
        self.last = last
        self.batch_rows = batch_rows  # PySpark's rows per Arrow batch (see frame)
        self.cols: list[list[Any]] = [[] for _ in self.names]
        self._appends = [c.append for c in self.cols]

    #: It keeps no positions: a stage hands it all its outputs at once.
    bulk = True

    def extend(self, values: list[Any], failed: list[int]) -> None:
        """Outputs in order, some of them (at ``failed``) :class:`~streams.stage.Failure`."""
        if failed:
            bad = set(failed)
            for i in failed:
                e = values[i]
                self._failed(carried_error(e.node_id, e.element, e.error))
            values = [v for i, v in enumerate(values) if i not in bad]
        if not values:
            return
        n = len(self.names)
        kinds = set(map(type, values))
        if len(kinds) == 1:
            kind = kinds.pop()
            if issubclass(kind, tuple) and not hasattr(values[0], "__fields__"):
                if set(map(len, values)) == {n}:  # columns by position, transposed in C
                    self._transposed(values)
                    return
            elif issubclass(kind, tuple) and (by_name := _by_name(kind, self.names)):
                # Input Rows (one class, its fields on the class): by name, in C.
                self._transposed(values if vars(kind)["__fields__"] == self.names
                                 else list(map(by_name, values)))
                return
            elif kind is dict:
                for name, col in zip(self.names, self.cols, strict=True):
                    col.extend([v.get(name) for v in values])
                return
            elif n == 1 and not issubclass(kind, tuple | list):
                self.cols[0].extend(values)
                return
        for v in values:
            self.add(0, 0, DATA, v)

    def _transposed(self, rows: list[Any]) -> None:
        """Rows of the output's columns by position, one column each."""
        for col, column in zip(self.cols, zip(*rows, strict=True), strict=True):
            col.extend(column)

    def add(self, seq: int, sub: int, kind: int, value: Any) -> None:
        """An output value (``kind`` DATA) or a pickled failure (``kind`` ERROR)."""
        if kind == ERROR:
            self._failed(value)
            return
        try:
            row = _fields(value, self.names)
        except ValueError as e:
            raise OutputError(f"to_dataframe(): the element {value!r:.120} from "
                              f"{self.last} {e}") from None
        for append, v in zip(self._appends, row, strict=True):
            append(v)

    def passthrough(self, seq: int, sub: int, kind: int, p: bytes) -> None:
        """A row of an earlier stage: a failure goes to its policy, control rows end here."""
        if kind == ERROR:
            self._failed(p)

    def _failed(self, p: bytes) -> None:
        fail_on_executor(p, self.nodes)

    def batch(self) -> pa.RecordBatch:
        """The rows so far (and start anew)."""
        arrays = []
        for name, col in zip(self.names, self.cols, strict=True):
            field = self.schema.field(name)
            try:
                if name in self._integral:
                    arrays.append(_integer_array(col, field.type))
                else:
                    if name in self._zoned:
                        col = _wall_times(col, self.timezone)
                    arrays.append(pa.array(col, type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError,
                    UnicodeEncodeError) as e:  # a str with a lone surrogate is not UTF-8
                raise OutputError(f"to_dataframe(): column {name!r} ({field.type}) "
                                  f"cannot hold what {self.last} returned: {e}") from None
            col.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def frame(self) -> Any:
        """The rows so far as the pandas frame of an ``applyInPandasWithState`` function.

        The frame holds Arrow IPC payloads, not the columns, which pandas
        would change (see :mod:`streams_spark.typed_payloads`).
        """
        return payload_frame(self.batch(), self.batch_rows)


def _integer_array(values: list[Any], to: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of the integer type ``to``, or an error saying why not.

    Arrow's conversion of Python values to an integer type truncates a float
    (1.5 is written 1), a ``Decimal`` or a ``Fraction``. Python takes as an
    integer what has ``__index__`` (``int``, NumPy's integers) and refuses a
    float where it needs an integer, even an integral one (``range(2.0)``,
    ``[0][0.0]``): so does the column, which fails on the first float
    whatever its value, not on the odd row that has a fraction.

    Arrow's own inference, when it finds integers, converts nearly as fast
    as the conversion to ``to``: 1,000,000 ints in 27.5 ms against 21.9,
    where a check of the values' types before it took 39.6 in all (best of
    15, 2026-12-05). The cast to ``to`` is safe: a value beyond it raises
    ``ArrowInvalid``.

    Examples
    --------
    >>> _integer_array([1, None, 2**31 - 1], pa.int32()).to_pylist()
    [1, None, 2147483647]
    >>> _integer_array([1, 2.0], pa.int64())
    Traceback (most recent call last):
    TypeError: 2.0 is a float, not an integer; return an int (int(), round(), //)
    """
    try:
        inferred = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        inferred = None  # converted below, which raises its own error
    if inferred is not None and (pa.types.is_integer(inferred.type)
                                 or pa.types.is_null(inferred.type)):
        return inferred.cast(to)
    kinds = set(map(type, values)) - {int, type(None)}
    refused = {k for k in kinds if not hasattr(k, "__index__")}  # bool: Arrow refuses it
    if refused:
        v = next(v for v in values if type(v) in refused)
        raise TypeError(f"{v!r:.80} is a {type(v).__name__}, not an integer; return an int "
                        "(int(), round(), //)")
    return pa.array(values, type=to)


def _wall_times(values: list[Any], zone: str) -> list[Any]:
    """``values`` with each naive datetime read as a wall time of ``zone``.

    Spark reads a naive time in its session's time zone (a ``TIMESTAMP``
    literal, PySpark's Arrow conversions), and the elements of
    ``from_spark(df)`` carry their times in it: so a time read from a row
    and written back naive (``r.at.replace(tzinfo=None)``) is the same
    instant. pyarrow alone would take a naive time as UTC. An ambiguous or
    missing wall time (the hour a clock turns back or skips) takes the
    offset before the change, as Java's ``LocalDateTime.atZone`` does.

    Examples
    --------
    >>> [v.isoformat() for v in _wall_times([datetime(2026, 7, 1, 12), None], "Europe/Berlin")
    ...  if v is not None]
    ['2026-07-01T12:00:00+02:00']
    >>> _wall_times([datetime(2026, 1, 1, tzinfo=UTC)], "+05:30")[0].hour  # aware: kept
    0
    """
    if not any(type(v) is datetime and v.tzinfo is None for v in values):
        return values
    place = _zone(zone)
    return [v.replace(tzinfo=place) if type(v) is datetime and v.tzinfo is None else v
            for v in values]


@lru_cache(maxsize=8)
def _zone(name: str) -> tzinfo:
    """Spark's session time zone ``name`` (a region, or an offset) as a ``tzinfo``.

    Examples
    --------
    >>> _zone("America/New_York"), str(_zone("+05:30")), str(_zone("GMT-8")), _zone("Z")
    (zoneinfo.ZoneInfo(key='America/New_York'), 'UTC+05:30', 'UTC-08:00', datetime.timezone.utc)
    """
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    offset = re.fullmatch(r"(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?", name)
    if offset:
        sign, h, m, sec = offset.groups()
        delta = timedelta(hours=int(h), minutes=int(m or 0), seconds=int(sec or 0))
        return timezone(-delta if sign == "-" else delta)
    if name in ("Z", "UTC", "GMT", "UT"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise OutputError(f"to_dataframe(): the session time zone {name!r} is neither a "
                          f"region nor an offset Python knows, so a naive datetime cannot "
                          f"be placed in it; give the times a tzinfo") from None


def _passed_through(df: Any, schema: Any) -> Any:
    """``df``'s own columns as the output of a segment with no step, or None.

    With no step, each element is an input Row, written by name: when the
    schema names input columns (of two or more) with their own types, that
    is a projection, which Spark runs with no row crossing to Python.
    """
    fields = {f.name: f for f in df.schema.fields}
    if len(fields) < 2 or len({n.lower() for n in fields}) != len(df.schema.fields):
        return None  # one column is the element itself; names Spark would confuse
    for f in schema.fields:
        column = fields.get(f.name)
        if column is None or column.dataType != f.dataType or (
                column.nullable and not f.nullable):
            return None
    if list(fields) == schema.names:
        return df
    # As text: a Column built in Python costs several round trips to the JVM.
    return select_expr(df, [quoted(f.name) for f in schema.fields])


def _infer(segment: SparkSegment, node: Stream[Any]) -> Any:
    """The schema of what the segment makes of its static DataFrames' first rows."""
    entries: list[Any] = []
    for entry, _ in segment.paths(node):
        if not any(entry is e for e in entries):
            entries.append(entry)
    for entry in entries:
        if entry.df.isStreaming:
            raise ValueError(
                f"to_dataframe(): {entry._label()} reads a streaming DataFrame, whose rows "
                "cannot be sampled before the query runs: give the output schema, e.g. "
                "to_dataframe('key string, total long')")
    heads: dict[int, Stream[Any]] = {e._node_id: Stream() for e in entries}
    nodes = dict(heads)
    for n in segment.lineage(node) if node._node_id not in heads else []:
        spec = n.describe()
        nodes[spec.id] = build(spec, [nodes[u] for u in spec.upstream_ids])
        if spec.traits.join is not None:
            # The sides are sampled one after the other, not interleaved in
            # time: what that makes late only thins the sample.
            nodes[spec.id].late.sink(lambda x: None)  # type: ignore[attr-defined]
    out = nodes[node._node_id].sink_to_list()
    for entry in entries:
        # The elements as the query's tasks make them of Spark's Arrow batches
        # (a time aware, in the session's zone), not collect()'s Rows.
        for batch in entry.df.limit(INFER_ROWS).toArrow().to_batches():
            for x in elements_of(batch):
                heads[entry._node_id].emit(x)
    for head in heads.values():
        head.close()
    if not out:
        raise ValueError(f"to_dataframe(): the first {INFER_ROWS} rows of "
                         f"{entries[0]._label()} give no output to infer a schema from: "
                         "give the schema")
    spark = entries[0].df.sparkSession
    if all(isinstance(v, dict | tuple | list) for v in out):
        return spark.createDataFrame(out).schema
    return spark.createDataFrame([(v,) for v in out], ["value"]).schema


def to_dataframe(self: Stream[Any], schema: Any = None) -> Any:
    """End a Spark segment with a DataFrame of its output, as typed columns.

    The segment must start at ``Stream.from_spark(df)``; the result is
    streaming if ``df`` is, and is written with any Spark sink. No element
    passes through the driver (see :mod:`streams_spark.dataframe` for how
    elements become rows).

    Parameters
    ----------
    schema : str or StructType, optional
        The output columns, as DDL (``"key string, total long"``) or a
        ``StructType``; inferred for a static DataFrame when omitted.

    Examples
    --------
    >>> import streams_spark
    >>> from streams import Stream
    >>> spark = streams_spark.default_session()
    >>> df = spark.createDataFrame([("a", 1), ("b", 2), ("a", 3)], "key string, n long")
    >>> out = (Stream.from_spark(df).map(lambda r: {"key": r.key, "n": r.n * 10})
    ...        .to_dataframe("key string, n long"))
    >>> sorted(tuple(r) for r in out.collect())
    [('a', 10), ('a', 30), ('b', 20)]
    """
    segment = self._segment
    if not isinstance(segment, SparkSegment) or not segment.resident:
        raise ValueError(outside_resident(self))
    paths = segment.paths(self)
    lineage = [] if any(self is e for e in segment.entries) else segment.lineage(self)
    join = next((n for n in lineage if n._traits().join is not None), None)
    if len(paths) > 1 and len({entry.df.isStreaming for entry, _ in paths}) > 1:
        raise ValueError(
            f"to_dataframe(): {self._label()} reads a {'join' if join else 'union'} of "
            "streaming and static DataFrames, which Spark cannot run as one query here "
            "(a static side has no watermark); read both as streams "
            "(spark.readStream) or both as tables")
    for n in lineage:
        if isinstance(n, LateSide) and n._late_is_sunk():
            if n._traits().join is not None:
                why = ("its join takes a late row in, with the partners its state still "
                       "holds (a warning names such rows). Disconnect node.late, or gather() "
                       "each side and join in-process")
            else:
                then = ("Spark's windows then leave out the rows behind the watermark, and a "
                        "warning counts them" if any(e.df.isStreaming for e, _ in paths) else
                        "a static DataFrame has no watermark: every row then counts in its "
                        "windows")
                why = ("a late row would fail the query. Disconnect node.late "
                       f"({then}), or gather() and window in-process")
            raise ValueError(f"to_dataframe(): {n._label()} has its late stream connected, "
                             f"which Spark cannot feed: {why}")
        if n._policy == "route":
            raise ValueError(
                f"to_dataframe(): {n._label()} routes its errors to a Python stream, which "
                "a DataFrame cannot feed; use on_error('skip') (logged on the executors) "
                "or 'raise' (fails the query), or gather() and route in-process")
    segment.add_output(self)  # a second output of a stateful step is refused here
    ship_library(paths[0][0].df.sparkSession)  # before the user's sink starts the query
    if schema is None:
        schema = _infer(segment, self)
    from pyspark.sql.types import StructType

    if isinstance(schema, str):
        schema = _parsed_schema(schema, paths[0][0].df.sparkSession)
    if not isinstance(schema, StructType):
        raise TypeError(f"to_dataframe(): schema must be a DDL string or a StructType, "
                        f"got {schema!r:.80}")
    specs = [n.describe() for n in lineage]
    nodes = {s.id: (s.name, s.policy) for s in specs}
    session = paths[0][0].df.sparkSession

    def typed_rows() -> Any:
        # Made only for a plan that writes rows from Python: a source's label
        # prints its DataFrame, which costs round trips to the JVM.
        last = specs[-1].name if specs else self._label()
        return partial(TypedRows, pickle.dumps(schema.jsonValue()).hex(), nodes, last,
                       session.conf.get("spark.sql.session.timeZone") or "UTC",
                       int(session.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch",
                                            "10000")))

    if join is not None:  # Spark's stream-stream join of its two sides
        ahead = {id(n) for n in segment.lineage(join)}
        after = [s for n, s in zip(lineage, specs, strict=True) if id(n) not in ahead]
        return join_frame(segment, join, self, after, typed_rows(), schema, nodes)
    # One plan per source DataFrame; a union of them is Spark's union of
    # their outputs (same columns: the output schema). Each input is observed
    # for the progress() bars of the segment (rows per micro-batch).
    frames = []
    for (entry, chain), steps in zip(paths, segment.path_nodes(self), strict=True):
        df = count_input(entry.df, steps, entry._label)
        # Simple functions become Spark columns (see streams_spark.native).
        df, chain, frame = lower_native(df, chain, schema)
        if frame is None and not chain:
            frame = _passed_through(df, schema)
        frames.append(frame if frame is not None else build_query_frame(
            df, lower(chain), first=COLUMNS, output=(typed_rows(), schema)))
    out = frames[0]
    for frame in frames[1:]:
        out = out.union(frame)
    windows = [n for n in lineage if n._traits().event_time is not None]
    if windows and out.isStreaming:  # no driver in the path to name what Spark drops
        out = watch_dropped(out, windows)
    return out


setattr(Stream, "to_dataframe", to_dataframe)  # noqa: B010 - declared in streams/_api.py
