"""``Stream.from_spark``: a pipeline that starts from a Spark streaming source.

The whole segment runs in Spark as one Structured Streaming query with a
checkpoint location; each micro-batch's results are delivered, in order, to
the Python nodes after ``gather()``. Exactly once across a killed driver:

* Spark's checkpoint holds the source offsets and the operators' state;
* after delivering batch ``b``, the source saves ``b`` and the snapshots of
  the nodes after ``gather()`` in one atomic write;
* on restart those snapshots are restored (a durable sink rolls its file
  back to what batch ``b`` left) and Spark's replay of a batch already
  delivered is skipped. A batch delivered but not yet recorded is delivered
  again over the rolled-back sink: nothing is lost, nothing is doubled.
"""

from __future__ import annotations

import pickle
from typing import Any

from streams.core import Stream
from streams.graph import walk
from streams.segment import raise_first

from .batch import load_checkpoint, save_checkpoint
from .codec import DATA, ERROR, WINDOW, WINDOW_ITEMS, value_of
from .late import LateElements
from .listener import count_input, settle
from .node_failures import reraise_node_failure
from .nodes import SparkSegment
from .plan import Plan, WindowStage
from .shipping import ship_library
from .stages import COLUMNS, collected_rows
from .storage import Location, location
from .stream import build_query_frame, query_name
from .window_failures import failure_accumulator, needs_accumulator, taken

__all__ = ["FromSpark"]


