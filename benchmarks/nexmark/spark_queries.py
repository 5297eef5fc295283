"""The Nexmark queries on Spark: as Spark-resident streams pipelines, and hand-written.

The events of ``events.py`` become one table of flat, nullable columns (a
``kind`` column says person, auction or bid; each kind fills its own
columns, named as the dataclasses' fields), written as Parquet. In a
``Stream.from_spark(df)`` pipeline each row arrives as a ``pyspark.sql.Row``,
whose fields are read by name: ``queries.py``'s functions that only read
fields (``euro``, ``q2_fields``, ``hot_item``, ``bidder``...) take rows as
they are; the ones that test an event's class get a row version here.

Event time ``dt`` is a column of microseconds since the epoch, not a Spark
timestamp: ``to_dataframe()`` cannot write a timestamp column (its executor
code builds the Arrow schema without a time zone, and PySpark 4.3 asserts
one), so q0's pass-through could not write the events back. Both sides get
the same integers; the hand-written query makes its windows' timestamps
with ``timestamp_micros``, the streams pipeline's time function returns
seconds.

Each windowed output carries a label: q5 the time of its window's first
bid, q7 the time of the winning bid (both computed from the window's
elements on both sides), q11 the session's start, in seconds, which the
streams function reads from its session (``session_window(...,
bounds=True)``) as the hand-written query reads ``session_window()``'s
``start``.
Elements of a window reach the function in no defined order on Spark (a
DataFrame has none), so the functions here do not depend on it: q7 takes
the earliest of the highest bids, which is what ``queries.highest_bid``
returns on in-order input.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import queries as q
from events import Auction, Bid, Person

__all__ = ["EVENT_SCHEMA", "OUTPUT", "QUERIES", "event_table", "pyspark_query",
           "same_functions_query", "streams_query"]

QUERIES = ("q0", "q1", "q2", "q5", "q7", "q8", "q11")

PERSON, AUCTION, BID = 0, 1, 2

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)

EVENT_SCHEMA = ("kind int, id long, name string, city string, state string, seller long, "
                "category long, initial_bid long, auction long, bidder long, price long, "
                "dt long")

#: The columns each query reads. Spark prunes the others from a hand-written
#: query, and from a streams pipeline whose functions run as Spark columns
#: (all of these); the functions that run in Python (the same-functions side's,
#: and streams' with ``--project``) read a projection, as their user writes it.
COLUMNS: dict[str, list[str]] = {
    "q0": ["kind", "id", "name", "city", "state", "seller", "category", "initial_bid",
           "auction", "bidder", "price", "dt"],
    "q1": ["kind", "auction", "bidder", "price", "dt"],
    "q2": ["kind", "auction", "price"],
    "q5": ["kind", "auction", "dt"],
    "q7": ["kind", "auction", "price", "dt"],
    "q8": ["kind", "id", "name", "seller", "dt"],
    "q11": ["kind", "bidder", "dt"],
}

#: Each query's output columns (the same on both sides).
OUTPUT: dict[str, str] = {
    "q0": EVENT_SCHEMA,
    "q1": "auction long, bidder long, price double, dt long",
    "q2": "auction long, price long",
    "q5": "first long, auction long, bids long",
    "q7": "dt long, auction long, price long",
    "q8": "id long, name string, auction long",
    "q11": "start double, bidder long, bids long",
}


# -- input ---------------------------------------------------------------------

def event_table(events: list[Any]) -> pa.Table:
    """The events as one Arrow table of :data:`EVENT_SCHEMA`'s columns."""
    names = [c.split()[0] for c in EVENT_SCHEMA.split(", ")]
    cols: dict[str, list[Any]] = {n: [] for n in names}
    none = [None] * 12
    idx = {n: i for i, n in enumerate(names)}
    for e in events:
        row = list(none)
        t = type(e)
        if t is Bid:
            row[0], row[idx["auction"]], row[idx["bidder"]], row[idx["price"]] = (
                BID, e.auction, e.bidder, e.price)
        elif t is Auction:
            row[0], row[idx["id"]], row[idx["seller"]] = AUCTION, e.id, e.seller
            row[idx["category"]], row[idx["initial_bid"]] = e.category, e.initial_bid
        else:
            assert t is Person
            row[0], row[idx["id"]], row[idx["name"]] = PERSON, e.id, e.name
            row[idx["city"]], row[idx["state"]] = e.city, e.state
        row[-1] = (e.dt - EPOCH) // MICROSECOND
        for n, v in zip(names, row, strict=True):
            cols[n].append(v)
    types = [pa.int32(), pa.int64(), pa.string(), pa.string(), pa.string(), pa.int64(),
             pa.int64(), pa.int64(), pa.int64(), pa.int64(), pa.int64(),
             pa.int64()]
    return pa.table({n: pa.array(cols[n], t) for n, t in zip(names, types, strict=True)})


