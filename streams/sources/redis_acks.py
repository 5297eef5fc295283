"""When ``from_redis`` acknowledges the entries a consumer group delivered.

:class:`RedisAcks` is the base of :class:`~streams.sources.redis.FromRedis`
that keeps its offset and the ids processed and not yet acknowledged: what
a checkpoint saves and restores, which ids a checkpoint on disk or a
confirmed write releases for ``XACK``, and which entries read again after
a restore are acknowledged without being processed (the delivery
guarantees are described in :mod:`streams.sources.redis`). Reading is the
subclass's business: it calls ``_begin``, ``_batch_done`` and ``_release``
around each batch and sends what ``_acks`` holds.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ..core import Stream
from ..graph import walk
from ..pending import gather_pending as _gather_pending
from ._redis_ids import _id_key, _joined
from .base import Source

__all__ = ["RedisAcks"]


class RedisAcks(Source[Any]):
    """A Redis stream source's offset and acknowledgements (see the module docs)."""

    __slots__ = ("_acks", "_barriers", "_covered", "_deferred", "_floor", "_known",
                 "_restored", "_unconfirmed", "offset", "processed")
    # Set by the subclass: the consumer group (None: XREAD, nothing to acknowledge)
    # and how long another consumer's entries wait before they are claimed.
    group: str | None
    claim_idle: float | None

    def __init__(self, **kwargs: Any) -> None:
        #: The id of the last entry emitted (where an XREAD restart resumes).
        self.offset: str | bytes | None = None
        #: Ids emitted and not yet acknowledged because no checkpoint covers them.
        self.processed: list[Any] = []
        self._acks: list[Any] = []
        self._barriers: list[Stream[Any]] = []
        # Nodes whose writes are sent now and confirmed later (sink_to_redis
        # during a run without a loop); the ids of each batch waiting for
        # their confirmation; the ids each checkpoint taken covers, until it
        # is on disk.
        self._deferred: list[Any] = []
        self._unconfirmed: deque[tuple[list[tuple[Any, int]], list[Any]]] = deque()
        # (sequence, ids, the ids joined by newlines: what a checkpoint saves)
        self._covered: deque[tuple[int, list[Any], Any]] = deque()
        # After a restore: the id of the last entry the checkpoint covers;
        # an entry read again at or below it is not processed again.
        self._floor: tuple[int, int] | None = None
        #: Restored from a checkpoint, not yet started: ``processed`` is the checkpoint's.
        self._restored = False
        # Started again without a restore: the ids processed before, which the
        # next checkpoint covers; read again from the pending list at the
        # start, skipped.
        self._known: set[Any] = set()
        super().__init__(**kwargs)

    def snapshot(self) -> dict[str, Any]:
        """The offset, and every id processed and not yet acknowledged.

        Ids covered by earlier checkpoints still being written count too:
        this checkpoint covers them as well, and may be the one that reaches
        the disk (a newer checkpoint supersedes one still waiting). They are
        saved as strings of newline-separated ids, one per batch: pickling a
        list costs 75 ns an id, a string 10 (ids hold no newline).
        """
        chunks = [joined for _, _, joined in self._covered]
        if self.processed:
            chunks.append(_joined(self.processed))
        return {"offset": self.offset, "processed": chunks, "_acks": list(self._acks)}

    def restore(self, state: dict[str, Any]) -> None:
        """Restore the offset and the ids to acknowledge (chunks or single ids)."""
        super().restore(state)
        self._restored = True
        # What this object held before is the restored checkpoint's business now.
        self._known = set()
        self._covered.clear()
        self._floor = None
        self.processed = [i for chunk in self.processed
                          for i in chunk.split("\n" if isinstance(chunk, str) else b"\n")]
        # Not with claims: an entry claimed from another consumer and not
        # yet processed may lie below the offset (see the module docs).
        if self.group is not None and self.offset is not None and self.claim_idle is None:
            self._floor = _id_key(self.offset)

    def _start_recovery(self) -> None:
        """At a start: acknowledge the ids processed before that nothing waits for.

        After a restore, those the checkpoint covers. Started again (after a
        failure, or ``stop()``), those the last run processed: without a
        checkpoint, their work is done; with one, they wait for the next
        checkpoint, which covers them (acknowledged now, a crash before it
        and a restore from the one before would lose them). Still pending in
        the group, they are read again first, and skipped.
        """
        self._barriers = [n for n in walk(self) if hasattr(n, "_barrier")]
        covered = self._restored or self._checkpointer is None
        self._restored = False
        self._known = set()
        if self.group is None:
            return
        if covered:
            self._acks.extend(self.processed)
            self.processed.clear()
        else:  # still pending in the group: read again, they are not processed twice
            self._known = self._held()

    def _held(self) -> set[Any]:
        """The ids processed and not yet acknowledged: pending in the group, done here."""
        return {*self.processed, *(i for _, ids, _ in self._covered for i in ids),
                *(i for _, ids in self._unconfirmed for i in ids)}

    def _skip_known(self, entries: list[Any], known: set[Any] | None = None) -> list[Any]:
        """``entries`` less those processed before this start, or ``known``.

        The pending entries read again at a start: those of
        :meth:`_start_recovery`; nothing when none was set aside.

        ``XAUTOCLAIM`` hands back this consumer's own pending entries too: an
        entry processed and waiting for a checkpoint to be acknowledged,
        claimed once it is idle for ``claim_idle``, is skipped as well.
        """
        known = self._known if known is None else known
        return [e for e in entries if e[0] not in known] if known else entries

    def _skip_covered(self, entries: list[Any]) -> list[Any]:
        """``entries`` less those delivered again: processed before, by this run or a checkpoint.

        The checkpoint is the truth, whatever the group's pending list says:
        an acknowledgement lost with a restarted server, or a group rolled
        back to an older snapshot, delivers covered entries again. This
        consumer reads its own entries in id order, so an entry at or below
        the checkpoint's offset (the floor) was processed before the
        checkpoint: it is acknowledged, not processed. Likewise an entry at
        or below the offset this run reached: only a group rewound by
        ``XGROUP SETID`` delivers one again (a read of new entries, ``>``,
        otherwise gives ids above all the group delivered). It is skipped;
        if it still waits for its acknowledgement (a checkpoint to cover
        it), that comes as planned, else it is acknowledged again now.
        One comparison a batch when nothing is delivered again.
        """
        floor = self._floor
        done = _id_key(self.offset) if self.offset is not None else None
        top = done if floor is None or (done is not None and done > floor) else floor
        if top is None or _id_key(entries[0][0]) > top:
            return entries
        keep = [e for e in entries if _id_key(e[0]) > top]
        held = self._held()
        self._acks.extend(e[0] for e in entries if _id_key(e[0]) <= top and (
            e[0] not in held or (floor is not None and _id_key(e[0]) <= floor)))
        return keep

    def _batch_done(self, n: int) -> Any:
        """Every element of a batch of ``n`` finished: checkpoint, or flush and ack.

        With a checkpoint, one is taken here when due (``every`` is honoured
        at batch ends: at most ``count - 1`` elements late); it flushes
        buffered output itself, and the acknowledgements wait until it is on
        disk (see ``_release``). Without one, buffered output is written and
        the batch's ids are acknowledged once the writes are confirmed.
        """
        ckpt = self._checkpointer
        if ckpt is not None:
            return ckpt.step(n)
        deferred = self._deferred
        flushed = _gather_pending([b._barrier() for b in self._barriers  # type: ignore[attr-defined]
                                   if b not in deferred])
        sent = [(b, b._barrier_send()) for b in deferred]
        if self.group is not None:
            if sent:
                self._unconfirmed.append((sent, self.processed[:]))
            else:
                self._acks.extend(self.processed)
            self.processed.clear()  # in place: the running loop holds this list
        return flushed

    def _begin(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.begin()

    def _checkpoint_taken(self, sequence: int) -> None:
        # The checkpoint `sequence` covers these ids: acknowledged once it is on disk.
        if self.group is not None and self.processed:
            self._covered.append((sequence, self.processed[:], _joined(self.processed)))
            self.processed.clear()

    def _release(self, final: bool = False) -> None:
        """Move to ``_acks`` the ids whose output is confirmed and, with a checkpoint, durable.

        Called at each read. Writes sent for the batch just processed are
        confirmed at the next read, not this one (their reply is on its way
        while the next batch is processed); ``final`` confirms everything.
        """
        ckpt = self._checkpointer
        if ckpt is not None:
            durable = ckpt.poll()
            covered = self._covered
            while covered and covered[0][0] <= durable:
                self._acks.extend(covered.popleft()[1])
        unconfirmed = self._unconfirmed
        keep = 0 if final else 1
        while len(unconfirmed) > keep:
            sent, ids = unconfirmed[0]
            for node, token in sent:
                node._barrier_confirm(token)
            unconfirmed.popleft()
            self._acks.extend(ids)
