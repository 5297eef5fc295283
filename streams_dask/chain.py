# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""A stateful stage's rounds, chained on the workers: the state stays where it was made.

The chained (second) stage of a segment carries state from batch to batch.
Each batch of it is a *round*: one task per part (for a keyed stage, one
part per worker thread, each over some key groups: see
:mod:`streams_dask.key_groups`; else one part), each taking the state its
part had after the round before, and a merge that puts the parts' events
back in input order. A part's task takes the *future* of the same part's
task of the round before, not a state held by the client: Dask runs it
where that state already is (data locality), and moves the state only if
it must. So a round goes as soon as its batch is cut, behind the ones in
flight (:data:`ROUNDS_AHEAD`), and the client neither waits for a round
before sending the next nor unpickles the states.

* **Events, not states, come back; the client merges them.** A small
  :func:`events_of` task next to each part's result takes its events (which
  a keyed part sorted already), and the client fetches those and merges
  them (:func:`merge_links`): the states stay on their workers. States
  that pickle small (:data:`SMALL_STATES`) come back with the events
  rather than cost a task. No merge task: on a worker it waited for a free
  thread, behind the next round's part task, which held back every round's
  results by a part's run time. A keyed part also says which positions of
  the batch it took; the client checks that each was taken by one part
  (:mod:`streams_dask.taken_positions`), which a key function that gives an
  element another key at another call breaks.
