# mypy: disallow-untyped-calls=False
# (distributed's API is not typed; its calls are checked by the tests.)
"""When a stateful stage's next round leaves: the batches waiting for it, and their input.

Batches cut while the rounds ahead fill :data:`~streams_dask.chain.ROUNDS_AHEAD`
(or while an anchor is on its way) wait in the runner's ``waiting`` queue,
and leave together as one round. A batch whose input is the output of a
stateless stage that may not give the same result twice (see
:class:`~streams_dask.worker.Drawn`) waits until the client has fetched that
output too; the batches behind it wait for it, in order.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from distributed import Future

from .chain import StateChain
from .fetching import BatchNotSent
from .held_refs import HeldRefs
from .worker import Batch

__all__ = ["StartsRounds"]


class StartsRounds:
    """The part of the :class:`~streams_dask.runner.Runner` that starts a chained stage's rounds."""

    # Set by the runner (see its __init__).
    chain: StateChain | None
    waiting: deque[tuple[Any, bool, int]]
    fetched: dict[Any, Any]
    draws: bool
    refs: HeldRefs

    def _not_sent(self, positions: range) -> None:
        raise NotImplementedError

    def _track(self, future: Future) -> None:
        raise NotImplementedError

    def _ready_batches(self) -> list[tuple[Any, bool, int]]:
        """Take the batches at the head of :attr:`waiting` whose input is here.

        A drawing stage's output (see :attr:`draws`) is here once fetched:
        its :class:`~.worker.Batch`, which every part then takes as the
        client sends it. One that does not pickle cannot leave its worker:
        the parts take its future there, as a pure stage's.
        """
        ready = []
        waiting, fetched = self.waiting, self.fetched
        while waiting:
            item, close, size = waiting[0]
            if self.draws and isinstance(item, Future):
                if item.key not in fetched:
                    break
                output = fetched.pop(item.key)
                item = output if isinstance(output, Batch) else item
            waiting.popleft()
            ready.append((item, close, size))
        return ready

    def _start_second(self) -> None:
        chain = self.chain
        if chain is None or not chain.ready() or not self.waiting:
            return
        # Batches that waited (for a round ahead, or an anchor) run as one round.
        waited = self._ready_batches()
        if not waited:
            return
        try:
            self._start_round(chain, waited)
            return
        except BatchNotSent as e:
            error: BatchNotSent | None = e
        # Not sent: then each batch as a round of its own, so that only the one
        # that cannot be pickled is lost. They were the last ones sent, but
        # for those still waiting for their input.
        first = self.refs.last(sum(size for _, _, size in (*waited, *self.waiting))).start
        errors = []
        for i, entry in enumerate(waited if len(waited) > 1 else []):
            if not chain.ready():  # an anchor on its way: the rest wait for it
                self.waiting.extendleft(reversed(waited[i:]))
                break
            try:
                self._start_round(chain, [entry])
            except BatchNotSent as e:
                errors.append(e)
                self._lost(first, entry)
            first += entry[2]
        if len(waited) == 1:
            self._lost(first, waited[0])
        else:
            error = errors[0] if errors else None
            for other in errors[1:]:  # with the first: an asynchronous stream has no later call
                assert error is not None
                error.add_note(f"and another batch was not sent: {other}")
        self._start_second()  # an end of stream that was lost goes on its own
        if error is not None:
            raise error

    def _start_round(self, chain: StateChain, waited: list[tuple[Any, bool, int]]) -> None:
        """Submit the batches ``waited`` (with their end-of-stream flags, sizes) as one round."""
        items = [Batch(item) if isinstance(item, list) else item for item, _, _ in waited]
        arg = items[0] if len(items) == 1 else {"parts": items}
        batch = [x for item, _, _ in waited if isinstance(item, list) for x in item]
        total = sum(size for _, _, size in waited)
        for future in chain.start(batch, arg, total, waited[-1][1]):
            self._track(future)

    def _lost(self, first: int, entry: tuple[Any, bool, int]) -> None:
        """The waited batch ``entry``, at positions from ``first``, was not sent; its end of
        stream (if it carried it) waits to go on its own."""
        _, close, size = entry
        self._not_sent(range(first, first + size))
        if close:
            self.waiting.append(([], True, 0))
