"""Rows and micro-batches of Spark-resident segments, from Spark's own reports.

A segment that starts at ``Stream.from_spark(df)`` never passes its rows
through the driver, so a ``.progress()`` in it cannot count them there.
Instead the segment's input is observed (``DataFrame.observe``, a metric
named after the segment) and one ``StreamingQueryListener`` per session
hands each micro-batch's count to the watchers of that name: whichever
query runs the segment (``from_spark(...).gather()``, or a sink the user
starts on ``to_dataframe()``) reports to the bar.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

__all__ = ["BatchCounter", "DroppingMarks", "count_input", "observed", "settle", "watch",
           "watch_progress", "watermark_us"]

#: ``(rows, batch)`` of one micro-batch: its row count and ``(query id, batch id)``.
Watcher = Callable[[int, tuple[str, int]], None]
#: The whole progress report of a micro-batch (``StreamingQueryProgress``).
ProgressWatcher = Callable[[Any], None]

_lock = threading.Lock()
_listeners: dict[int, Any] = {}  # id(SparkSession) -> its listener
_watchers: dict[str, list[Watcher]] = {}
_progress_watchers: dict[str, list[ProgressWatcher]] = {}
_names: dict[str, int] = {}


def _listener_class() -> Any:
    from pyspark.sql.streaming import StreamingQueryListener

    class SegmentListener(StreamingQueryListener):
        """Dispatches the observed row counts of each micro-batch by metric name."""

        def onQueryStarted(self, event: Any) -> None:
            return None

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            for name, row in (progress.observedMetrics or {}).items():
                for watcher in list(_watchers.get(name, ())):
                    watcher(int(row["rows"]), (str(progress.id), int(progress.batchId)))
                for reader in list(_progress_watchers.get(name, ())):
                    reader(progress)

        def onQueryIdle(self, event: Any) -> None:
            return None

        def onQueryTerminated(self, event: Any) -> None:
            return None

    return SegmentListener


def observed(df: Any, label: str, *more: Any) -> tuple[Any, str]:
    """``df`` counting its rows per micro-batch under a new metric name, and the name.

    ``more`` are other aggregate columns observed with the count.
    """
    from pyspark.sql import functions as F

    base = "".join(c if c.isalnum() else "_" for c in f"streams_rows_{label}")[:60]
    with _lock:
        _names[base] = _names.get(base, 0) + 1
        name = base if _names[base] == 1 else f"{base}_{_names[base]}"
    return df.observe(name, F.count(F.lit(1)).alias("rows"), *more), name


def _listen(session: Any) -> None:
    """Add the session's one listener, once (call with the lock held)."""
    if id(session) not in _listeners:
        listener = _listener_class()()
        session.streams.addListener(listener)
        _listeners[id(session)] = listener


def watch(session: Any, name: str, watcher: Watcher) -> None:
    """Call ``watcher(rows, (query id, batch id))`` for each micro-batch reporting ``name``."""
    with _lock:
        _listen(session)
        _watchers.setdefault(name, []).append(watcher)


def watch_progress(session: Any, name: str, reader: ProgressWatcher) -> None:
    """Call ``reader(progress)`` for each micro-batch of a query reporting the metric ``name``."""
    with _lock:
        _listen(session)
        _progress_watchers.setdefault(name, []).append(reader)


def watermark_us(iso: str | None) -> int | None:
    """A watermark of a query's progress (``1970-01-01T00:00:07.500Z``) in microseconds.

    >>> watermark_us("1970-01-01T00:00:07.500Z"), watermark_us(None)
    (7500000, None)
    """
    if not iso:
        return None
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1_000_000)


class DroppingMarks:
    """Per query, the watermark behind which Spark drops a micro-batch's late rows.

    Spark 4 drops a row at or behind the watermark of the micro-batch
    before; before the first micro-batch, the epoch.
    """

    def __init__(self) -> None:
        self._last: dict[str, int | None] = {}  # query id -> its last micro-batch's watermark

    def take(self, progress: Any) -> tuple[int | None, int | None]:
        """For ``progress``'s micro-batch: that watermark, and its own (microseconds)."""
        query = str(progress.id)
        before = self._last.get(query, 0 if progress.batchId == 0 else None)
        own = self._last[query] = watermark_us((progress.eventTime or {}).get("watermark"))
        return before, own


def settle(session: Any) -> None:
    """Wait until Spark has handed every event so far to the listeners.

    Listener events travel on Spark's listener bus, after the batch they
    report; a pipeline that ends calls this so its bars show the last one.
    """
    try:
        session.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    except Exception:  # Spark Connect: no bus to wait for here
        return


class BatchCounter:
    """Counts rows and micro-batches onto the bars of ``.progress()`` nodes.

    A bar's count is the rows, its postfix the batches. A bar after a union
    of two inputs hears from each in every micro-batch of their query: the
    rows add up, the micro-batch counts once (one counter per bar, shared by
    the inputs: :func:`count_input`).
    """

    def __init__(self, nodes: list[Any]) -> None:
        self.nodes = nodes
        self.rows = 0
        self.batches = 0
        self._last: dict[str, int] = {}  # query id -> the last micro-batch counted
        self._lock = threading.Lock()

    def __call__(self, rows: int, batch: tuple[str, int] | None = None) -> None:
        """Count ``rows`` of the micro-batch ``batch`` (``(query id, batch id)``; None:
        a batch of its own)."""
        with self._lock:
            self.rows += rows
            if batch is None or self._last.get(batch[0]) != batch[1]:
                self.batches += 1
                if batch is not None:  # a query's inputs report one after another
                    self._last[batch[0]] = batch[1]
            for node in self.nodes:
                node.bar.update(rows)
                node.bar.set_postfix(batches=self.batches, refresh=False)


#: The counter of each ``.progress()`` node of a Spark-resident segment, shared
#: by the inputs that reach it; kept as long as the watchers that hold them are.
_counters: dict[Any, BatchCounter] = {}


def count_input(df: Any, nodes: list[Any], label: Callable[[], str]) -> Any:
    """``df``, observed for the ``.progress()`` nodes among ``nodes`` (if any).

    ``nodes`` are the steps that read ``df``'s rows. Streaming DataFrames
    only: a static one runs no micro-batches to report.
    """
    bars = [n for n in nodes if n._operator == "progress"]
    if not bars or not df.isStreaming:
        return df
    df, name = observed(df, label())
    with _lock:
        counters = [_counters.setdefault(bar, BatchCounter([bar])) for bar in bars]
    for counter in counters:
        watch(df.sparkSession, name, counter)
    return df