# -- the queries' functions on rows ----------------------------------------------

def event_time(r: Any) -> float:
    """An event's time in seconds (``dt`` is in microseconds since the epoch)."""
    return r.dt / 1_000_000  # type: ignore[no-any-return]


def is_bid(r: Any) -> bool:
    return r.kind == BID  # type: ignore[no-any-return]


def q2_selected(r: Any) -> bool:
    """q2: bids of the auctions whose id is a multiple of 123."""
    return r.kind == BID and r.auction % 123 == 0  # type: ignore[no-any-return]


def hot_item(bids: list[Any]) -> tuple[Any, int, int]:
    """q5: the window's first bid time, and ``queries.hot_item``."""
    return (min(b.dt for b in bids), *q.hot_item(bids))


def _rank(b: Any) -> tuple[int, Any]:
    return (-b.price, b.dt)


def highest_bid(bids: list[Any]) -> tuple[Any, int, int]:
    """q7: the highest bid of a window (the earliest on ties): time, auction, price."""
    best = min(bids, key=_rank)
    return (best.dt, best.auction, best.price)


def is_person_or_auction(r: Any) -> bool:
    return r.kind == PERSON or r.kind == AUCTION  # type: ignore[no-any-return]


def owner(r: Any) -> int:
    """q8's key: a person's id, an auction's seller."""
    return r.id if r.kind == PERSON else r.seller  # type: ignore[no-any-return]


def new_users(key_rows: tuple[Any, list[Any]]) -> list[tuple[int, str, int]]:
    """q8: persons who opened auctions in the window they joined: (id, name, auction)."""
    _, rows = key_rows
    persons = [r for r in rows if r.kind == PERSON]
    auctions = [r for r in rows if r.kind == AUCTION]
    return [(p.id, p.name, a.id) for p in persons for a in auctions]


def session_count(key_session: tuple[Any, Any]) -> tuple[float, Any, int]:
    """q11: a bidder's session, with its bounds: its start (seconds), the bidder, its bids."""
    bidder, session = key_session
    return (session.start, *q.session_count((bidder, session.elements)))


# -- the two sides -------------------------------------------------------------------