* **A cheap, pure stateless stage before a keyed one runs in each part.**
  The parts of a round read the whole batch anyway (a keyed window needs
  every element's time): each runs the stage before over the batch the
  client pickled, rather than fetch its output from a task of its own
  (pickled on one worker, unpickled on the others), while that costs
  little beside the part's own work (:meth:`StateChain.runs_prefix`). Only
  a stage whose every step is deterministic and free of side effects
  (:func:`~streams_dask.pure_steps.replicable`): each part keeps the key
  groups it owns of what it computed, so a step that salts keys at random
  would lose some elements and duplicate others, and a side effect would
  run once per part. A failure of that stage comes back from the part of
  key group 0 only.
* **The state travels as bytes.** A part's task returns its state
  pickled: the next round's task unpickles its own copy, so a task never
  changes a result that Dask may still hand to another (a recomputation,
  or a copy fetched meanwhile), and the client keeps a state it never
  needs to read as bytes.
* **Anchors: what a lost worker costs.** Every :data:`ANCHOR_EVERY` rounds
  (at the end of stream, and whenever a checkpoint needs the states: see
  :meth:`StateChain.anchor`) a round's states come back to the client with
  its events: an *anchor*. Until then the client holds every part task's
  future since the last anchor, so a worker that dies loses nothing: Dask
  recomputes what it held from those rounds, back to at most the anchor,
  whose states are in the first task after it. That takes every input of
  those tasks giving what it gave the first time: a stateless stage before
  them that is not provably pure (a random key) reaches them as the bytes
  the client fetched of its output, not as a task Dask could run again
  (see :class:`~streams_dask.worker.Drawn`). The round after an anchor
  starts from the anchor's states rather than the futures, which cuts the
  lineage (the scheduler forgets the older tasks); batches cut while an
  anchor is on its way wait for it, and leave together as one round.
"""

from __future__ import annotations

import pickle
import time
from collections import deque
from collections.abc import Callable, Container
from operator import itemgetter
from typing import Any, NamedTuple

from distributed import Future
from distributed.protocol import pickle as dask_pickle

from streams.carried_errors import StateNotPickled, state_not_pickled

from .key_groups import GroupStates, run_key_groups, states_of, updated
from .taken_positions import check_taken
from .worker import Sealed, run_stage, stage_input, unsealed

__all__ = ["ANCHOR_EVERY", "PREFIX_JUDGED_AFTER", "PREFIX_SHARE", "SMALL_STATES", "Link",
           "StateChain", "events_of",
           "merge_links", "run_link"]

#: Rounds between two anchors (client-held copies of the states).
ANCHOR_EVERY = 16

#: Rounds in flight at most: one running, two queued behind it. Batches cut
#: meanwhile wait, and leave together as one round: a round's cost grows
#: with the states it carries (unpickled and pickled again), not only with
#: its elements, so a chain that falls behind catches up with fewer, larger
#: rounds.
ROUNDS_AHEAD = 3

#: A part whose states pickle to at most this many bytes sends them back
#: with its events each round: the client fetches its result directly, with
#: no :func:`events_of` task. A task costs the scheduler, the client and the
#: worker more than moving a few hundred kilobytes of bytes the client does
#: not unpickle (Nexmark q5's open windows: ~250 kB a part). Larger states
#: stay put.
SMALL_STATES = 1024 * 1024

#: The stateless stage before a keyed one runs inside each part while it
#: has cost at most this share of a part's own run time (see
#: :meth:`StateChain.runs_prefix`)...
PREFIX_SHARE = 0.5

#: ...judged once the parts have run this many seconds: before that, the
#: first rounds' one-off costs (unpickling the plans, building the stages)
#: weigh more than the work.
PREFIX_JUDGED_AFTER = 0.05

_by_tag = itemgetter(0)


class Link(NamedTuple):
    """What a part's task of a round returns, or a round's merge.

    ``events`` in order (for a keyed part, ``(tag, event)`` pairs sorted by
    tag, see :func:`~streams_dask.key_groups.run_key_groups`); ``states``: a
    part's states pickled, or for a merge the tuple of every part's (None
    when the states stay on the workers); ``seconds``: the longest part's
    run time; ``state_bytes``: the size of a part's pickled states;
    ``prefix_seconds``: the stateless stage before it, wherever it ran
    (included in ``seconds`` when the part ran it); ``taken``: for a keyed
    part that does not hold every key group, which positions of the batch
    it took, one byte each (see :mod:`streams_dask.taken_positions`).
    """

    events: list[Any]
    states: Any
    seconds: float
    state_bytes: int = 0
    prefix_seconds: float = 0.0
    taken: bytes | bytearray | None = None


def _pickled(states: Any, plan_bytes: bytes) -> bytes | None:
    if states is None:
        return None
    # distributed's pickle: plain pickle, or cloudpickle for what refers to
    # ``__main__`` (a class a script defines would not load on a worker).
    try:
        pickled: bytes = dask_pickle.dumps(states, protocol=5)
    except Exception as e:
        raise _not_pickled(states, plan_bytes, e) from e
    return pickled


def _not_pickled(states: dict[int, Any], plan_bytes: bytes, error: Exception
                 ) -> StateNotPickled:
    """The error naming the node whose state did not pickle (found by pickling each)."""
    names = {op.spec.id: op.spec.name for op in pickle.loads(plan_bytes).ops}
    culprit = next((nid for nid, state in states.items() if not _pickles(state)), None)
    return state_not_pickled(names.get(culprit, "a stateful step"), error)


def _pickles(state: Any) -> bool:
    try:
        dask_pickle.dumps(state, protocol=5)
    except Exception:
        return False
    return True


def _loaded(states: bytes | None) -> Any:
    return None if states is None else pickle.loads(states)


def run_link(plan_bytes: bytes, items: Any, groups: tuple[int, ...] | None,
             before: Link | Sealed, close: bool, prefix: bytes | None = None) -> Link:
    """Run one part of a round; a Dask task function.

    ``before`` is the same part's :class:`Link` of the round before (a
    future, resolved by Dask), or the anchor's pickled states in a
    :class:`~streams_dask.worker.Sealed`. ``groups`` are the part's key
    groups, None for a stage that runs as one. ``prefix``: the stateless
    stage before, which the part runs over a batch it is given as sent
    (see :func:`~streams_dask.worker.stage_input`).
    """
    started = time.perf_counter()
    states = _loaded(before.states if isinstance(before, Link) else unsealed(before))
    elements, prefix_seconds = stage_input(items, prefix)
    taken = None
    if groups is None:
        result = run_stage(plan_bytes, elements, states, close)
        after = result.states
    else:
        result, taken = run_key_groups(plan_bytes, elements, groups, states, close)
        after = updated(states, result.states)
        # Sorted here, where the parts run at once: the client's merge of
        # sorted parts is then a linear pass.
        result.events.sort(key=_by_tag)
    pickled = _pickled(after, plan_bytes)
    return Link(result.events, pickled, time.perf_counter() - started,
                len(pickled or b""), prefix_seconds, taken)


def events_of(link: Link) -> Link:
    """A part's events without its states: what the client fetches of a round
    when the states are not small."""
    return link._replace(states=None)


def merge_links(*links: Link, tagged: bool = True, with_states: bool = False,
                with_events: bool = True) -> Link:
    """The parts of a round as one: events in input order, states if asked for.

    Run on the client. Parts' events that tie keep the parts' order
    (failures carried from an earlier stage are in part 0).

    >>> merge_links(Link([(0, "a"), (2, "c")], b"s0", 0.5), Link([(1, "b")], b"s1", 0.25),
    ...             with_states=True)[:3]
    (['a', 'b', 'c'], (b's0', b's1'), 0.5)
    """
    events: list[Any] = []
    if with_events:
        for link in links:
            events.extend(link.events)
        if tagged:
            if len(links) > 1:
                events.sort(key=_by_tag)  # sorted runs: merged in one pass
            events = [e for _, e in events]
    states = tuple(link.states for link in links) if with_states else None
    return Link(events, states, max((link.seconds for link in links), default=0.0))


class _Round(NamedTuple):
    futures: list[Future]  # one per part: its events (and states, for an anchor)
    size: int  # elements
    anchoring: bool
    with_events: bool


class StateChain:
    """The rounds of a chained stage in flight, and the states they carry.

    Parameters
    ----------
    submit : callable
        ``submit(batch, func, *args, **kwargs) -> Future``: submits a task
        (``batch``: its elements, to name one that does not pickle).
    plan : bytes
        The stage's pickled plan.
    parts : list of tuple of int, optional
        The key groups of each part (one part per worker thread); None for
        a stage that runs as one task per round.
    prefix : bytes, optional
        The pickled plan of the stateless stage before, for the parts to
        run over the batches themselves (see :meth:`runs_prefix`): only
        for a stage every part computes alike
        (:func:`~streams_dask.pure_steps.replicable`). None: the batches
        come as that stage's results (their futures, or for a stage that
        may not give the same result twice, the bytes the client fetched).
    """

    def __init__(self, submit: Callable[..., Future], plan: bytes,
                 parts: list[tuple[int, ...]] | None, prefix: bytes | None = None) -> None:
        self.submit = submit
        self.plan = plan
        self.prefix = prefix
        #: Run time of the stateless stage before, and of the longest part
        #: without it, summed over the rounds taken (see :meth:`runs_prefix`).
        self.prefix_seconds = 0.0
        self.part_seconds = 0.0
        self.parts: list[tuple[int, ...] | None] = list(parts) if parts else [None]
        self.keyed = parts is not None
        #: The anchor: each part's states, pickled (None: none yet).
        self.anchored: list[bytes | None] = [None] * len(self.parts)
        #: The last round's part tasks; None: the next round starts at the anchor.
        self.links: list[Future] | None = None
        #: Every part task since the anchor: held, so that Dask keeps their
        #: results, and recomputes from them what a lost worker held.
        self.held: list[Future] = []
        self.rounds: deque[_Round] = deque()
        self.since_anchor = 0
        #: An anchor is on its way: no round leaves before it is back.
        self.stalled = False
        #: Worker addresses, one per thread: part ``i`` prefers the ``i``-th.
        self.places: list[str] = []
        #: The size of each part's pickled states, when last seen.
        self.state_bytes = [0] * len(self.parts)

    # -- the states, for checkpoints ---------------------------------------

    @property
    def states(self) -> dict[int, Any] | None:
        """The states at the anchor, by node id (None: none yet)."""
        if not self.keyed:
            return _loaded(self.anchored[0])  # type: ignore[no-any-return]
        states: dict[int, GroupStates] | None = None
        for part in self.anchored:
            states = updated(states, _loaded(part))
        return states

    @states.setter
    def states(self, states: dict[int, Any] | None) -> None:
        self.anchored = [
            _pickled(states if groups is None else states_of(states, groups), self.plan)
            for groups in self.parts]
        self.state_bytes = [len(s or b"") for s in self.anchored]

    # -- rounds ---------------------------------------------------------------

    def head(self) -> Future | None:
        """A future of the next round to take, if any."""
        return self.rounds[0].futures[0] if self.rounds else None

    def head_in(self, fetched: Container[str]) -> bool:
        """Whether every result of the next round is among the ``fetched`` keys."""
        return not self.rounds or all(f.key in fetched for f in self.rounds[0].futures)

    def unfinished(self, fetched: Container[str]) -> int:
        """Rounds with a result not among the ``fetched`` keys."""
        return sum(any(f.key not in fetched for f in r.futures) for r in self.rounds)

    def ready(self) -> bool:
        """Whether a round may leave now (else its batches wait, to leave as one)."""
        return not self.stalled and len(self.rounds) < ROUNDS_AHEAD

    def runs_prefix(self) -> bool:
        """Whether the next round's parts run the stateless stage before them.

        Each part then runs it over the whole batch, the client's bytes:
        no task of its own, and no transfer of its output (pickled on one
        worker, unpickled by the parts on the others), for the price of
        running it once per part. Worth it while it costs a small share of
        a part's run time (:data:`PREFIX_SHARE`), as a filter before a
        keyed window does; a costly step (a parser) runs once, in a task
        of its own, and the parts take its result, as does any stage that
        is not provably pure (then :attr:`prefix` is None).
        """
        return self.prefix is not None and (
            self.part_seconds < PREFIX_JUDGED_AFTER
            or self.prefix_seconds <= PREFIX_SHARE * self.part_seconds)

    def holds(self, future: Future) -> bool:
        """Whether ``future`` is a round's result still to be taken."""
        return any(f is future for r in self.rounds for f in r.futures)

    def start(self, batch: list[Any], items: Any, size: int, close: bool) -> list[Future]:
        """Submit a round over ``items`` (a batch, or first-stage futures).

        The round is an anchor every :data:`ANCHOR_EVERY` rounds and at the
        end of stream; the caller submits no other round until it is taken.
        """
        assert self.ready(), "a round submitted while an anchor is on its way"
        before: list[Any] = (self.links if self.links is not None
                             else [Sealed(s) for s in self.anchored])
        links = [self.submit(batch, run_link, self.plan, items, groups, prev, close,
                             self.prefix, **self._place(i))
                 for i, (groups, prev) in enumerate(zip(self.parts, before, strict=True))]
        self.links = links
        self.held.extend(links)
        self.since_anchor += 1
        anchoring = close or self.since_anchor >= ANCHOR_EVERY
        return self._round(links, size, anchoring, with_events=True)

    def _place(self, part: int) -> dict[str, Any]:
        # Each part on a worker of its own, the same from round to round: by
        # data locality alone, a part whose batch (a first stage's result)
        # weighs more than its state would follow the batch, and two parts
        # could share one worker. Loosely: if that worker is gone, any other
        # (and if none runs when the task is ready, see :mod:`.placement`).
        if not self.places:
            return {}
        return {"workers": [self.places[part % len(self.places)]],
                "allow_other_workers": True}

    def _round(self, links: list[Future], size: int, anchoring: bool,
               with_events: bool) -> list[Future]:
        """The futures the client fetches of a round: its parts' events, or for
        an anchor (or small states) the parts' results themselves."""
        futures = links
        if not anchoring:
            # The events alone leave the parts' workers; the states stay.
            futures = [link if size <= SMALL_STATES else self.submit([], events_of, link)
                       for link, size in zip(links, self.state_bytes, strict=True)]
        self.rounds.append(_Round(futures, size, anchoring, with_events))
        self.stalled = self.stalled or anchoring
        return futures

    def anchor(self) -> list[Future] | None:
        """Bring the states after the last round back to the client, if they are not.

        For a checkpoint, once every round is taken. Returns the futures
        that bring them (a round of no elements), or None.
        """
        if self.links is None or self.stalled:
            return None
        return self._round(self.links, 0, anchoring=True, with_events=False)

    def take(self, results: list[Link]) -> tuple[Link, int]:
        """The head round's results taken (one per part, in order): the round
        as one :class:`Link` (see :func:`merge_links`) and its number of elements.

        Raises :class:`~streams_dask.taken_positions.NondeterministicKey` if
        the parts of a keyed round did not take each element exactly once
        (a key function that gave an element another key at another call):
        its events would double some elements and lose others.
        """
        done = self.rounds.popleft()
        if done.with_events and self.keyed:  # (an anchor of no elements: a round checked)
            check_taken([r.taken for r in results], self.plan)
        self.state_bytes = [r.state_bytes for r in results]
        if done.with_events:  # an anchor of no elements returns the last round's again
            self.prefix_seconds += max(r.prefix_seconds for r in results)
            self.part_seconds += max(r.seconds - r.prefix_seconds for r in results)
        result = merge_links(*results, tagged=self.keyed, with_states=done.anchoring,
                             with_events=done.with_events)
        if done.anchoring:
            self.anchored = list(result.states)
            # The next round starts at the anchor: the older tasks may go.
            self.links = None
            self.held = []
            self.since_anchor = 0
            self.stalled = False
        return result, done.size

    def forget(self) -> None:
        """Let go of every task: the stream ended (after a failed round, some
        are still held, and with them the states on the workers)."""
        self.rounds.clear()
        self.held = []
        self.links = None

    def futures(self) -> list[Future]:
        """Every future the chain holds (the rounds' and the parts' since the anchor)."""
        return [f for r in self.rounds for f in r.futures] + self.held