@Stream.register_api(staticmethod)
class FromSpark(Stream[Any]):
    """Start a pipeline from a Spark DataFrame; run it in Spark.

    Each row becomes an element: the value of a one-column row, else a
    ``pyspark.sql.Row`` (``r.name``, ``r["name"]``, ``r[0]``). Values are
    those of Spark's Arrow batches: a ``timestamp`` is an aware ``datetime``
    in the session's time zone (``spark.sql.session.timeZone``), so
    ``r.at.hour`` is Spark's ``hour(at)``; ``df.collect()`` would give a naive
    one in the process's local time. ``to_dataframe`` writes an aware time at
    its instant and a naive one as a wall time of the session's zone. End the Spark
    segment with ``to_dataframe(schema)`` to get a DataFrame of typed columns
    that never passes through the driver, or with ``gather()`` to deliver the
    results to Python nodes. The steps until ``gather()`` run in Spark (as after
    ``to_spark()``); the nodes after it receive each micro-batch's results
    in order. :meth:`start` runs the query.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        A streaming DataFrame (``spark.readStream...``), or a static one (a
        backfill: :meth:`start` runs one job; its end closes the steps, as
        ``close()`` does in-process). A static DataFrame has no watermark:
        an event-time window counts every row in its windows, none is late,
        where in-process a row that comes behind the watermark, in the
        DataFrame's order, would be.
    checkpoint : str, optional
        The checkpoint directory: Spark's offsets and state, and the batch
        delivered last with the states of the nodes after ``gather()``. A
        path or URI as Spark reads it (``file://``, ``hdfs://``, ``s3a://``).
        Needed only to deliver a streaming DataFrame's results to Python
        nodes after ``gather()``; a segment ending in ``to_dataframe()``
        is written with Spark's own sink and checkpoint.
    available_now : bool
        Process what is available, then stop (``Trigger.AvailableNow``);
        otherwise run until :meth:`stop`.

    Examples
    --------
    >>> import tempfile, streams_spark
    >>> from streams import Stream
    >>> spark = streams_spark.default_session()
    >>> d = tempfile.mkdtemp()
    >>> spark.range(5).write.mode("overwrite").parquet(d + "/in")
    >>> df = spark.readStream.schema("id long").parquet(d + "/in")
    >>> source = Stream.from_spark(df, checkpoint=d + "/ckpt")
    >>> out = source.map(lambda x: x * 10).gather().sink_to_list()
    >>> source.start()
    >>> sorted(out)
    [0, 10, 20, 30, 40]
    """

    _operator = "from_spark"
    _params = ("df", "checkpoint", "available_now")
    _graphviz_shape = "triangle"

    def __init__(self, df: Any, checkpoint: str | None = None, available_now: bool = True,
                 **kwargs: Any) -> None:
        # On the class: hasattr() on the DataFrame would ask the JVM (a property).
        if not hasattr(type(df), "isStreaming") or not hasattr(type(df), "mapInArrow"):
            raise TypeError(
                "from_spark() takes a Spark DataFrame (spark.read... or spark.readStream...), "
                f"got {type(df).__name__}; for in-process data use Stream().to_spark()")
        self.df = df
        self.checkpoint = checkpoint
        self.available_now = available_now
        self.query: Any = None
        self._delivered = -1
        self._failed: BaseException | None = None
        self._checkpoint_at: Location | None = None
        self._dropped_rows: LateElements | None = None
        #: The failures set aside on the way to a window (see streams_spark.window_failures).
        self._failures: Any = None
        Stream.__init__(self, **kwargs)
        self._segment = SparkSegment(self)  # type: ignore[arg-type]

    def _local_nodes(self) -> list[Stream[Any]]:
        """The in-process nodes after ``gather()``, in a stable order."""
        segment = self._segment
        assert isinstance(segment, SparkSegment)
        (gather,) = segment.exits
        return [n for n in walk(self) if n._segment is None and n is not gather
                and _after(n, gather)]

    def start(self) -> None:
        """Run the query (until all is processed, with ``available_now``)."""
        segment = self._segment
        assert isinstance(segment, SparkSegment)
        if not segment.exits:
            raise ValueError(f"{self._label()}: end the Spark segment with .gather() (or "
                             "with .to_dataframe(), which needs no start())")
        ship_library(self.df.sparkSession)
        if not self.df.isStreaming:
            self._run_static()
            return
        if self.checkpoint is None:
            raise ValueError(
                f"{self._label()}: a streaming DataFrame delivered to Python nodes after "
                "gather() needs a checkpoint directory: Stream.from_spark(df, "
                "checkpoint='ckpt/') (to_dataframe() needs none: Spark's sink keeps it)")
        saved = load_checkpoint(self._delivered_at())
        if saved is not None:
            self._delivered = saved["batch_id"]
            for node, state in zip(self._local_nodes(), saved["states"], strict=True):
                node.restore(state)
        plan = segment.plan()
        if any(isinstance(s, WindowStage) for s in plan.stages):
            self._dropped_rows = LateElements(plan, driver_fed=False)  # drops Spark reports
        df = count_input(self.df, segment.gathered(), self._label)
        frame = self._query_frame(df, plan)
        writer = (frame.writeStream.foreachBatch(self._deliver_batch)
                  .queryName(query_name(self))
                  .option("checkpointLocation", self._checkpoint_dir().child("query").uri))
        writer = writer.trigger(availableNow=True) if self.available_now else writer
        self.query = writer.start()
        if self.available_now:
            self.await_termination()

    def _checkpoint_dir(self) -> Location:
        """The checkpoint directory, qualified once by Hadoop (as Spark reads it)."""
        if self._checkpoint_at is None:
            assert self.checkpoint is not None
            self._checkpoint_at = location(self.checkpoint, self.df.sparkSession)
        return self._checkpoint_at

    def _delivered_at(self) -> Location:
        """Where the batch delivered last is saved, with the states after gather()."""
        return self._checkpoint_dir().child("delivered")

    def await_termination(self) -> None:
        """Wait for the query to end; a node's error is raised as itself.

        An error a node's policy raised while a batch was delivered reaches
        the caller as that :class:`~streams.NodeError` (with its original
        type), not wrapped in Spark's ``StreamingQueryException``.
        """
        try:
            self.query.awaitTermination()
            settle(self.df.sparkSession)  # the bars of progress() show the last batch
            if self._dropped_rows is not None:  # drops reported for the last micro-batches
                dropped = self._dropped_rows.rows(self.query.recentProgress)
                raise_first(self._apply(dropped), "Spark")
        except Exception as e:
            failed, self._failed = self._failed, None
            if failed is not None:
                raise failed from failed.__cause__  # its own cause, not Spark's exception
            reraise_node_failure(e, self._segment)
            raise

    def _query_frame(self, df: Any, plan: Plan) -> Any:
        """The plan applied to ``df``; failures set aside on the way to a window come back."""
        if any(isinstance(s, WindowStage) for s in plan.stages) and needs_accumulator(
                plan.specs):
            self._failures = failure_accumulator(df.sparkSession)
        return build_query_frame(df, plan, first=COLUMNS, failures=self._failures)

    def _run_static(self) -> None:
        """A static DataFrame: one Spark job, its results delivered in order, then close."""
        segment = self._segment
        assert isinstance(segment, SparkSegment)
        try:
            self._deliver_batch(self._query_frame(self.df, segment.plan()), 0)
        except Exception as e:
            reraise_node_failure(e, segment)  # a node's error failed the job: raised as itself
            raise
        self.close()

    def stop(self) -> None:
        """Stop a running query, then close the pipeline."""
        if self.query is not None:
            self.query.stop()
        self.close()

    def _deliver_batch(self, df: Any, batch_id: int) -> None:
        if batch_id <= self._delivered:
            return  # replayed by Spark after a restart: delivered already
        # Every result of the batch is delivered, and the batch recorded as
        # delivered, before the first error a node's policy raises: a
        # restarted query then neither loses nor repeats the others.
        late = self._dropped_rows.rows(self.query.recentProgress) if (
            self._dropped_rows is not None and self.query is not None) else []
        rows = collected_rows(df.toArrow())  # runs the micro-batch's job
        errors = self._apply([*late, *taken(self._failures), *rows])
        if self.checkpoint is not None:
            states = [n.snapshot() for n in self._local_nodes()]
            save_checkpoint(self._delivered_at(), {"batch_id": batch_id, "states": states})
        self._delivered = batch_id
        if errors:
            self._failed = errors[0]  # raised as itself by await_termination()
        raise_first(errors, "Spark")

    def _apply(self, rows: list[tuple[int, Any]]) -> list[BaseException]:
        """Deliver ``rows`` to ``gather()``, errors to their node's policy; what that raised."""
        segment = self._segment
        assert isinstance(segment, SparkSegment)
        (gather,) = segment.exits
        errors: list[BaseException] = []
        for kind, p in rows:
            try:
                if kind == ERROR:
                    node_id, x, exc = pickle.loads(p)
                    segment.node(node_id)._fail(x, exc)
                elif kind in (DATA, WINDOW, WINDOW_ITEMS):
                    gather._emit(value_of(kind, p))
            except Exception as e:
                errors.append(e)
        return errors


def _after(node: Stream[Any], gather: Stream[Any]) -> bool:
    todo = list(node.upstreams)
    while todo:
        n = todo.pop()
        if n is gather:
            return True
        todo.extend(n.upstreams)
    return False