def _untraced(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``func`` as a function the library runs in Python.

    The library turns no ``functools.partial`` into Spark columns. A partial
    calls ``func`` from C: no Python frame of its own per call, which a
    wrapper function would add to the streams side alone.
    """
    return functools.partial(func)


def streams_query(query: str, df: Any, project: bool = False, in_python: bool = False) -> Any:
    """The query as a Spark-resident streams pipeline over ``df``: a DataFrame.

    ``df`` is read as it is (Spark reads the columns the functions read), or
    with ``project`` through a projection on the query's columns (which a
    pipeline whose functions run in Python needs, and which the benchmark's
    runs before 2026-11-28 made). With ``in_python`` every function runs in
    Python (as one the library cannot turn into Spark columns does), over
    the projection.
    """
    from streams import Stream

    columns = COLUMNS[query]
    f = _untraced if in_python else (lambda func: func)
    source = Stream.from_spark(df.select(*columns) if (project or in_python)
                               and columns != df.columns else df)
    if query == "q0":
        node = source
    elif query == "q1":
        node = source.filter(f(is_bid)).map(f(q.euro))
    elif query == "q2":
        node = source.filter(f(q2_selected)).map(f(q.q2_fields))
    elif query == "q5":
        node = (source.filter(f(is_bid))
                .timed_window(q.WINDOW, slide=q.SLIDE, time=f(event_time)).map(f(hot_item)))
    elif query == "q7":
        node = source.filter(f(is_bid)).timed_window(q.WINDOW, time=f(event_time)).map(
            f(highest_bid))
    elif query == "q8":
        node = (source.filter(f(is_person_or_auction))
                .timed_window(q.WINDOW, time=f(event_time), key=f(owner))
                .map(f(new_users)).flatten())
    elif query == "q11":
        node = (source.filter(f(is_bid))
                .session_window(q.SESSION_GAP, time=f(event_time), key=f(q.bidder),
                                bounds=True)
                .map(f(session_count)))
    else:
        raise ValueError(query)
    return node.to_dataframe(OUTPUT[query])


def _micros(seconds: float) -> str:
    return f"{round(seconds * 1_000_000)} microseconds"


def pyspark_query(query: str, df: Any) -> Any:
    """The query hand-written with PySpark's DataFrame API over ``df``."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    if query == "q0":
        return df
    if query not in ("q1", "q2"):  # the windows' event time (q1 and q2 would drop it again)
        df = df.withColumn("et", F.timestamp_micros("dt"))
    bids = df.where(kind == BID)
    size = _micros(q.WINDOW)
    if query == "q1":
        return bids.select("auction", "bidder", (F.col("price") * F.lit(0.908)).alias("price"),
                           "dt")
    if query == "q2":
        return bids.where(F.col("auction") % 123 == 0).select("auction", "price")
    if query == "q5":
        counts = (bids.groupBy(F.window("et", size, _micros(q.SLIDE)).alias("w"), "auction")
                  .agg(F.count("*").alias("n"), F.min("dt").alias("first")))
        # The most bids, then the lowest auction id: the max of (n, -auction).
        top = counts.groupBy("w").agg(
            F.max(F.struct("n", (-F.col("auction")).alias("na"))).alias("top"),
            F.min("first").alias("first"))
        return top.select("first", (-F.col("top.na")).alias("auction"),
                          F.col("top.n").alias("bids"))
    if query == "q7":
        # The highest price, then the earliest: the min of (-price, dt).
        best = bids.groupBy(F.window("et", size).alias("w")).agg(
            F.min(F.struct((-F.col("price")).alias("np"), "dt", "auction")).alias("b"))
        return best.select(F.col("b.dt").alias("dt"), F.col("b.auction").alias("auction"),
                           (-F.col("b.np")).alias("price"))
    if query == "q8":
        persons = df.where(kind == PERSON).select(
            "id", "name", F.window("et", size).alias("w"))
        auctions = df.where(kind == AUCTION).select(
            "seller", F.col("id").alias("auction"), F.window("et", size).alias("w"))
        joined = persons.join(auctions, (persons.id == auctions.seller)
                              & (persons.w == auctions.w))
        return joined.select(persons.id, persons.name, auctions.auction)
    if query == "q11":
        sessions = bids.groupBy(F.session_window("et", _micros(q.SESSION_GAP)).alias("s"),
                                "bidder").agg(F.count("*").alias("bids"))
        return sessions.select((F.unix_micros("s.start") / 1e6).alias("start"), "bidder", "bids")
    raise ValueError(query)


# -- the same functions, hand-written in PySpark ------------------------------------
#
# What a Spark engineer would write around the very functions the streams
# pipeline calls: each row a named tuple (read by attribute, as the functions
# do), the filter, time and key functions in one mapInArrow pass that keeps
# the rows' columns, Spark's window()/session_window() grouping in the JVM
# (collect_list of the rows' columns), and one mapInArrow pass calling the
# window function on each window. It measures what the Python functions cost
# on Spark, apart from the library's own work.

Batches = Iterator[pa.RecordBatch]


@functools.lru_cache(maxsize=16)
def _row_type(names: tuple[str, ...]) -> Any:
    return namedtuple("Event", names)


def _rows(columns: list[pa.Array], names: tuple[str, ...]) -> list[Any]:
    make = _row_type(names)._make
    return list(map(make, zip(*(c.to_pylist() for c in columns), strict=True)))


