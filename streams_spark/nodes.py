"""``to_spark()``: the entry of a Spark segment, and the segment itself.

``gather()``, which ends a segment, belongs to the core: it registers itself
with the segment through ``Segment.add_exit``.
"""

from __future__ import annotations

import asyncio
import pickle
from collections import deque
from typing import Any

from streams.clock import get_clock
from streams.core import Stream
from streams.operators._checks import check_count
from streams.operators._outbox import running_loop as _running_loop
from streams.segment import SegmentEntry, raise_first
from streams.window_clock import WindowClock

from .batch import BatchRunner
from .codec import ErrorRecord
from .listener import BatchCounter
from .node_failures import NodeFailureInfo, node_failed
from .plan import ChainStage, Plan, lower
from .segment import SparkSegment
from .shipping import ship_library

__all__ = ["SparkSegment", "ToSpark"]

#: Elements per micro-batch at most (a batch also closes on ``interval``).
DEFAULT_BATCH_SIZE = 10_000


@Stream.register_api()
class ToSpark(SegmentEntry, Stream[Any]):
    """Run the steps below this node on Spark, until ``gather()``.

    Elements are buffered into micro-batches, closed when ``batch_size``
    elements are held or ``interval`` seconds have passed since the batch
    opened (checked when an element arrives), and at ``close()``. Each
    micro-batch runs the lowered plan (a chain of Python steps fused into
    one ``mapInArrow`` pass; keyed scans on Spark-managed state) and
    ``gather()`` emits its results in input order, as in-process.

    Parameters
    ----------
    session : SparkSession, optional
        Defaults to a reused local session (UI off, Arrow on).
    batch_size : int
        Most elements per micro-batch.
    interval : float, optional
        Close a micro-batch this many seconds after it opened.
    checkpoint : str, optional
        Directory where state and batch id are saved after each batch, so a
        restarted pipeline resumes them: a path or URI as Spark reads it
        (``file://``, ``hdfs://``, ``s3a://``). In stream mode the micro-batches
        wait there for the query too, so on a cluster it must be a place every
        executor reaches. (A :class:`~streams.state.Checkpointer`
        of the whole pipeline also covers a batch-mode segment: a checkpoint
        first runs the open micro-batch, and saves the state the segment
        carries between micro-batches, :attr:`segment_states`. A segment that
        runs as a Structured Streaming query is refused by a Checkpointer:
        Spark keeps its state.)
    streaming : bool, optional
        Run as one Structured Streaming query even when the plan needs no
        Spark-managed state (by default such a plan runs one Spark batch job
        per micro-batch).
    progress : bool
        Show a progress bar (``tqdm.auto``: notebook-aware) of the
        micro-batches run, with batches per second and the elements sent
        (``rows=``); it closes with the stream.

    Examples
    --------
    >>> import streams_spark
    >>> from streams import Stream
    >>> source = Stream()
    >>> out = (source.to_spark(batch_size=3).map(lambda x: x * 10)
    ...        .filter(lambda x: x != 20).scan(lambda a, b: a + b)
    ...        .gather().sink_to_list())
    >>> for i in range(5):
    ...     source.emit(i)
    >>> source.close()
    >>> out
    [0, 10, 40, 80]
    """

    _operator = "to_spark"
    _local_only = "it starts a segment of its own, and segments cannot be nested"
    _params = ("batch_size", "interval", "checkpoint", "streaming")
    _graphviz_shape = "triangle"

    def __init__(self, upstream: Stream[Any] | None = None, session: Any = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, interval: float | None = None,
                 checkpoint: str | None = None, streaming: bool = False,
                 progress: bool = False, **kwargs: Any) -> None:
        check_count("to_spark", "batch_size", batch_size)
        if interval is not None and not interval > 0:
            raise ValueError(f"to_spark(): interval must be > 0 seconds, got {interval!r}")
        self.session = session
        self.batch_size = batch_size
        self.interval = interval
        self.checkpoint = checkpoint
        self.streaming = streaming
        self.show_progress = bool(progress)
        self._bar: Any = None
        self._sent = 0  # elements handed to Spark, shown on the bar
        #: Moves the bars of the segment's .progress() nodes (None: it has none).
        self._counter: BatchCounter | None = None
        self._buffer: list[Any] = []
        self._opened: float | None = None
        self._runner: Any = None
        self._plan: Plan | None = None
        self._windows: WindowClock | None = None
        #: Windows that close in the open micro-batch: (position, node id).
        self._ticks: list[tuple[int, int]] = []
        self._restored: dict[int, Any] | None = None
        #: Results of a micro-batch not yet delivered: an error raised by a
        #: node's policy stops delivery; the rest follows at the next call.
        self._pending: deque[Any] = deque()
        #: Set while a micro-batch runs off the loop (asynchronous streams).
        self._inflight: asyncio.Future[None] | None = None
        Stream.__init__(self, upstream, **kwargs)
        self._segment = SparkSegment(self)

    @property
    def spark_segment(self) -> SparkSegment:
        """The segment this node runs."""
        segment = self._segment
        assert isinstance(segment, SparkSegment)
        return segment

    def _add_window(self, node: Stream[Any]) -> None:
        """Time the processing-time window ``node`` of the segment (at admission)."""
        if self._windows is None:
            self._windows = WindowClock(self._on_ticks)
        self._windows.add(node)

    def _on_ticks(self, ticks: list[int]) -> None:
        # A timer found windows due: they close with the held elements now.
        self._ticks.extend((len(self._buffer), t) for t in ticks)
        self.run_batch()

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if self._windows is not None:
            due: list[int] = []
            self._windows.due(due)
            if due:
                # Batch-aligned processing time: a window closes at the end of
                # a micro-batch, which holds exactly the elements that arrived
                # before its deadline (as the in-process window would).
                self._on_ticks(due)
        buf = self._buffer
        if not buf and self.interval is not None:
            self._opened = get_clock().now()
        buf.append(x)
        if self._pending:
            self._replay()  # after taking x: an error raised here loses nothing
        if len(buf) >= self.batch_size or (
                self.interval is not None and self._opened is not None
                and get_clock().now() - self._opened >= self.interval):
            if self.asynchronous and _running_loop() is not None:
                return self._run_batch_async()
            self.run_batch()
        return None

    def _take(self) -> tuple[list[Any], list[tuple[int, int]]]:
        """The held elements and ticks, for one micro-batch (and hold none)."""
        elements, self._buffer = self._buffer, []
        self._sent += len(elements)
        ticks, self._ticks = self._ticks, []
        self._opened = None
        return elements, ticks

    def _run(self, runner: Any, elements: list[Any], flush: bool,
             ticks: list[tuple[int, int]]) -> list[Any]:
        """One micro-batch on Spark (a blocking call); a failed query raises its node's error."""
        try:
            values: list[Any] = (runner.run(elements, flush=flush, ticks=ticks) if ticks
                                 else runner.run(elements, flush=flush))
            return values
        except NodeFailureInfo as e:
            node_failed(self.spark_segment, e.info)

    def run_batch(self, flush: bool = False,
                  errors: list[BaseException] | None = None) -> None:
        """Run the held elements as one micro-batch and emit the results."""
        elements, ticks = self._take()
        if not elements and not flush and not ticks:
            return
        values = self._run(self._runner or self._start(), elements, flush, ticks)
        self._deliver(values, errors, len(elements))

    async def _run_batch_async(self, flush: bool = False,
                               errors: list[BaseException] | None = None) -> None:
        """:meth:`run_batch` on a running loop: the Spark job runs off the loop.

        One micro-batch runs at a time: an ``await emit`` that closes a batch
        while another runs waits for it (the backpressure), and resolves once
        its batch's results are delivered. The loop keeps serving other tasks
        meanwhile.
        """
        loop = asyncio.get_running_loop()
        while self._inflight is not None:
            await asyncio.shield(self._inflight)
        elements, ticks = self._take()
        if not elements and not flush and not ticks:
            return
        done = self._inflight = loop.create_future()
        try:
            runner = self._runner or await loop.run_in_executor(None, self._start)
            values = await loop.run_in_executor(None, self._run, runner, elements, flush, ticks)
        finally:
            self._inflight = None
            done.set_result(None)
        self._deliver(values, errors, len(elements))

    def _start(self) -> Any:
        from .session import default_session

        segment = self.spark_segment
        if not segment.exits:
            raise ValueError(
                f"{self._label()}: the Spark segment has no gather(); end it with "
                ".gather() before emitting"
            )
        plan = self._plan = segment.plan()
        session = self.session if self.session is not None else default_session()
        ship_library(session)
        if self._windows is not None and self.streaming:
            raise ValueError(
                f"{self._label()}: streaming=True cannot run the processing-time "
                "timed_window of this segment (its windows close on the driver's clock, "
                "one Spark job per micro-batch); drop streaming=True, or give the window "
                "an event time (timed_window(interval, time=func, lateness=...))"
            )
        bars = [n for n in segment.nodes if n._operator == "progress"]
        self._counter = BatchCounter(bars) if bars else None
        if plan.mode == "batch" and not self.streaming:
            chains = [s for s in plan.stages if isinstance(s, ChainStage)]
            specs = chains[0].specs if chains else []
            sequential = any(s.sequential for s in chains)
            self._runner = BatchRunner(session, specs, sequential, self.checkpoint)
            if self._restored is not None:  # resumed from a pipeline's checkpoint
                self._runner.states = dict(self._restored)
        else:
            from .stream import StreamRunner

            self._runner = StreamRunner(session, plan, self.checkpoint, owner=self)
        return self._runner

    # -- checkpoints of the pipeline (streams.state.Checkpointer) -------------

    def _barrier(self) -> None:
        """Before a checkpoint: run the open micro-batch.

        A checkpoint records a source's offset as done, so every element up
        to it must have been through Spark; :attr:`segment_states` is then
        the state after exactly those elements.
        """
        if self._pending:
            self._replay()
        if self._buffer or self._ticks:
            self.run_batch()

    def _checkpoint_refusal(self) -> str | None:
        """Why a Checkpointer cannot include this segment (None: it can)."""
        if not self.streaming and lower(
                [n.describe() for n in self.spark_segment.nodes]).mode == "batch":
            return None
        return (
            f"{self._label()}: a Checkpointer cannot include this Spark segment: it runs "
            "as a Structured Streaming query (a keyed scan, an event-time window, or "
            "streaming=True), which keeps its state in Spark, apart from the source "
            "offsets a checkpoint of the pipeline saves. For exactly-once with Spark "
            "state, start the pipeline from a Spark source with a checkpoint location "
            "(Stream.from_spark(df, checkpoint=...)); or gather() before the keyed "
            "scan or window and run it in-process"
        )

    def _running_states(self) -> dict[int, Any] | None:
        # Keyed by the step's position in the lowered chain. (Batch mode: a
        # Structured Streaming query keeps its state in Spark.)
        runner = self._runner
        return dict(runner.states) if isinstance(runner, BatchRunner) else None

    def _deliver(self, values: list[Any], errors: list[BaseException] | None = None,
                 rows: int = 0) -> None:
        if self._counter is not None and rows:
            self._counter(rows)
        if self.show_progress:
            if self._bar is None:
                from streams.jupyter.progress import progress_bar

                self._bar = progress_bar(desc=f"{self._label()} on Spark", unit="batch")
            self._bar.set_postfix(rows=self._sent, refresh=False)
            self._bar.update(1)
        self._pending.extend(values)
        self._replay(errors)

    def _replay(self, errors: list[BaseException] | None = None) -> None:
        """Deliver held results in order, applying each error's node policy.

        An error raised by a policy propagates at once, the results after it
        kept for the next call (as on Dask); with ``errors`` given it is
        appended there and delivery goes on.
        """
        (gather,) = self.spark_segment.exits
        segment = self.spark_segment
        emit = gather._emit
        pending = self._pending
        while pending:
            v = pending.popleft()
            try:
                if type(v) is ErrorRecord:
                    node_id, x, exc = pickle.loads(v)
                    segment.node(node_id)._fail(x, exc)
                else:
                    emit(v)
            except Exception as e:
                if errors is None:
                    raise
                errors.append(e)

    def _flush(self) -> Any:
        # End of stream: the last micro-batch, then what stateful steps hold.
        if self._runner is None and not self._buffer:
            return None
        if self.asynchronous and _running_loop() is not None:
            return self._aflush()
        # Every result is delivered before the first error is raised.
        errors: list[BaseException] = []
        try:
            self._replay(errors)
            self.run_batch(flush=True, errors=errors)
        finally:
            self._stop()
        raise_first(errors, "Spark")
        return None

    async def _aflush(self) -> None:
        errors: list[BaseException] = []
        try:
            self._replay(errors)
            await self._run_batch_async(flush=True, errors=errors)
        finally:
            self._stop()
        raise_first(errors, "Spark")

    def _stop(self) -> None:
        if self._windows is not None:
            self._windows.stop()
        if self._runner is not None and hasattr(self._runner, "stop"):
            self._runner.stop()
        if self._bar is not None:
            self._bar.close()
