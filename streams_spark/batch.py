"""Batch mode: one Spark job per micro-batch.

A plan made only of fused chains (see :mod:`streams_spark.plan`) needs no
streaming query: each micro-batch becomes a DataFrame built from Arrow, one
``mapInArrow`` pass, and ``toArrow()`` back to the driver. When the chain
holds sequential state (``accumulate``, ``partition``...) the batch runs in
one partition, the state enters the task with the function and comes back
as the last row; the driver keeps it for the next batch and, with a
checkpoint directory, saves it with the batch id in one atomic write.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from .chain import ERROR, Chain, Step, pickled_output
from .codec import DATA, ROW_SCHEMA, STATE, decode_values, encode_input, rows_table

__all__ = ["BatchRunner", "chain_rows", "load_checkpoint", "save_checkpoint"]

#: The ``seq`` of rows that come after every element of a batch.
LAST_SEQ = 2**63 - 1
#: Rows per output record batch: bounds a task's memory.
OUT_ROWS = 8192


def chain_rows(chain: Chain, batches: Iterator[pa.RecordBatch], flush: bool,
               last: Step | None, with_state: bool) -> Iterator[pa.RecordBatch]:
    """Run ``chain`` over input batches; yield :data:`ROW_SCHEMA` batches.

    Each output keeps the ``seq`` of its input and gets ``sub``, its rank
    among that input's outputs, so the driver can restore input order.
    A value that cannot be pickled becomes an error row of the last step.
    """
    seqs: list[int] = []
    subs: list[int] = []
    kinds: list[int] = []
    ps: list[bytes] = []
    cur = [0, 0]
    dumps = pickle.dumps

    def sink(kind: int, value: Any) -> None:
        if kind == ERROR:
            p = value
        else:
            kind, p = pickled_output(kind, value, last)
        seqs.append(cur[0])
        subs.append(cur[1])
        kinds.append(kind)
        ps.append(p)
        cur[1] += 1

    def take() -> pa.RecordBatch:
        out = rows_table(seqs[:], subs[:], kinds[:], ps[:])
        del seqs[:], subs[:], kinds[:], ps[:]
        return out

    push = chain.push
    for batch in batches:
        xs = decode_values(batch)
        for s, x in zip(batch.column(0).to_pylist(), xs, strict=True):
            cur[0], cur[1] = s, 0
            push(x, sink)
            if len(seqs) >= OUT_ROWS:
                yield take()
    if flush:
        cur[0], cur[1] = LAST_SEQ - 1, 0
        chain.flush(sink)
    if with_state:
        seqs.append(LAST_SEQ)
        subs.append(0)
        kinds.append(STATE)
        ps.append(dumps(chain.states, protocol=5))
    if seqs:
        yield take()


def _task(steps: list[Step], states: dict[int, Any], flush: bool,
          with_state: bool) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    last = steps[-1] if steps else None

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        chain = Chain(steps, states)
        yield from chain_rows(chain, batches, flush, last, with_state)

    return run


def save_checkpoint(directory: str, state: dict[str, Any]) -> None:
    """Write ``state`` to ``directory`` atomically (write, fsync, rename)."""
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".state-")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(state, f, protocol=5)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, "state.pickle"))


def load_checkpoint(directory: str | None) -> dict[str, Any] | None:
    """The state saved by :func:`save_checkpoint`, or None."""
    if directory is None:
        return None
    path = os.path.join(directory, "state.pickle")
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return pickle.load(f)  # type: ignore[no-any-return]


class BatchRunner:
    """Run a chain plan one Spark job per micro-batch.

    Parameters
    ----------
    session : SparkSession
    steps : list of Step
        The fused chain.
    sequential : bool
        The chain keeps state in element order: run each batch in one
        partition and carry the state.
    checkpoint : str, optional
        Directory where the state and batch id are saved after each batch.
    """

    def __init__(self, session: Any, steps: list[Step], sequential: bool,
                 checkpoint: str | None = None) -> None:
        from pyspark.sql.types import StructType

        self.session = session
        self.steps = steps
        self.sequential = sequential
        self.checkpoint = checkpoint
        self.schema = StructType.fromJson(_spark_schema_json())
        saved = load_checkpoint(checkpoint)
        self.batch_id: int = saved["batch_id"] if saved else 0
        self.next_seq: int = saved["next_seq"] if saved else 0
        self.states: dict[int, Any] = saved["states"] if saved else {}

    def run(self, elements: list[Any], flush: bool = False) -> list[tuple[int, Any]]:
        """Run one micro-batch; return ``(kind, payload)`` rows in order."""
        table = encode_input(elements, self.next_seq)
        self.next_seq += len(elements)
        df = self.session.createDataFrame(table)
        if self.sequential or flush:
            df = df.coalesce(1)
        task = _task(self.steps, self.states, flush, self.sequential)
        result = df.mapInArrow(task, self.schema).toArrow()
        rows = _ordered(result)
        out: list[tuple[int, Any]] = []
        for kind, p in rows:
            if kind == STATE:
                self.states = pickle.loads(p)
            else:
                out.append((kind, p))
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


def _spark_schema_json() -> dict[str, Any]:
    from pyspark.sql.pandas.types import from_arrow_schema

    schema: dict[str, Any] = from_arrow_schema(ROW_SCHEMA).jsonValue()
    return schema


def decode_row(kind: int, p: bytes) -> Any:
    """The value of a data row, or the ``(node id, element, error)`` of an error row."""
    del kind
    return pickle.loads(p)


assert DATA == 0  # rows of kind DATA carry results; see codec
