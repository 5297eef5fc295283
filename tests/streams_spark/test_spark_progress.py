"""Progress bars of Spark segments.

``to_spark(progress=True)`` counts the micro-batches the driver runs. A
``.progress()`` inside a segment counts the rows the segment takes in and its
micro-batches: from Spark's ``StreamingQueryListener`` in a segment that
starts at ``from_spark``, from what the driver ships after ``to_spark()``.
"""

from __future__ import annotations

import gc
import io
import weakref
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import streams_spark  # noqa: F401 - registers to_spark()
from streams import Stream
from streams_spark.listener import settle

pytest.importorskip("tqdm")
pytestmark = pytest.mark.spark


def test_progress_bar_counts_micro_batches_and_closes(spark: Any) -> None:
    source = Stream()
    entry = source.to_spark(session=spark, batch_size=4, progress=True)
    out = entry.map(lambda x: x + 1).gather().sink_to_list()
    for i in range(10):
        source.emit(i)
    source.close()
    assert out == [i + 1 for i in range(10)]
    bar = entry._bar
    assert bar.n == 3  # batches of 4, 4 and the last 2 at close
    assert bar.postfix == "rows=10"
    assert bar.disable is True  # tqdm's close() sets it: the bar ended with the stream


def write_files(directory: Path, files: int, rows: int) -> None:
    directory.mkdir()
    for f in range(files):
        ids = range(f * rows, (f + 1) * rows)
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}),
                       directory / f"part-{f:03d}.parquet")


def id_files(spark: Any, directory: Path, files: int, rows: int) -> Any:
    """A stream of ``files`` files of ``rows`` ids each, one file a micro-batch."""
    write_files(directory, files, rows)
    return (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1)
            .parquet(str(directory)))


