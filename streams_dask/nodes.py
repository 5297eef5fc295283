# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""``scatter()``: the node that starts a Dask segment and runs it.

``gather()``, which ends a segment, belongs to the core: it registers itself
with the segment through ``Segment.add_exit``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from distributed import Client

from streams.core import Stream
from streams.metadata import retain_refs
from streams.operators._checks import check_count
from streams.segment import SegmentEntry, raised_after

from .async_driver import AsyncDriver
from .client import Connection, client_loop_running_here, connect, connect_async, inform_loop
from .placement import PINNED_TASKS, register, register_async
from .runner import Runner
from .segment import DaskSegment, plan_stages
from .ticks import TimedWindows, WindowClock
from .to_dask import bound_client

__all__ = ["Scatter"]

#: Elements per task at most; large enough that Dask's per-task cost
#: (about a millisecond here) is small against the work of a batch.
DEFAULT_BATCH_SIZE = 1000


@Stream.register_api()
class Scatter(TimedWindows, SegmentEntry, Stream[Any]):
    """Run the operators below this node on Dask, until ``gather()``.

    Elements are sent to workers in batches, many tasks in flight; each
    task runs every step between ``scatter()`` and ``gather()`` (fused), and
    ``gather()`` receives the results **in input order**, exactly as an
    in-process run produces them. Stateful steps (``scan``, windows,
    ``zip``...) carry their state from one batch to the next.

    Unlike streamz, operators between ``scatter()`` and ``gather()`` never
    see futures, and an operator that cannot run on Dask is refused when the
    graph is built.

    When results reach ``gather()`` follows streamz:

    * a plain ``scatter()`` (streamz's call: no batching argument, no
      ``buffer()`` in the segment): ``emit(x)`` returns, and ``await
      emit(x)`` resolves, once ``x``'s results have gone through ``gather()``
      and on, one element at a time, as in-process and as in streamz;
    * ``buffer(n)`` in the segment, or ``batch_size``, ``max_in_flight`` or
      ``ordered=False`` given: elements overlap on the cluster. ``emit``
      returns once the element is accepted (sent, or held for the next
      batch while every worker thread has a task queued) and waits only
      while the bound is reached: ``max_in_flight`` tasks, and with
      ``buffer(n)`` at most ``n`` elements held. Results reach ``gather()``
      as their tasks finish, even while the producer is idle (for a
      synchronous stream, from distributed's callback thread, one at a
      time, in order, as streamz's come from its loop thread), and all of
      them by the time ``close()`` returns or :meth:`flush` is called.
      Waiting for each element inside ``emit`` makes every element a round
      trip to the cluster: throughput needs this mode.

    ``emit(x, asynchronous=True)`` from the client's own loop (streamz's
    ``distributed.utils.sync`` idiom) is driven on that loop, never blocking it.

    Errors raised on workers are applied, in order, through the error policy
    of the node that raised (:meth:`~streams.Stream.on_error`): with
    ``"raise"`` the :class:`~streams.errors.NodeError` names the node and
    the element, and surfaces from the ``emit`` or ``close`` during which
    its result came back; ``close()`` delivers every other result first.

    Checkpoints (:class:`~streams.state.Checkpointer`) and sources that
    acknowledge what is done (``from_redis``) see an element as done only
    once its results came back: a checkpoint first waits for every element
    in flight, then brings back from the workers the state the segment's
    stateful nodes carry from batch to batch (:attr:`segment_states`, which
    stays on the workers between checkpoints: see :mod:`streams_dask.chain`),
    and records it; a pipeline restarted from it resumes that state on the
    cluster. (The cluster drains at each checkpoint: checkpoint every few
    batches' worth of elements, not every few elements.)

    streamz's metadata (``emit(x, metadata=[{"ref": RefCounter}])``) stays
    on the client, and an element's references are held until its results
    have gone on from ``gather()``. If no step of the segment keeps state
    (``map``, ``filter``, ``flatten``...), ``gather()`` emits each result
    with its element's metadata, as in-process: a window after ``gather()``
    holds the references. With a stateful step on the workers (a window, a
    ``scan``), results go on without metadata, and an element's references
    are released once its batch's results have, even while that step holds
    the element: where a source commits what is released (streamz's Kafka
    checkpointing), put such a step after ``gather()``.

    Parameters
    ----------
    client : distributed.Client, optional
        Overrides the client chosen by ``to_dask()`` (see there).
    batch_size : int, optional
        Most elements per task (default 1000, once elements overlap; giving
        it asks for the overlap). Batches start at 16 elements and grow as
        workers report run times, up to about a quarter of a second of work
        per task (so that the last tasks of a stream are short).
    max_in_flight : int, optional
        Most tasks running or queued on the cluster (default: three per
        worker thread, at least 4); results that finished ahead of an
        earlier one wait, at most as many again. With ``batch_size``, this
        bounds the elements held: the backpressure.
    ordered : bool
        ``gather()`` emits results in input order (the default). With False,
        batches are emitted as they finish (order within a batch is kept);
        only steps without state may then follow, so no result changes.
    progress : bool
        Show a progress bar (``tqdm.auto``: notebook-aware) of the tasks done,
        with tasks per second; it closes with the stream.

    Examples
    --------
    >>> import streams_dask
    >>> from distributed import Client, LocalCluster
    >>> from streams import Stream
    >>> cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=":0")
    >>> client = Client(cluster)
    >>> source = Stream()
    >>> L = source.to_dask(client).scatter().map(abs).scan(max).gather().sink_to_list()
    >>> for x in [-1, 3, -5, 2]:
    ...     source.emit(x)
    >>> source.close()
    >>> L
    [1, 3, 5, 5]
    >>> client.close(); cluster.close()
    """

    __slots__ = (
        "_driver",
        "_early",
        "_early_refs",
        "_on_loop",
        "_overlap",
        "_restored",
        "_runner",
        "_starting",
        "_ticks",
        "batch_size",
        "client",
        "max_in_flight",
        "ordered",
        "show_progress",
    )
    _operator = "scatter"
    _local_only = "it starts a segment of its own, and segments cannot be nested"
    # max_in_flight first: a picture labels the node by its first parameter,
    # which is then "scatter" (the default, None) rather than a batch size.
    _params = ("max_in_flight", "batch_size", "ordered")
    _state_params = ()  # the segment's states, whatever the batching
    _graphviz_shape = "triangle"

    def __init__(self, upstream: Stream[Any], client: Client | None = None,
                 batch_size: int | None = None, max_in_flight: int | None = None,
                 ordered: bool = True, progress: bool = False, **kwargs: Any) -> None:
        check_count("scatter", "batch_size", batch_size, optional=True)
        check_count("scatter", "max_in_flight", max_in_flight, optional=True)
        self.client = client if client is not None else bound_client(upstream)
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self.ordered = bool(ordered)
        #: Show a tqdm bar of the Dask tasks done (``streams.jupyter``).
        self.show_progress = bool(progress)
        self._runner: Runner | None = None
        self._driver: AsyncDriver | None = None
        self._starting: asyncio.Future[None] | None = None
        self._ticks: WindowClock | None = None
        self._early: list[Any] = []
        self._early_refs: list[tuple[int, Any]] = []
        self._restored: dict[int, Any] | None = None
        #: Whether ``emit`` returns before the element's results are back
        #: (decided when the segment starts, see ``_make_runner``).
        self._overlap = False
        #: Whether elements go through a driver on a running loop.
        self._on_loop = False
        Stream.__init__(self, upstream, **kwargs)
        self._segment = DaskSegment(self)
        inform_loop(self, self.client)

    # -- start ----------------------------------------------------------------

    def _make_runner(self, connection: Connection, nthreads: int) -> Runner:
        segment = self._segment
        assert isinstance(segment, DaskSegment)
        segment.started = True
        plan = plan_stages(segment)
        nodes = {n._node_id: n for n in segment.nodes}
        bound = self.max_in_flight or max(4, 3 * nthreads)
        elements = segment.element_bound()
        self._overlap = segment.overlap() is not None
        runner = Runner(connection, plan, nodes, segment.exits,
                        self.batch_size or DEFAULT_BATCH_SIZE, bound,
                        self._label(), self.ordered, threads=nthreads,
                        element_bound=elements)
        if self._overlap and not self.asynchronous:
            runner.deliver_as_done()
        if plan.second is not None and self._restored is not None:
            assert runner.chain is not None  # the stateful stage resumes from a checkpoint
            runner.chain.states = segment.by_node(self._restored, plan.keyed)
        if self.show_progress:
            from streams.jupyter.progress import progress_bar

            runner.progress = progress_bar(desc=f"{self._label()} on Dask", unit="task")
        # Ticks of windows that closed before the first element, and elements
        # that arrived while an asynchronous client was being resolved.
        runner.pending.extend(self._early)
        runner.refs.adopt(self._early_refs)  # held already, at these positions
        self._early.clear()
        self._early_refs.clear()
        return runner

    def _admitted(self, node: Stream[Any]) -> None:
        """A node joined the segment: time it if it is a processing-time window."""
        if WindowClock.wants(node):
            if self._ticks is None:
                self._ticks = WindowClock(self._on_due)
            self._ticks.add(node)

    def _start(self) -> Runner:
        connection = connect(self.client)
        workers = connection.client.nthreads()
        runner = self._make_runner(connection, sum(workers.values()))
        if self._ticks is not None:
            runner.lock.after_release = self._after_release  # see TimedWindows
        self._runner = runner
        pinned = runner.chain is not None and register(connection.client, PINNED_TASKS)
        runner.warm_workers(workers, pinned)
        return runner

    async def _astart(self) -> None:
        connection = await connect_async(self.client)
        workers = await connection.client.nthreads()
        self._runner = self._make_runner(connection, sum(workers.values()))
        pinned = (self._runner.chain is not None
                  and await register_async(connection.client, PINNED_TASKS))
        self._runner.warm_workers(workers, pinned)
        self._driver = AsyncDriver(self._runner)

    # -- data flow ------------------------------------------------------------

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if self.asynchronous or self._on_loop:
            return self._update_async(x, metadata)
        runner = self._runner
        if runner is None:
            if self._client_loop_running_here():
                # Called from the client's own loop (streamz's ``await
                # emit(x, asynchronous=True)`` through ``distributed.utils.
                # sync``): blocking here would stop the loop that brings the
                # results, so this stream is driven from that loop.
                self._on_loop = True
                return self._update_async(x, metadata)
            runner = self._start()
        with runner.lock:
            self._take_ticks(runner.pending)
            if not self._overlap:
                runner.pending.append(x)
                if metadata is not None:
                    runner.hold_refs(metadata)
                self.flush()
            else:
                runner.accept(x, metadata)
                if runner.replay.ready:
                    runner.replay.run()
                # An error met delivering earlier results in the background
                # is raised here, after ``x`` is safely accepted.
                self._raise_background(runner)
        return None

    @staticmethod
    def _raise_background(runner: Runner) -> None:
        """Raise the first error met delivering results in the background."""
        if runner.background_errors:
            raise runner.background_errors.pop(0)

    def _client_loop_running_here(self) -> bool:
        """Whether this thread runs the event loop of the client to use."""
        return client_loop_running_here(self.client)

    def _update_async(self, x: Any, metadata: Any = None) -> Any:
        driver = self._driver
        if driver is None:
            # Queued now, in call order, while the client is being resolved.
            if self._ticks is not None:
                self._ticks.due(self._early)
            self._early.append(x)
            if metadata is not None:
                retain_refs(metadata)
                self._early_refs.append((len(self._early) - 1, metadata))
            return self._start_then()
        runner = driver.runner
        if self._ticks is not None:
            self._ticks.due(runner.pending)
        runner.pending.append(x)
        if metadata is not None:
            runner.hold_refs(metadata)
        runner.pump()
        driver.kick()
        if not self._overlap:
            return self._aflush()
        if runner.full():
            return driver.room()
        # An error met downstream while replaying earlier results is raised
        # here, after ``x`` is safely accepted.
        driver.check()
        return None

    async def _start_then(self) -> None:
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._astart())
        await self._starting
        driver = self._driver
        assert driver is not None
        driver.runner.pump()
        driver.kick()
        await driver.room()
        if not self._overlap:
            await self._aflush()

    @property
    def in_flight(self) -> int:
        """How many tasks are in flight now (submitted, results not yet emitted)."""
        return 0 if self._runner is None else self._runner.count()

    @property
    def work_seconds(self) -> float:
        """Seconds of work the workers reported for this segment's batches so far.

        Against wall time and the number of worker threads, it tells how
        busy the segment kept the cluster.
        """
        return 0.0 if self._runner is None else self._runner.sizes.work_seconds

    def flush(self) -> Any:
        """Wait for every element in flight and push its results downstream.

        Returns None, or an awaitable on an asynchronous stream.
        """
        if self._runner is None:
            return None
        if self.asynchronous or self._on_loop:
            return self._aflush()
        runner = self._runner
        with runner.lock:
            self._raise_background(runner)
            self._take_ticks(runner.pending)
            runner.pump()
            while runner.head() is not None or runner.pending or runner.anchor():
                runner.wait_one()
                self._take_ticks(runner.pending)  # a timer's, while this waits
                runner.pump()
                runner.replay.run()
        return None

    async def _aflush(self) -> None:
        driver = self._driver
        assert driver is not None
        runner = driver.runner
        runner.pump()
        while (runner.head() is not None or runner.pending or runner.replay.ready
               or runner.anchor()):
            # The driving task collects results until nothing is in flight;
            # waiting for it (rather than collecting here too) leaves one
            # consumer of the finished tasks, which a second one could starve.
            driver.kick()
            assert driver.task is not None
            await asyncio.shield(driver.task)
            driver.check()
            runner.pump()
            await driver.runner.replay.run_async()

    def _barrier(self) -> Any:
        """Before a checkpoint: finish the elements in flight (None, or an awaitable).

        A checkpoint records a source's offset as done, so every element up
        to it must have come back from the cluster, and with them the states
        (:meth:`Runner.anchor`): :attr:`segment_states` is then the state
        after exactly those elements.
        """
        if self.asynchronous or self._on_loop:
            started = self._driver is not None or self._starting is not None
            return self._abarrier() if started else None
        return self.flush()

    async def _abarrier(self) -> None:
        if self._starting is not None:
            await self._starting  # the client is still being resolved
        await self._aflush()

    def _running_states(self) -> dict[int, Any] | None:
        # The states at the chain's last anchor: after a checkpoint's barrier,
        # those of every element whose results were replayed.
        runner = self._runner
        states = None if runner is None or runner.chain is None else runner.chain.states
        if states is None:
            return None
        segment = self._segment
        assert isinstance(segment, DaskSegment)
        return segment.by_position(states)

    # -- end of stream -------------------------------------------------------

    def _on_close(self, who: Stream[Any] | None) -> Any:
        if self._closed:
            return None
        self._closed = True
        self._push = self._push_closed
        if self._on_loop and not self.asynchronous and self._driver is not None \
                and not self._client_loop_running_here():
            # Driven on the client's loop, closed from another thread: the
            # end of stream runs there too, and this thread waits for it.
            from distributed.utils import sync

            sync(self._driver.runner.client.loop, self._aclose_segment)
            return None
        if self.asynchronous or self._on_loop:
            return self._aclose_segment()
        errors: list[BaseException] = []
        runner = self._runner
        if runner is None and (self._early or self._restored or self._ticks_came()):
            runner = self._start()  # restored state ends with the stream: windows flush
        if runner is None:
            self._last_ticks(None)
        else:
            try:
                with runner.lock:
                    self._last_ticks(runner.pending)
                    # Errors raised downstream in the background (a
                    # node's "raise" policy) do not stop the drain: the
                    # results after them are replayed. A broken runner's
                    # (see Runner.broken) would wait for ever.
                    errors = runner.background_errors
                    errors = errors + (runner.drain() if not runner.broken else [])
                    if runner.failed is not None and not errors:
                        errors = [runner.failed]  # a stateful stage's end was never reached
            finally:
                runner.forget()
                runner.connection.close()
        return self._exits_closed(errors)

    async def _aclose_segment(self) -> None:
        if self._starting is None and (self._early or self._restored or self._ticks_came()):
            self._starting = asyncio.ensure_future(self._astart())
        if self._starting is not None:
            await self._starting
        driver = self._driver
        errors: list[BaseException] = []
        self._last_ticks(None if driver is None else driver.runner.pending)
        if driver is not None:
            try:
                errors = await driver.finish()
            finally:
                driver.runner.forget()
                await driver.runner.connection.aclose()
        pending = self._exits_closed(errors)
        if pending is not None:
            await pending

    def _exits_closed(self, errors: list[BaseException]) -> Any:
        """Close the exits, then raise the first of ``errors`` once their closing work ran."""
        try:
            pending = self._close_exits()
        except Exception as e:
            if not errors:
                raise
            errors.append(e)
            pending = None
        return raised_after(pending, errors, "Dask")

    def _close_exits(self) -> Any:
        """Close the ``gather()`` nodes (their downstreams see the end)."""
        from streams.pending import emit_each

        segment = self._segment
        assert isinstance(segment, DaskSegment)
        for node in segment.nodes:
            node._closed = True
        if self._runner is not None and self._runner.progress is not None:
            self._runner.progress.close()
        # Every exit ends even if one fails; the first failure is raised after.
        return emit_each(lambda g: g._on_close(g.upstreams[0]), segment.exits)
