"""When Spark's listener lets go of the graph a Spark-resident segment's bars serve.

A query that runs a segment keeps its graph (bars, windows, joins) from its
start to its end, whether it reported a micro-batch or not, and whatever
other query runs the same DataFrame (``streams_spark.listener``).
"""

from __future__ import annotations

import gc
import io
import threading
import weakref
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import streams_spark  # noqa: F401 - registers from_spark() and to_dataframe()
from streams import Stream
from streams_spark.listener import settle

pytest.importorskip("tqdm")
pytestmark = pytest.mark.spark

#: Seconds a test waits for a gate it opens itself: only a broken run waits that long.
GATE = 60


def write_ids(directory: Path, name: str, ids: range) -> None:
    directory.mkdir(exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), directory / f"{name}.parquet")


def counted_frame(session: Any, directory: Path, f: Any = None) -> tuple[Any, Any, Any]:
    """A to_dataframe() frame of ``directory``'s ids with a bar: the frame, the bar and
    a weak reference to the graph (nothing else of the test holds it)."""
    df = session.readStream.schema("id long").parquet(str(directory))
    counted = Stream.from_spark(df).progress(file=io.StringIO())
    frame = counted.map(f or (lambda x: {"id": x})).to_dataframe("id long")
    return frame, counted.bar, weakref.ref(counted)


def noop(frame: Any, checkpoint: Path, available_now: bool = False) -> Any:
    writer = frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
    return (writer.trigger(availableNow=True) if available_now else writer).start()


def fail(x: int) -> Any:
    raise ZeroDivisionError("bad element")


def test_a_query_failing_in_its_first_micro_batch_lets_its_graph_go(
        spark: Any, tmp_path: Path) -> None:
    # A notebook cell whose function fails on every row, run again and again:
    # each run's graph (and all its functions hold) must not stay for the session.
    from pyspark.errors import StreamingQueryException

    write_ids(tmp_path / "in", "p0", range(3))
    graphs = []
    for run in range(2):
        frame, _, graph = counted_frame(spark, tmp_path / "in", fail)
        graphs.append(graph)
        query = noop(frame, tmp_path / f"c{run}")
        del frame
        with pytest.raises(StreamingQueryException, match="bad element"):
            query.awaitTermination()
    settle(spark)
    gc.collect()
    assert [g() for g in graphs] == [None, None]


def test_a_query_stopped_before_its_first_report_lets_its_graph_go(
        spark: Any, tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()  # nothing to read: no micro-batch runs, none reports
    frame, _, graph = counted_frame(spark, tmp_path / "in")
    query = noop(frame, tmp_path / "c")
    del frame
    query.processAllAvailable()
    assert graph() is not None  # kept while the query runs
    query.stop()
    settle(spark)
    gc.collect()
    assert graph() is None


def test_two_queries_of_one_frame_keep_its_graph_until_both_end(
        spark: Any, tmp_path: Path) -> None:
    write_ids(tmp_path / "in", "p0", range(6))
    frame, bar, graph = counted_frame(spark, tmp_path / "in")
    gate = threading.Event()

    def held(batch: Any, batch_id: int) -> None:
        batch.count()  # runs the plan: its rows are observed
        gate.wait(GATE)  # no report of this query before the other has ended

    slow = (frame.writeStream.foreachBatch(held)
            .option("checkpointLocation", str(tmp_path / "c_slow")).start())
    try:
        noop(frame, tmp_path / "c_fast", available_now=True).awaitTermination()
        del frame
        settle(spark)
        gc.collect()
        assert bar.n == 6 and graph() is not None  # the slow query still runs it
        gate.set()
        slow.processAllAvailable()
        settle(spark)
        assert bar.n == 12  # each query read the 6 rows
    finally:
        gate.set()
        slow.stop()
    settle(spark)
    gc.collect()
    assert graph() is None


def test_a_restarted_query_keeps_the_graph_its_last_run_let_go(
        spark: Any, tmp_path: Path) -> None:
    # The end of a query's run reaches the listener after the run restarted
    # from the same checkpoint (the same query id) has started: that end
    # belongs to the old run only. A listener added before the segment's
    # holds the end back on Spark's listener thread until the new run started.
    from pyspark.sql.streaming import StreamingQueryListener

    session = spark.newSession()  # its own listeners: this one goes first
    gate = threading.Event()

    class HoldEnds(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            return None

        def onQueryProgress(self, event: Any) -> None:
            return None

        def onQueryIdle(self, event: Any) -> None:
            return None

        def onQueryTerminated(self, event: Any) -> None:
            gate.wait(GATE)

    hold = HoldEnds()
    session.streams.addListener(hold)
    try:
        write_ids(tmp_path / "in", "p0", range(3))
        frame, bar, graph = counted_frame(session, tmp_path / "in")
        first = noop(frame, tmp_path / "c")
        first.processAllAvailable()
        first.stop()  # its end waits on the listener thread
        second = noop(frame, tmp_path / "c")
        assert second.id == first.id and second.runId != first.runId
        del frame
        gate.set()
        settle(session)  # the first run's end has reached the segment's listener
        gc.collect()
        assert graph() is not None
        write_ids(tmp_path / "in", "p1", range(3, 7))
        second.processAllAvailable()
        settle(session)
        assert bar.n == 7
        second.stop()
        settle(session)
        gc.collect()
        assert graph() is None
    finally:
        gate.set()
        session.streams.removeListener(hold)
        for query in session.streams.active:
            query.stop()
