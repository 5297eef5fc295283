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

import logging
import re
import threading
import weakref
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["BatchCounter", "DroppingMarks", "count_input", "observed", "settle", "watch",
           "watch_progress", "watched", "watermark_us"]

#: ``(rows, batch)`` of one micro-batch: its row count and ``(query id, batch id)``.
Watcher = Callable[[int, tuple[str, int]], None]
#: The whole progress report of a micro-batch (``StreamingQueryProgress``).
ProgressWatcher = Callable[[Any], None]

logger = logging.getLogger("streams")

# Taken by Spark's threads in the listener: never held across a call to the JVM.
_lock = threading.Lock()
# Taken only by the threads that build pipelines: adding a listener calls the JVM.
_listen_lock = threading.Lock()
_listeners: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # session -> its
_names: dict[str, int] = {}


class _Metric:
    """The watchers of one observed metric, and what keeps them.

    A metric is watched for the nodes that built it (``owners``: a bar, a
    window, a join). From when it is built until no query that runs it is
    left, the metric keeps them (``pinned``): a pipeline built and started
    in one expression keeps its bars while its query runs, though nothing
    of the user's holds the graph. A query is known to run the metric from
    its start (its plan observes the name), so one that fails or is stopped
    before its first report lets go too, and of two queries on one
    DataFrame the first to end leaves the graph to the other. Once no query
    runs it, the metric keeps the owners only while the user does: the
    same DataFrame started again reports to them, and the metric is
    forgotten with the graph. A session stopped with the query running ends
    no query; its metrics are forgotten with it. A DataFrame built and
    never started keeps them until its session stops: the metric is made
    for a step of it, and cannot tell when the user drops the DataFrame.
    """

    __slots__ = ("owners", "pinned", "readers", "runs", "session", "watchers")

    def __init__(self, session: Any) -> None:
        self.session = weakref.ref(session)
        self.watchers: list[Watcher] = []
        self.readers: list[ProgressWatcher] = []
        self.owners: list[weakref.ref[Any]] = []
        self.pinned: list[Any] | None = []  # the owners, held while a query may report
        # The runs (``runId``: a query restarted from its checkpoint keeps its
        # id) that run it and have not ended.
        self.runs: set[str] = set()

    def own(self, owners: Iterable[Any]) -> None:
        for owner in owners:
            self.owners.append(weakref.ref(owner))
            if self.pinned is not None:
                self.pinned.append(owner)

    def run_by(self, run: str) -> None:
        self.runs.add(run)
        if self.pinned is None:  # started again: its owners are alive, or it is gone
            self.pinned = [o for o in (r() for r in self.owners) if o is not None]

    def ended(self, run: str) -> None:
        self.runs.discard(run)
        if not self.runs:
            self.pinned = None

    def gone(self) -> bool:
        """Whether nothing can report to it, or nothing is left to report to."""
        session = self.session()
        if session is None or _stopped(session):
            return True
        return self.pinned is None and all(r() is None for r in self.owners)


_metrics: dict[str, _Metric] = {}


def _stopped(session: Any) -> bool:
    try:
        return session.sparkContext._jsc is None
    except Exception:  # Spark Connect, or a session past repair: nothing to report
        return True


def _plan_metrics(session: Any, query: str) -> set[str]:
    """The names of the metrics the running query ``query`` of ``session`` observes.

    They are the ``CollectMetrics`` nodes (``DataFrame.observe``) of the plan
    the query was started with, walked in the JVM: the plan it runs is built
    later, on the query's own thread.
    """
    started = session.streams.get(query)
    if started is None:
        return set()
    names = set()
    nodes = [started._jsq.streamingQuery().analyzedPlan()]
    while nodes:
        node = nodes.pop()
        if node.nodeName() == "CollectMetrics":
            names.add(str(node.name()))
        children = node.children()
        nodes.extend(children.apply(i) for i in range(children.size()))
    return names


def _listener_class() -> Any:
    from pyspark.sql.streaming import StreamingQueryListener

    class SegmentListener(StreamingQueryListener):
        """Dispatches the observed metrics of each micro-batch by name."""

        def __init__(self, session: Any) -> None:
            super().__init__()
            # Weakly: Spark holds the listener for as long as the JVM lives.
            self._session = weakref.ref(session)

        def onQueryStarted(self, event: Any) -> None:
            # Spark calls this on the starting query's thread, before its first
            # micro-batch; the metrics it runs are linked to it here, so that
            # its end lets them go whether or not it ever reported.
            session = self._session()
            with _lock:
                if not _metrics or session is None:  # no pipeline of ours to link
                    return
            # Outside the lock: Spark's listener thread may wait on it while
            # this thread waits on the JVM.
            try:
                names = _plan_metrics(session, str(event.id))
            except Exception:  # a session stopping: its metrics are forgotten with it
                logger.debug("Query %s: its observed metrics could not be read; its "
                             "progress reports link them", event.id, exc_info=True)
                return
            with _lock:
                for name in names:
                    if name in _metrics:
                        _metrics[name].run_by(str(event.runId))

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            query = str(progress.id)
            for name, row in (progress.observedMetrics or {}).items():
                with _lock:
                    metric = _metrics.get(name)
                    if metric is None:
                        continue
                    metric.run_by(str(progress.runId))  # if reading its plan failed at start
                    watchers, readers = list(metric.watchers), list(metric.readers)
                for watcher in watchers:
                    watcher(int(row["rows"]), (query, int(progress.batchId)))
                for reader in readers:
                    reader(progress)

        def onQueryIdle(self, event: Any) -> None:
            return None

        def onQueryTerminated(self, event: Any) -> None:
            run = str(event.runId)
            with _lock:
                for metric in _metrics.values():
                    if run in metric.runs:
                        metric.ended(run)
                _forget_gone()

    return SegmentListener