def _batch(values: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    columns = list(zip(*values, strict=True)) if values else [()] * len(schema)
    return pa.RecordBatch.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def _passed(batches: Batches) -> Batches:
    yield from batches  # q0: no function; the rows cross to Python and back


def _filter_map(keep: Callable[[Any], bool], func: Callable[[Any], Any], schema: pa.Schema,
                batches: Batches) -> Batches:
    for batch in batches:
        rows = _rows(batch.columns, tuple(batch.schema.names))
        yield _batch([func(r) for r in rows if keep(r)], schema)


def _routed(keep: Callable[[Any], bool], key: Callable[[Any], Any] | None,
            batches: Batches) -> Batches:
    """The rows ``keep`` keeps, with their time ``t`` (and key ``k``) as columns."""
    for batch in batches:
        rows = _rows(batch.columns, tuple(batch.schema.names))
        mask = list(map(keep, rows))
        kept = [r for r, m in zip(rows, mask, strict=True) if m]
        out = batch.filter(pa.array(mask, pa.bool_()))
        out = out.append_column("t", pa.array(list(map(event_time, kept)), pa.float64()))
        if key is not None:
            out = out.append_column("k", pa.array(list(map(key, kept)), pa.int64()))
        yield out


def _per_window(func: Callable[[Any], Any], keyed: bool, flat: bool, bounds: bool,
                names: tuple[str, ...], schema: pa.Schema, batches: Batches) -> Batches:
    """``func`` on each window (its rows, or ``(key, rows)``), its outputs as rows.

    With ``bounds``, a window is a ``Window(start, end, rows)`` (seconds), as
    streams' ``bounds=True`` makes it.
    """
    from streams import Window

    for batch in batches:
        items = batch.column(batch.schema.get_field_index("items"))
        offsets = items.offsets.to_pylist()
        rows = _rows(items.values.flatten(), names)
        keys = batch.column(batch.schema.get_field_index("k")).to_pylist() if keyed else None
        if bounds:
            starts = batch.column(batch.schema.get_field_index("start")).to_pylist()
            ends = batch.column(batch.schema.get_field_index("end")).to_pylist()
        out: list[Any] = []
        for i in range(len(items)):
            window: Any = rows[offsets[i]:offsets[i + 1]]
            if bounds:
                window = Window(starts[i] / 1e6, ends[i] / 1e6, window)
            value = func((keys[i], window) if keys is not None else window)
            if flat:
                out.extend(value)
            else:
                out.append(value)
        yield _batch(out, schema)


def same_functions_query(query: str, df: Any) -> Any:
    """The query hand-written in PySpark around the streams pipeline's own functions."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType, _parse_datatype_string

    out_type = _parse_datatype_string(OUTPUT[query])
    schema = to_arrow_schema(out_type)
    df = df.select(*COLUMNS[query])
    if query == "q0":
        return df.mapInArrow(_passed, df.schema)
    if query == "q1":
        return df.mapInArrow(functools.partial(_filter_map, is_bid, q.euro, schema), out_type)
    if query == "q2":
        return df.mapInArrow(functools.partial(_filter_map, q2_selected, q.q2_fields, schema),
                             out_type)
    keep, key, func, flat = {
        "q5": (is_bid, None, hot_item, False),
        "q7": (is_bid, None, highest_bid, False),
        "q8": (is_person_or_auction, owner, new_users, True),
        "q11": (is_bid, q.bidder, session_count, False),
    }[query]
    names = tuple(COLUMNS[query])
    routed_type = StructType(list(df.schema.fields)).add("t", "double")  # a copy: add() mutates
    if key is not None:
        routed_type = routed_type.add("k", "long")
    routed = df.mapInArrow(functools.partial(_routed, keep, key), routed_type)
    # The time's nearest microsecond, as streams takes it (timestamp_seconds()
    # truncates: 1000001 / 1e6 would be 1000000 us).
    et = F.expr("timestamp_micros(CAST(rint(t * 1E6) AS BIGINT))")
    if query == "q5":
        window = F.window(et, _micros(q.WINDOW), _micros(q.SLIDE))
    elif query == "q11":
        window = F.session_window(et, _micros(q.SESSION_GAP))
    else:
        window = F.window(et, _micros(q.WINDOW))
    by = [window.alias("w"), "k"] if key is not None else [window.alias("w")]
    windows = routed.groupBy(*by).agg(F.collect_list(F.struct(*names)).alias("items"))
    bounds = query == "q11"  # its function reads its session's bounds
    if bounds:
        windows = windows.select(F.unix_micros("w.start").alias("start"),
                                 F.unix_micros("w.end").alias("end"), "k", "items")
    return windows.mapInArrow(
        functools.partial(_per_window, func, key is not None, flat, bounds, names, schema),
        out_type)