def run_to_end(spark: Any, frame: Any, checkpoint: Path) -> Any:
    """Run ``frame``'s query over what its input holds (no output kept), bars updated."""
    query = (frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    settle(spark)
    return query


def test_progress_in_a_spark_resident_segment_counts_rows_and_batches(
        spark: Any, tmp_path: Path) -> None:
    df = id_files(spark, tmp_path / "in", files=3, rows=4)
    source = Stream.from_spark(df, checkpoint=str(tmp_path / "ckpt"))
    counted = source.progress(file=io.StringIO())
    out = counted.filter(lambda x: x % 2 == 0).gather().sink_to_list()
    source.start()
    assert sorted(out) == list(range(0, 12, 2))
    # Spark's listener reported each micro-batch's rows (read in Spark, not here).
    assert counted.bar.n == 12
    assert counted.bar.postfix == "batches=3"
    assert source.query.name.startswith("streams_from_spark")  # named after the stream


def test_progress_counts_the_rows_of_a_to_dataframe_query(spark: Any, tmp_path: Path) -> None:
    write_files(tmp_path / "in", files=2, rows=5)
    df = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1)
          .parquet(str(tmp_path / "in")))
    counted = Stream.from_spark(df).progress(file=io.StringIO())
    frame = counted.map(lambda x: {"id": x, "sq": x * x}).to_dataframe("id long, sq long")
    query = (frame.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    settle(spark)
    assert counted.bar.n == 10 and counted.bar.postfix == "batches=2"
    assert sorted(r.sq for r in spark.read.parquet(str(tmp_path / "out")).collect()) == [
        i * i for i in range(10)]


@pytest.mark.parametrize("streaming", [False, True], ids=["batch mode", "stream mode"])
def test_progress_in_a_to_spark_segment_counts_shipped_rows_and_batches(
        spark: Any, streaming: bool) -> None:
    source = Stream()
    counted = (source.to_spark(session=spark, batch_size=4, streaming=streaming)
               .map(lambda x: x * 10).progress(total=10, file=io.StringIO()))
    out = counted.filter(lambda x: x != 30).gather().sink_to_list()
    for i in range(10):
        source.emit(i)
    # Two micro-batches of 4 ran; the 2 held elements are not counted yet.
    assert (counted.bar.n, counted.bar.postfix) == (8, "batches=2")
    source.close()
    assert out == [i * 10 for i in range(10) if i != 3]
    # The rows the segment took in (as from_spark's bar counts its input)
    # and its micro-batches; the end-of-stream batch holds the last 2.
    assert (counted.bar.n, counted.bar.total, counted.bar.postfix) == (10, 10, "batches=3")
    assert counted.bar.disable is True  # closed with the stream


def test_progress_bars_in_a_to_spark_segment_move_together(spark: Any) -> None:
    source = Stream()
    entry = source.to_spark(session=spark, batch_size=3)
    first = entry.progress(file=io.StringIO())
    second = first.map(str).progress(file=io.StringIO())
    out = second.gather().sink_to_list()
    for i in range(7):
        source.emit(i)
    source.close()
    assert out == [str(i) for i in range(7)]
    assert (first.bar.n, second.bar.n) == (7, 7)
    assert first.bar.postfix == second.bar.postfix == "batches=3"


def test_progress_bars_of_two_unioned_inputs_count_what_reaches_each(
        spark: Any, tmp_path: Path) -> None:
    write_files(tmp_path / "a", files=2, rows=3)
    write_files(tmp_path / "b", files=1, rows=5)

    def read(name: str) -> Any:
        return (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1)
                .parquet(str(tmp_path / name)))

    a = Stream.from_spark(read("a")).progress(file=io.StringIO())
    b = Stream.from_spark(read("b")).progress(file=io.StringIO())
    both = a.map(lambda x: x * 2).union(b.map(lambda x: x * 2)).progress(file=io.StringIO())
    frame = both.map(lambda x: {"id": x}).to_dataframe("id long")
    query = (frame.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    settle(spark)
    # Each input's bar counts its own rows; the union's, every row, each
    # micro-batch once (both inputs report in the same micro-batch).
    assert (a.bar.n, b.bar.n, both.bar.n) == (6, 5, 11)
    batches = len(query.recentProgress)
    assert both.bar.postfix == f"batches={batches}"
    assert sorted(r.id for r in spark.read.parquet(str(tmp_path / "out")).collect()) == sorted(
        [2 * i for i in range(6)] + [2 * i for i in range(5)])


def test_bars_on_two_branches_of_one_input_count_as_in_process(
        spark: Any, tmp_path: Path) -> None:
    # Spark reads the input once for each branch of the union: a bar before
    # the branches still counts each row once, one on a branch its rows, one
    # after the union the rows of both branches, as in-process.
    def build(source: Stream[Any]) -> tuple[Stream[Any], ...]:
        before = source.progress(file=io.StringIO())
        branch = before.map(lambda x: x * 2).progress(file=io.StringIO())
        after = branch.union(before.map(lambda x: x * 3)).progress(file=io.StringIO())
        return before, branch, after

    local = Stream()
    local_bars = build(local)
    local_bars[-1].sink(lambda x: None)
    for i in range(10):
        local.emit(i)
    bars = build(Stream.from_spark(id_files(spark, tmp_path / "in", files=2, rows=5)))
    run_to_end(spark, bars[-1].map(lambda x: {"id": x}).to_dataframe("id long"), tmp_path / "c")
    assert [b.bar.n for b in bars] == [b.bar.n for b in local_bars] == [10, 10, 20]


def test_a_bar_counts_only_for_the_queries_that_run_its_step(
        spark: Any, tmp_path: Path) -> None:
    df = id_files(spark, tmp_path / "in", files=2, rows=5)
    source = Stream.from_spark(df, checkpoint=str(tmp_path / "ckpt"))
    counted = source.map(lambda x: x * 2).progress(file=io.StringIO())
    frame = counted.map(lambda x: {"id": x}).to_dataframe("id long")  # not run yet
    out = source.map(lambda x: x + 1).gather().sink_to_list()
    source.start()  # the gather() branch only
    assert len(out) == 10 and counted.bar.n == 0
    run_to_end(spark, frame, tmp_path / "c")
    assert (counted.bar.n, counted.bar.postfix) == (10, "batches=2")


def test_a_bar_before_a_join_of_one_input_with_itself_counts_each_row_once(
        spark: Any, tmp_path: Path) -> None:
    for i, part in enumerate([[("a", 1, 0), ("b", 2, 1)], [("a", 4, 2)]]):
        spark.createDataFrame(part, "key string, t long, id long").coalesce(1).write.parquet(
            str(tmp_path / "in" / f"part={i}"))
    df = (spark.readStream.schema("key string, t long, id long")
          .option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in" / "*")))
    counted = Stream.from_spark(df).progress(file=io.StringIO())
    pairs = counted.map(tuple).join(counted.map(tuple), key=0, within=3, time=1)
    run_to_end(spark, pairs.map(lambda p: (p[0][2], p[1][2])).to_dataframe("l long, r long"),
               tmp_path / "c")
    assert counted.bar.n == 3  # the rows taken in, though Spark reads them for each side


def test_a_query_keeps_the_graph_its_bars_serve_until_it_ends(
        spark: Any, tmp_path: Path) -> None:
    # Built and started in one go, as a notebook cell does: nothing of the
    # user's holds the graph, yet its bar counts while the query runs, and the
    # graph is let go once the query ends (a cell run again built another).
    counted = Stream.from_spark(id_files(spark, tmp_path / "in", files=2, rows=3)).progress(
        file=io.StringIO())
    bar, graph = counted.bar, weakref.ref(counted)
    frame = counted.map(lambda x: {"id": x}).to_dataframe("id long")
    query = (frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c"))
             .start())
    del counted, frame
    gc.collect()
    assert graph() is not None
    query.processAllAvailable()
    settle(spark)
    assert bar.n == 6
    query.stop()
    settle(spark)
    gc.collect()
    assert graph() is None


def test_a_kept_dataframe_started_again_counts_on_its_bar(spark: Any, tmp_path: Path) -> None:
    counted = Stream.from_spark(id_files(spark, tmp_path / "in", files=2, rows=3)).progress(
        file=io.StringIO())
    frame = counted.map(lambda x: {"id": x}).to_dataframe("id long")
    run_to_end(spark, frame, tmp_path / "c1")
    gc.collect()  # the first query ended: the bar is kept by the user's graph alone
    run_to_end(spark, frame, tmp_path / "c2")  # a new checkpoint: every row again
    assert (counted.bar.n, counted.bar.postfix) == (12, "batches=4")