def _forget_gone() -> None:
    """Drop the metrics nothing reports to any more (call with the lock held)."""
    for name in [n for n, m in _metrics.items() if m.gone()]:
        del _metrics[name]


def watched(name: str) -> bool:
    """Whether the metric ``name`` is still watched (not yet forgotten)."""
    with _lock:
        return name in _metrics


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
    """Add the session's one listener, once (call without the lock)."""
    with _listen_lock:
        if session not in _listeners:
            listener = _listener_class()(session)
            session.streams.addListener(listener)
            _listeners[session] = listener


def _metric(session: Any, name: str, owners: Iterable[Any]) -> _Metric:
    """The metric ``name``, kept for ``owners`` (call with the lock held)."""
    _forget_gone()
    metric = _metrics.get(name)
    if metric is None:
        metric = _metrics[name] = _Metric(session)
    metric.own(owners)
    return metric


def watch(session: Any, name: str, watcher: Watcher, owners: Iterable[Any]) -> None:
    """Call ``watcher(rows, (query id, batch id))`` for each micro-batch reporting ``name``.

    ``owners`` are the nodes the watcher serves: it is kept while a query
    may report ``name``, and after that while they are alive (:class:`_Metric`).
    The watcher must not hold them itself.
    """
    _listen(session)
    with _lock:
        _metric(session, name, owners).watchers.append(watcher)


def watch_progress(session: Any, name: str, reader: ProgressWatcher,
                   owners: Iterable[Any]) -> None:
    """Call ``reader(progress)`` for each micro-batch of a query reporting the metric ``name``.

    ``owners`` as for :func:`watch`.
    """
    _listen(session)
    with _lock:
        _metric(session, name, owners).readers.append(reader)


#: Spark's ISO time, whose year may have more than four digits and a sign.
_ISO = re.compile(r"([+-]?\d+)-(\d\d)-(\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:\d\d)")
#: Days of the Gregorian calendar's 400-year cycle.
_CYCLE_DAYS = 146_097
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def watermark_us(iso: str | None) -> int | None:
    """A watermark of a query's progress (``1970-01-01T00:00:07.500Z``) in microseconds.

    Past the year 9999 (the end-of-stream row of a to_spark() window, see
    :data:`streams_spark.routing.FAR_FUTURE`) Spark writes the year with a
    sign and more digits, which ``datetime`` cannot hold: the date is taken
    in the same place of an earlier 400-year cycle of the calendar (every
    cycle has the same days), and the cycles between added back.

    >>> watermark_us("1970-01-01T00:00:07.500Z"), watermark_us(None)
    (7500000, None)
    >>> watermark_us("+33658-09-27T01:46:40.000Z") / 1e6
    1000000000000.0
    """
    if not iso:
        return None
    m = _ISO.fullmatch(iso)
    if m is None:
        raise ValueError(f"not a time of Spark's: {iso!r}")
    year, month, rest, zone = m.groups()
    cycles, in_cycle = divmod(int(year) - 2000, 400)
    moment = datetime.fromisoformat(
        f"{2000 + in_cycle}-{month}-{rest}{'+00:00' if zone == 'Z' else zone}")
    # Integers throughout: a float of microseconds is not exact past 2255.
    return ((moment - _EPOCH) // _MICROSECOND
            + cycles * _CYCLE_DAYS * 86_400 * 1_000_000)


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
        # Weakly: the metric keeps the nodes while a query may report (:class:`_Metric`).
        self._nodes = [weakref.ref(n) for n in nodes]
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
            for node in filter(None, (r() for r in self._nodes)):
                node.bar.update(rows)
                node.bar.set_postfix(batches=self.batches, refresh=False)


#: The counter of each ``.progress()`` node of a Spark-resident segment, shared
#: by the inputs that reach it, as long as the node is alive.
_counters: weakref.WeakKeyDictionary[Any, BatchCounter] = weakref.WeakKeyDictionary()


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
    for bar, counter in zip(bars, counters, strict=True):
        watch(df.sparkSession, name, counter, [bar])
    return df
