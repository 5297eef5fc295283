"""Batch mode: one Spark job per micro-batch.

A plan made only of chains (see :mod:`streams_spark.plan`) needs no
streaming query: each micro-batch becomes a DataFrame of packed Arrow chunks
(one row per few thousand elements, one partition per core), one
``mapInArrow`` pass running the core's stage program (:mod:`streams.stage`),
and ``toArrow()`` back to the driver. When the chain holds state (``scan``,
``partition``...) the batch runs in one partition, the state enters the
task with the function and comes back as the last row; the driver keeps it
for the next batch and, with a checkpoint directory, saves it with the batch
id in one atomic write.
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from streams.segment import unsendable
from streams.spec import NodeSpec
from streams.stage import Stage

from . import main_classes
from .codec import (
    DATA,
    ERROR,
    ROW_SCHEMA,
    STATE,
    carried_error,
    pack,
    pickled_output,
    rows_table,
    unpack,
)
from .plan import by_id, by_position, chain_plan
from .storage import Location, location
from .worker_heap import freeze_worker_heap

__all__ = ["BatchRunner", "chain_rows", "encode_chunks", "load_checkpoint", "save_checkpoint"]

#: The ``seq`` of rows that come after every element of a batch.
LAST_SEQ = 2**63 - 1
#: Elements per chunk (one Spark row) at most: bounds a row's size.
CHUNK = 8192

INPUT_SCHEMA = pa.schema([("seq", pa.int64()), ("b", pa.binary())])


def chain_rows(stage: Stage, batches: Iterator[pa.RecordBatch], flush: bool,
               last: NodeSpec | None, specs: list[NodeSpec] | None,
               ticks: Sequence[tuple[int, int]] = ()) -> Iterator[pa.RecordBatch]:
    """Run the stage program over input chunks; yield :data:`ROW_SCHEMA` batches.

    Each input row is a chunk (``seq``: its first element's position, ``b``:
    its packed elements); its outputs leave as packed rows with the same
    ``seq`` and ``sub`` numbering the pieces, so the driver restores input
    order by sorting a few rows. A failure keeps its place among the values;
    a value that cannot be pickled becomes an error of ``last``, the node
    that returned it, in its place. ``ticks`` are ``(seq, node id)``: close
    a window of that processing-time node before element ``seq`` (after the
    last element if beyond it). With ``specs``, the stage's states (by
    position in ``specs``) leave as the last row.
    """
    vals = stage.events
    failed = stage.failed
    push = stage.root._pusher()  # after restore(): it recompiles
    seqs: list[int] = []
    subs: list[int] = []
    kinds: list[int] = []
    ps: list[bytes] = []

    def take(seq: int) -> None:
        errs = {}
        for i in failed:
            e = vals[i]
            errs[i] = carried_error(e.node_id, e.element, e.error)
            vals[i] = None
        for sub, start in enumerate(range(0, len(vals), CHUNK)):
            piece = vals[start:start + CHUNK]
            bad = {i - start: e for i, e in errs.items() if start <= i < start + CHUNK}
            seqs.append(seq)
            subs.append(sub)
            kinds.append(DATA)
            ps.append(_packed(piece, bad, last))
        vals.clear()
        failed.clear()

    due = deque(ticks)
    for batch in batches:
        for seq, blob in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(),
                             strict=True):
            if due:
                for i, x in enumerate(unpack(blob), seq):
                    while due and due[0][0] <= i:
                        stage.tick(due.popleft()[1])
                    push(x)
            else:
                for x in unpack(blob):
                    push(x)
            take(seq)
        if seqs:
            yield rows_table(seqs, subs, kinds, ps)
            seqs, subs, kinds, ps = [], [], [], []
    if due:
        while due:
            stage.tick(due.popleft()[1])
        take(LAST_SEQ - 2)
    if flush:
        stage.close()
        take(LAST_SEQ - 1)
    if specs is not None:
        seqs.append(LAST_SEQ)
        subs.append(0)
        kinds.append(STATE)
        ps.append(main_classes.dumps(by_position(specs, stage.snapshot())))
    if seqs:
        yield rows_table(seqs, subs, kinds, ps)


def _packed(values: list[Any], errors: dict[int, bytes], last: NodeSpec | None) -> bytes:
    try:
        return pack(values, errors)
    except Exception:
        pass
    # Some value does not pickle: it becomes an error of the node that
    # returned it, in its place, and the others still cross.
    for i, v in enumerate(values):
        if i not in errors:
            kind, p = pickled_output(DATA, v, last)
            if kind == ERROR:
                errors[i] = p
    return pack(values, errors)


def _task(specs: list[NodeSpec], states: dict[int, Any], flush: bool, with_state: bool,
          ticks: Sequence[tuple[int, int]] = ()
          ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    plan = chain_plan(specs)
    last = specs[-1] if specs else None

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        stage = Stage(plan)
        stage.restore(by_id(specs, states))
        yield from chain_rows(stage, batches, flush, last, specs if with_state else None,
                              ticks)

    return run


def encode_chunks(elements: list[Any], first_seq: int, parts: int) -> pa.Table:
    """The input of one micro-batch: ``parts`` record batches of packed chunks.

    Spark makes one partition of each record batch, so ``parts`` is the
    parallelism of the batch.

    Examples
    --------
    >>> t = encode_chunks(list(range(10)), 100, parts=2)
    >>> t.column("seq").to_pylist(), [len(unpack(b)) for b in t.column("b").to_pylist()]
    ([100, 105], [5, 5])
    >>> encode_chunks([], 7, parts=2).num_rows  # an empty chunk: the task still runs
    1
    """
    n = len(elements)
    per_part = max(1, -(-n // parts))
    batches = []
    # An empty batch still gets one (empty) chunk: Spark runs no task over
    # no rows, and the task must run to flush or to close windows.
    for lo in range(0, max(n, 1), per_part):
        hi = min(n, lo + per_part)
        starts = range(lo, max(hi, lo + 1), CHUNK)
        try:
            packed = [pack(elements[s:min(hi, s + CHUNK)], to_executors=True) for s in starts]
        except Exception as e:  # pickle's bare "cannot pickle ..." names no element
            raise unsendable("to_spark()", "Spark executors", elements, e) from e
        batches.append(pa.RecordBatch.from_arrays([
            pa.array([first_seq + s for s in starts], pa.int64()),
            pa.array(packed, pa.binary()),
        ], schema=INPUT_SCHEMA))
    return pa.Table.from_batches(batches, schema=INPUT_SCHEMA)


def save_checkpoint(where: Location, state: dict[str, Any]) -> None:
    """Save ``state`` at ``where`` atomically (see :meth:`Location.save_state`)."""
    where.save_state(pickle.dumps(state, protocol=5))


def load_checkpoint(where: Location | None) -> dict[str, Any] | None:
    """The state saved by :func:`save_checkpoint`, or None."""
    if where is None:
        return None
    data = where.load_state()
    return None if data is None else pickle.loads(data)


class BatchRunner:
    """Run a chain plan one Spark job per micro-batch.

    Parameters
    ----------
    session : SparkSession
    specs : list of NodeSpec
        The chain's nodes, run by the stage program (fused).
    sequential : bool
        The chain keeps state in element order: run each batch in one
        partition and carry the state (by position in ``specs``).
    checkpoint : str, optional
        Directory (a path or URI Hadoop reads: ``file://``, ``hdfs://``,
        ``s3a://``...) where the state and batch id are saved after each batch.
    """

    def __init__(self, session: Any, specs: list[NodeSpec], sequential: bool,
                 checkpoint: str | None = None) -> None:
        from pyspark.sql.types import StructType

        self.session = session
        self.specs = specs
        self.sequential = sequential
        self.checkpoint = None if checkpoint is None else location(checkpoint, session)
        self.schema = StructType.fromJson(_spark_schema_json())
        saved = load_checkpoint(self.checkpoint)
        self.batch_id: int = saved["batch_id"] if saved else 0
        self.next_seq: int = saved["next_seq"] if saved else 0
        self.states: dict[int, Any] = saved["states"] if saved else {}
        self.parallelism = _parallelism(session)

    def run(self, elements: list[Any], flush: bool = False,
            ticks: Sequence[tuple[int, int]] = ()) -> list[Any]:
        """Run one micro-batch; return its outputs in order.

        ``ticks`` are ``(position, node id)``: a processing-time window of
        that node closes before ``elements[position]`` (at the end if
        ``position == len(elements)``). Errors come as marked records (see
        :func:`streams_spark.codec.is_error`).
        """
        parts = 1 if self.sequential or flush else self.parallelism
        table = encode_chunks(elements, self.next_seq, parts)
        at = [(self.next_seq + pos, node_id) for pos, node_id in ticks]
        self.next_seq += len(elements)
        df = self.session.createDataFrame(table)
        if self.sequential or flush:
            df = df.coalesce(1)
        task = _task(self.specs, self.states, flush, self.sequential, at)
        result = df.mapInArrow(task, self.schema).toArrow()
        out: list[Any] = []
        for kind, p in _ordered(result):
            if kind == STATE:
                self.states = pickle.loads(p)
            else:
                out.extend(unpack(p))
        self.batch_id += 1
        if self.checkpoint is not None:
            save_checkpoint(self.checkpoint, {
                "batch_id": self.batch_id, "next_seq": self.next_seq, "states": self.states,
            })
        return out


def _ordered(table: pa.Table) -> list[tuple[int, bytes]]:
    """The ``(kind, p)`` rows of ``table`` sorted by ``(seq, sub)``."""
    if table.num_rows == 0:
        return []
    table = table.sort_by([("seq", "ascending"), ("sub", "ascending")])
    return list(zip(table.column("kind").to_pylist(), table.column("p").to_pylist(),
                    strict=True))


def _parallelism(session: Any) -> int:
    """Partitions per micro-batch: the session's default parallelism."""
    try:
        return max(1, int(session.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect sessions have no SparkContext
        return 2


def _spark_schema_json() -> dict[str, Any]:
    from pyspark.sql.pandas.types import from_arrow_schema

    schema: dict[str, Any] = from_arrow_schema(ROW_SCHEMA).jsonValue()
    return schema
