# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""Tasks in flight: batching, the bound, ordered results, replay at gather.

The runner turns elements arriving at ``scatter()`` into Dask tasks:

* **batches** - while some worker thread has fewer than two tasks to run,
  elements leave at once (so a slow trickle is not held back); once every
  thread has its next task queued, elements wait for a full batch, since a
  small task sent then would only take a place in the queue, and a worker
  that finishes its big tasks would wait behind it for the next result;
* **batch size** - at most ``batch_size`` elements, fewer when the work
  is slow, after a slow start (:mod:`streams_dask.batch_sizes`);
* **the bound** - at most ``max_in_flight`` tasks running or queued on the
  cluster; results that came back ahead of an earlier one wait on the
  client (at most ``max_in_flight`` of them), and do not keep the workers
  from the next batch. Beyond that, and ``batch_size`` elements waiting,
  the producer waits (``emit`` blocks, or ``await emit`` is suspended),
  which is the backpressure;
* **order** - results are taken from the head of the queue only, so
  ``gather()`` sees them in input order whatever order workers finish in;
* **replay** - what a task returns is a list of events (values for a
  ``gather()`` node, failures for a node's error policy), replayed on the
  client in order, exactly where an in-process run would have produced them;
* **state** - a stateful (chained) stage runs in rounds that keep its state
  on the workers, one round behind the other (:mod:`streams_dask.chain`).

A worker that dies loses nothing: every task's input is part of the task or
of a task whose future the runner holds (nothing is scattered separately),
so the scheduler recomputes lost results, and each result is replayed once,
when it reaches the head. A stateful stage's tasks take nothing Dask could
compute differently a second time: the output of a stateless stage before
it that is not provably pure (:mod:`.pure_steps`: a random key, the clock)
is fetched by the client, which hands its bytes to the stateful tasks (see
:class:`~streams_dask.worker.Drawn`); a pure one's future is handed on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from distributed import Future

from streams.core import Stream
from streams.segment import unsendable

from .as_done import DeliversAsDone
from .batch_sizes import BatchSizes
from .chain import StateChain
from .client import Connection
from .delivery_lock import DeliveryLock
from .fetching import BatchNotSent, DaskTaskError, Fetcher, checked
from .held_refs import HeldRefs
from .key_groups import parts
from .placement import places_of, refresh_places
from .pure_steps import replicable
from .replay import Replay
from .rounds import StartsRounds
from .segment import Plan
from .sync_driving import POLL_EVERY, DrivesSynchronously
from .taken_positions import NondeterministicKey
from .worker import Batch, StageResult, run_marked, run_prefix, run_prefix_once, run_stage, warm

__all__ = ["POLL_EVERY", "DaskTaskError", "Runner"]


class Runner(DeliversAsDone, DrivesSynchronously, StartsRounds):
    """Runs one Dask segment for its ``scatter()`` node.

    Parameters
    ----------
    connection : Connection
        The client (and what to close at the end).
    plan : Plan
        The segment's stages, pickled.
    nodes : dict
        Segment nodes by id, to apply their error policy on failures.
    exits : list of Stream
        The ``gather()`` nodes, by exit index.
    batch_size : int
        Most elements per task.
    max_in_flight : int
        Most tasks running or queued on the cluster; as many again may
        wait, finished, for an earlier one (input order).
    label : str
        The ``scatter()`` node's name, for error messages.
    ordered : bool
        Results in input order (the default); else as tasks finish (only
        for segments without state, where order cannot change a result).
    threads : int, optional
        Worker threads of the cluster: while fewer than two tasks per
        thread are unfinished, elements leave without waiting for a full
        batch. Unknown (None): while there is room in flight.
    element_bound : int, optional
        Most elements held (waiting for a batch, or in flight until their
        results are replayed) once the producer goes on: ``buffer(n)``.
    """

    def __init__(self, connection: Connection, plan: Plan, nodes: dict[int, Stream[Any]],
                 exits: Sequence[Stream[Any]], batch_size: int, max_in_flight: int,
                 label: str = "scatter()", ordered: bool = True,
                 threads: int | None = None, element_bound: int | None = None) -> None:
        self.label = label
        self.ordered = ordered
        self.connection = connection
        self.client = connection.client
        self.plan = plan
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self.element_bound = element_bound
        self.submitted_elements = 0  # in tasks whose results are not taken yet
        self.refs = HeldRefs()
        self.warming: list[Future] = []  # kept until the end, or Dask forgets them
        # Unfinished tasks below which a partial batch leaves at once: one
        # running and one queued per worker thread keep the cluster busy.
        self.threads = threads
        self.eager = max_in_flight if threads is None else max(1, min(max_in_flight, 2 * threads))
        self.pending: list[Any] = []
        # Parallel plans: one future per batch, in order, with its items' positions.
        self.in_flight: deque[tuple[Future, range]] = deque()
        # Chained plans: batches (or first-stage futures) waiting for the
        # second stage (while an anchor is on its way), with the
        # end-of-stream flag of each; and the second stage's rounds.
        self.waiting: deque[tuple[Any, bool, int]] = deque()
        self.chain: StateChain | None = None
        #: The stateless stage before the chained one may give another result
        #: if run again: its output comes to the client (see _ready_batches).
        self.draws = False
        if plan.second is not None:
            # The parts of a keyed round may each run the stage before them
            # only if it gives them all the same elements: else they would
            # disagree about an element's key (see :mod:`.pure_steps`). And
            # a state built from an output Dask computed again (its worker
            # died) would disagree with the events already taken of it.
            pure = plan.first is not None and replicable(plan.first)
            self.draws = plan.first is not None and not pure
            self.chain = StateChain(self._task, plan.second,
                                    parts(threads or 1) if plan.keyed else None,
                                    plan.first if pure and plan.keyed else None)
        #: The events of the results taken, to push downstream.
        self.replay = Replay(nodes, exits, self.refs)
        self.submitted = 0  # tasks whose results are measured (one per batch)
        self.accepted = 0
        # Results are fetched in the background as tasks finish, kept by key.
        self.fetcher = Fetcher(loop=self.client.loop, with_results=True, raise_errors=False)
        self.fetched: dict[Any, StageResult] = {}
        self.closed = False
        self.sizes = BatchSizes(batch_size, element_bound)
        #: A progress bar (``update(1)`` per task whose result came back), or None.
        self.progress: Any = None
        #: Held by whoever drives a synchronous runner: the producer, or
        #: distributed's callback thread (see :meth:`deliver_as_done`).
        self.lock = DeliveryLock(self._arm, self._settle)
        self.as_done = False
        #: Errors met delivering in the background, for the producer's next call.
        self.background_errors: list[BaseException] = []
        #: One is the runner's own (a stateful stage's task failed), not
        #: raised downstream: the close cannot wait for it.
        self.broken = False
        #: A stateful stage's failed task: its chain of states is cut there.
        self.failed: DaskTaskError | None = None
        #: Failed batches fetched with another one, each raised by a later call.
        self.more_failures: deque[DaskTaskError] = deque()

    # -- submission ---------------------------------------------------------

    def count(self) -> int:
        """Tasks in flight (submitted, result not yet replayed)."""
        chained = len(self.chain.rounds) if self.chain is not None else 0
        return len(self.in_flight) + len(self.waiting) + chained

    def running(self) -> int:
        """Tasks running or queued on the cluster (no result fetched yet); a chained
        round counts once, until all its parts' results are in."""
        if self.chain is not None:  # then every task the fetcher follows is a round's
            return len(self.waiting) + self.chain.unfinished(self.fetched)
        return len(self.in_flight) - len(self.fetched)

    def _room(self, unfinished: int) -> bool:
        # Results held for an earlier one are bounded apart from the tasks
        # on the cluster: with one bound for both, a worker that finished
        # the tasks behind a long head task would sit idle until it ends.
        return (self.running() < unfinished
                and self.count() < 2 * self.max_in_flight)

    def held(self) -> int:
        """Elements accepted whose results are not taken yet."""
        return len(self.pending) + self.submitted_elements

    def full(self) -> bool:
        """Whether the producer must wait (the backpressure condition)."""
        if self.element_bound is not None and self.held() > self.element_bound:
            return True
        return len(self.pending) >= self.sizes.cap and not self._room(self.max_in_flight)

    def pump(self) -> None:
        """Submit what is pending while there is room.

        A full batch goes while fewer than ``max_in_flight`` tasks are
        unfinished; a partial one only while some worker thread lacks a
        queued task (see ``threads``).
        """
        while self.pending:
            unfinished = (self.max_in_flight if len(self.pending) >= self.sizes.cap
                          else self._eager())
            # Called at every element: no room is looked for when none can do.
            if not unfinished or not self._room(unfinished):
                return
            batch = self.pending[: self.sizes.cap]
            del self.pending[: self.sizes.cap]
            self._submit(batch, close=False)

    def _eager(self) -> int:
        """Unfinished tasks below which a partial batch leaves now.

        For a chained stage, a round takes every worker thread, and costs
        as much again as its states weigh: a partial batch leaves only while
        no round is in flight (else small rounds would follow each other,
        each carrying all the states).
        """
        chain = self.chain
        if chain is not None:
            idle = not chain.rounds and not chain.stalled and not self.waiting
            return self.max_in_flight if idle else 0
        return self.eager

    def anchor(self) -> bool:
        """Have the chained stage's states come back to the client (for a checkpoint).

        Call once nothing is in flight; returns whether a task was submitted
        for it (then wait for it as for any result).
        """
        futures = None if self.chain is None else self.chain.anchor()
        for future in futures or ():
            self._track(future)
        return futures is not None

    def _taken(self, seconds: float, positions: range) -> None:
        """A task's result for the items at ``positions``, which ran ``seconds``, was taken."""
        if self.progress is not None:
            self.progress.update(1)
        self.sizes.measure(seconds, len(positions))
        self.submitted_elements -= len(positions)
        self.refs.done(positions)

    def _not_sent(self, positions: range) -> None:
        """The items at ``positions`` were not sent: done with, as a failed task's (see store)."""
        self.submitted_elements -= len(positions)
        self.refs.done(positions)

    def warm_workers(self, threads: dict[str, int], pinned: bool = True) -> None:
        """Have each worker import the engine now (see :func:`~.worker.warm`).

        ``threads``: the workers' addresses and threads, where the chained
        stage's parts then prefer to run (one part per thread), if
        ``pinned``: only where the scheduler frees tasks pinned to workers
        that died (see :mod:`.placement`).
        """
        self.warming = [self.client.submit(warm, workers=[a], allow_other_workers=True,
                                           pure=False) for a in threads]
        if self.chain is not None and pinned:
            self.chain.places = places_of(threads)

    def hold_refs(self, metadata: Any, index: int = -1) -> None:
        """Hold ``metadata``'s references for the pending item at ``index``
        until its results are replayed (see :class:`~.held_refs.HeldRefs`)."""
        self.refs.hold(metadata, self.refs.sent + (index % len(self.pending)))

    def _submit(self, batch: list[Any], close: bool) -> None:
        self.refs.sent += len(batch)
        self.submitted_elements += len(batch)
        if self.plan.second is None:
            if batch:  # an empty close needs no task: nothing holds state
                positions = self.refs.last(len(batch))
                task = run_marked if self.refs.mark(positions) else run_stage
                future = self._sent(batch, task, self.plan.first, Batch(batch))
                self.submitted += 1
                self.in_flight.append((future, positions))
                self._track(future)
            return
        item: Any = batch
        assert self.chain is not None
        if self.plan.first is not None and batch and not self.chain.runs_prefix():
            try:
                item = self._sent(batch, run_prefix_once if self.draws else run_prefix,
                                  self.plan.first, Batch(batch))
            except BatchNotSent:
                if close:  # the end of stream goes on its own (as _lost's)
                    self._submit([], close=True)
                raise
            if self.draws:  # fetched: its round leaves once it is here
                self._track(item)
        self.submitted += 1
        self.waiting.append((item, close, len(batch)))
        self._start_second()

    def _task(self, batch: list[Any], *args: Any, **kwargs: Any) -> Future:
        """Submit a task of ``batch``; an element that does not pickle is named."""
        try:
            return self.client.submit(*args, pure=False, **kwargs)
        except TypeError as e:  # Dask's "Could not serialize object of type ..."
            error = unsendable(self.label, "Dask workers", batch, e)
            raise BatchNotSent(*error.args) from error.__cause__ or e

    def _sent(self, batch: list[Any], *args: Any) -> Future:  # the last batch sent's
        try:
            return self._task(batch, *args)
        except BatchNotSent:
            self._not_sent(self.refs.last(len(batch)))
            raise

    def submit_close(self) -> list[BaseException]:
        """Submit everything pending, and the end of stream for stateful stages.

        Only the first call does anything. Returns the errors of batches
        that could not be sent (see :meth:`_task`): the batches after one
        still go, and the end of stream still reaches the stateful stage.
        """
        if self.closed:
            return []
        self.closed = True
        batches, self.pending = self.sizes.last(self.pending, self.max_in_flight), []
        errors: list[BaseException] = []
        for i, batch in enumerate(batches, 1):
            try:  # a batch not sent sends its end of stream on its own
                self._submit(batch, close=i == len(batches))
            except BatchNotSent as e:
                errors.append(e)
        return errors

    # -- results ------------------------------------------------------------

    def _take(self, done: list[tuple[Future, range]], results: list[StageResult]) -> None:
        for (_, positions), result in zip(done, results, strict=True):
            self.replay.add(result, self.refs.marks(positions))  # done() forgets them
            self._taken(result.seconds, positions)

    def _take_second(self, results: list[Any]) -> None:
        assert self.chain is not None
        try:
            result, size = self.chain.take(results)
        except NondeterministicKey as e:  # its states are wrong: no round after it counts
            self.failed = self.failed or e
            self.broken = True
            raise
        if size:  # rounds come back in order: the first items not done
            self._taken(result.seconds, range(self.refs.taken, self.refs.taken + size))
        self.replay.ready.extend(result.events)
        if self.chain.places and self.chain.since_anchor == 0 and not self.closed:
            # An anchor: a cheap moment to see whether the workers changed
            # (a part placed meanwhile on a dead worker's address runs on
            # another: placement only), without waiting for the answer.
            self.client.loop.add_callback(refresh_places, self.client, self.chain)
        self._start_second()

    def forget(self) -> None:
        """End of stream: release every reference, let go of every task (a failed stateful
        stage's states too) and error kept (their tracebacks hold futures); send nothing more."""
        self.closed = True
        self.pending.clear()
        self.refs.release(everything=True)
        self.fetcher.clear()
        self.fetched.clear()
        self.in_flight.clear()
        self.waiting.clear()
        self.warming = []
        self.failed = None
        self.more_failures.clear()
        self.background_errors = []
        if self.chain is not None:
            self.chain.forget()

    def head(self) -> Future | None:
        """The future whose result is needed next, if any."""
        if self.in_flight:
            return self.in_flight[0][0]
        if self.chain is None:
            return None
        head = self.chain.head()
        if head is None and self.draws and self.waiting:
            first = self.waiting[0][0]  # a drawing stage's output, its round not started
            return first if isinstance(first, Future) else None
        return head

    # -- results fetched as tasks finish ------------------------------------------
    # (A synchronous producer waits for them through DrivesSynchronously.)

    def _track(self, future: Future) -> None:
        self.fetcher.add(future)
        if self.as_done:
            self._arm(future)

    def _tracked(self, future: Future) -> bool:
        """Whether ``future``'s result is still to be taken."""
        return ((self.chain is not None and self.chain.holds(future))
                or any(f is future for f, _ in self.in_flight)
                or any(item is future for item, _, _ in self.waiting))

    def store(self, future: Future, result: Any) -> None:
        """Keep a fetched result by its task's key, or raise what the task met.

        A failed task of a stateless stage leaves the queue (its error says
        its batch was not processed): the elements after it go on. A
        stateful stage cannot go on past one: every later call raises it.
        """
        try:
            self.fetched[future.key] = checked(self.label, future, result)
        except DaskTaskError as e:
            item = next((i for i in self.in_flight if i[0] is future), None)
            if item is None:
                self.failed = self.failed or e
                self.broken = True
            else:
                self.in_flight.remove(item)
                self.submitted_elements -= len(item[1])
                self.refs.done(item[1])
            raise

    def _collect(self, block: bool) -> None:
        if self.failed is not None:
            raise self.failed
        if self.more_failures:  # met with an earlier one, raised one a call
            raise self.more_failures.popleft()
        failures: list[DaskTaskError] = []
        for future, result in self.fetcher.next_batch(block=block):
            try:  # every result is kept: one dropped here would never be taken
                self.store(future, result)
            except DaskTaskError as e:
                failures.append(e)
        if failures:
            self.more_failures.extend(failures[1:])
            raise failures[0]

    def head_ready(self) -> bool:
        """Whether the next result to emit has been fetched."""
        if not self.ordered and self.in_flight:
            return any(f.key in self.fetched for f, _ in self.in_flight)
        if self.in_flight:
            return self.in_flight[0][0].key in self.fetched
        if self.chain is not None and not self.chain.rounds:
            head = self.head()  # a drawing stage's output, or nothing
            return head is None or head.key in self.fetched
        return self.chain is None or self.chain.head_in(self.fetched)

    def _take_fetched(self) -> None:
        fetched = self.fetched
        if self.draws:
            self._start_second()  # a round whose input came
        if not self.ordered:
            for item in [i for i in self.in_flight if i[0].key in fetched]:
                self.in_flight.remove(item)
                self._take([item], [fetched.pop(item[0].key)])
        while True:
            if self.in_flight and self.in_flight[0][0].key in fetched:
                future, size = self.in_flight.popleft()
                self._take([(future, size)], [fetched.pop(future.key)])
            elif (not self.in_flight and (chain := self.chain) is not None and chain.rounds
                  and chain.head_in(fetched)):
                self._take_second([fetched.pop(f.key) for f in chain.rounds[0].futures])
            else:
                return

    def poll(self) -> None:
        """Collect finished results at the head, without waiting."""
        self._collect(block=False)
        self._take_fetched()
