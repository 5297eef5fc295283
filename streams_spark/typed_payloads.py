"""Typed output rows through ``applyInPandasWithState``, with no pandas conversion on the way.

The stateful stage of a streaming ``to_dataframe()`` segment runs in
``applyInPandasWithState``, which takes its output as pandas frames, and
the round trip through pandas changes values: a long column holding a null
becomes float64 (rounding every value beyond 2**53), PySpark's conversion
back to Arrow takes every NaN of a double column for a null, and the values
inside arrays, maps and structs fare the same (a map column fails). So the
group function hands its rows over as Arrow IPC streams, in the one binary
column of :data:`PAYLOADS` (:func:`payload_frame`), and a ``mapInArrow``
pass after it (:func:`typed_batches`) gives Spark the record batches as the
rows were written: the values in-process, to the bit. The pass costs less
than the pandas conversions it replaced: a keyed scan of 200,000 rows to
three columns, on a stream, took 1.34 s (2.2 CPU-seconds with the JVM's)
through pandas and 1.11 s (1.8) as payloads (medians of 5, 2026-12-05). A
static DataFrame's groups run in ``applyInArrow``, which takes the record
batches themselves (0.88 s before, 0.71 s).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["PAYLOADS", "payload_frame", "typed_batches"]

#: The schema, as DDL, of what the group function returns: the payloads.
PAYLOADS = "payload binary"

#: A payload holds the rows of about this many bytes at most: a group's
#: rows beyond it are cut into several payloads.
PAYLOAD_BYTES = 64 << 20

#: PySpark cuts a group function's output into Arrow batches by rows (every
#: ``spark.sql.execution.arrow.maxRecordsPerBatch``), and the binary column
#: of one batch holds at most 2 GiB. A payload stands for many rows: it
#: takes a row for each share of this many bytes that it holds (see
#: :func:`payload_frame`), so that a batch holds about this many bytes at
#: most, as the typed rows' batches would.
BATCH_BYTES = 1 << 30


def payload_frame(batch: pa.RecordBatch, batch_rows: int = 0) -> pd.DataFrame:
    """``batch`` as the pandas frame of a group function's output: its payloads.

    Each payload is an Arrow IPC stream of at most about
    :data:`PAYLOAD_BYTES` of the rows, in order, followed by null rows: one
    row in all for each ``BATCH_BYTES / batch_rows`` bytes it holds, where
    ``batch_rows`` is the number of rows by which PySpark cuts the output
    into batches (0 or less: it does not cut it).

    Examples
    --------
    >>> batch = pa.RecordBatch.from_pydict({"n": [2**53 + 1, None], "x": [float("nan"), None]})
    >>> frame = payload_frame(batch)
    >>> len(frame), list(frame.columns)
    (1, ['payload'])
    >>> [b.to_pylist() for b in typed_batches(iter([pa.RecordBatch.from_pandas(frame)]))]
    [[{'n': 9007199254740993, 'x': nan}, {'n': None, 'x': None}]]
    >>> frame = payload_frame(batch, batch_rows=BATCH_BYTES // 100)  # a row per 100 bytes
    >>> len(frame) == -(-len(frame.payload[0]) // 100), frame.payload[1:].isna().all().item()
    (True, True)
    """
    cells: list[bytes | None] = []
    n = batch.num_rows
    if n:
        step = max(1, n * PAYLOAD_BYTES // max(batch.nbytes, 1))
        for start in range(0, n, step):
            sink = pa.BufferOutputStream()
            part = batch.slice(start, step)
            with pa.ipc.new_stream(sink, part.schema) as writer:
                writer.write_batch(part)
            payload = sink.getvalue().to_pybytes()
            cells.append(payload)
            if batch_rows > 0:
                cells.extend([None] * (-(-len(payload) * batch_rows // BATCH_BYTES) - 1))
    return pd.DataFrame({"payload": np.array(cells, dtype=object)}, copy=False)


def typed_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function that turns payloads back into the record batches written."""
    for batch in batches:
        for payload in batch.column(0).drop_null():
            yield from pa.ipc.open_stream(payload.as_buffer())
