"""Operators joining several streams: zip, combine_latest, zip_latest, union.

They receive from several upstreams, so they use ``who`` (the sending
node) and are never fused.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core import Stream
from ..errors import short_repr
from ..metadata import release_refs, retain_refs
from ..pending import gather_pending
from ._checks import check_count

if TYPE_CHECKING:
    from ..spec import NodeSpec, Traits

__all__ = ["CombineLatest", "InterleavedInputs", "Union", "Zip", "ZipLatest"]

logger = logging.getLogger("streams")


def _index_of(node: Stream[Any], who: Stream[Any] | None) -> list[int]:
    """Positions of ``who`` among ``node``'s upstreams (it may appear twice)."""
    found = [i for i, u in enumerate(node.upstreams) if u is who]
    if not found:
        raise ValueError(f"{node._label()} received from {who!r}, which is not its upstream")
    return found


class InterleavedInputs(Stream[Any]):
    """A node whose output depends on how its upstreams' elements interleave.

    Which of two elements of different upstreams comes first changes what
    it emits (``combine_latest``'s latest values, a lookup's table, a join's
    watermark), not only each upstream's own order. Its traits say so
    (:attr:`~streams.spec.Traits.interleaving`): an engine that would
    deliver its inputs apart, each as its results come back, refuses it.

    Examples
    --------
    >>> from streams import Stream
    >>> a, b = Stream(), Stream()
    >>> a.combine_latest(b).describe().traits.interleaving, a.zip(b).describe().traits.interleaving
    (True, False)
    """

    __slots__ = ()

    def _traits(self) -> Traits:
        return replace(super()._traits(), interleaving=True)


@Stream.register_api()
class Zip(Stream[Any]):
    """Pair up elements of several streams, one from each, as tuples.

    Non-stream arguments are literals placed in every tuple.

    Parameters
    ----------
    *upstreams : Stream or object
    maxsize : int
        How far one stream may run ahead of another. On a running loop, a
        buffer holding more than ``maxsize`` makes ``await emit`` wait until
        the other streams catch up (backpressure); synchronously it grows.
        The wait ends too when no partner can come any more: an upstream
        with nothing buffered ended, the stream was removed, or the zip
        closed (streamz's producer waited forever).

    Elements still unpaired at close cannot form a tuple; they are logged as
    a warning with their count, not dropped silently.

    Examples
    --------
    >>> from streams import Stream
    >>> a, b = Stream(), Stream()
    >>> L = a.zip(b, "lit").sink_to_list()
    >>> a.emit(1); a.emit(2); b.emit("x")
    >>> L
    [(1, 'x', 'lit')]
    """

    __slots__ = ("_metadata", "_waiters", "buffers", "literals", "maxsize")
    _operator = "zip"
    _local_only = None
    _params = ("literals", "maxsize")
    _state = ("buffers",)

    def __init__(self, *upstreams: Any, **kwargs: Any) -> None:
        self.maxsize = kwargs.pop("maxsize", 10)
        check_count("zip", "maxsize", self.maxsize)
        # Producers waiting for their buffer to shrink below maxsize (issue 3).
        self._waiters: list[asyncio.Future[bool]] = []
        self.literals = tuple((i, v) for i, v in enumerate(upstreams) if not isinstance(v, Stream))
        streams = [u for u in upstreams if isinstance(u, Stream)]
        if not streams:
            raise TypeError("zip() needs at least one Stream")
        if len(streams) == 1 and self.literals:
            given = ", ".join(repr(v) for _, v in self.literals)
            raise TypeError(
                f"zip() pairs elements of several streams (a.zip(b)), got one stream and "
                f"{given}; to add a constant to each element use map(lambda x: (x, {given}))")
        Stream.__init__(self, upstreams=streams, **kwargs)
        self.buffers: list[deque[Any]] = [deque() for _ in self.upstreams]
        # streamz's metadata of the buffered elements, a deque per buffer
        # kept alongside it; None until an element comes with metadata.
        self._metadata: list[deque[Any]] | None = None

    @classmethod
    def _from_spec(cls, spec: NodeSpec, upstreams: list[Stream[Any]]) -> Stream[Any]:
        # Literal (non-stream) arguments keep their positions among streams.
        parts: list[Any] = list(upstreams)
        for i, value in spec.params["literals"]:
            parts.insert(i, value)
        if spec.stream_name is not None:
            return cls(*parts, maxsize=spec.params["maxsize"], stream_name=spec.stream_name)
        return cls(*parts, maxsize=spec.params["maxsize"])

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        # A stream zipped with itself sends each element once per connection.
        idx = min(_index_of(self, who), key=lambda i: len(self.buffers[i]))
        if metadata is not None or self._metadata is not None:
            self._hold_metadata(idx, metadata)
        self.buffers[idx].append(x)
        if all(self.buffers):
            vals = [b.popleft() for b in self.buffers]
            if self._waiters:
                self._wake()
            if self.literals:
                for i, v in self.literals:
                    vals.insert(i, v)
            if self._metadata is None:
                return self._emit(tuple(vals))
            flat = [m for ms in self._metadata for m in ms.popleft()]
            if not flat:
                return self._emit(tuple(vals))
            try:
                return self._emit(tuple(vals), flat)
            finally:
                release_refs(flat)
        if len(self.buffers[idx]) > self.maxsize:
            return self._room(self.buffers[idx])
        return None

    def _hold_metadata(self, idx: int, metadata: list[Any] | None) -> None:
        """Keep ``metadata`` (refs retained) with the element entering buffer ``idx``."""
        if self._metadata is None:  # the first metadata: earlier elements had none
            self._metadata = [deque([[]] * len(b)) for b in self.buffers]
        retain_refs(metadata)
        self._metadata[idx].append(metadata or [])

    def _room(self, buffer: deque[Any]) -> Any:
        """Backpressure: wait until ``buffer`` is back within ``maxsize``.

        Only on a running loop: a synchronous producer cannot wait for the
        other streams without deadlocking, so there the buffer just grows.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None

        async def wait() -> None:
            while len(buffer) > self.maxsize and self._partner_may_come():
                fut: asyncio.Future[bool] = loop.create_future()
                self._waiters.append(fut)
                if await fut:
                    return  # released: the streams changed (see _remove_upstream)

        return wait()

    def _partner_may_come(self) -> bool:
        """Whether a tuple may still form, so that waiting for room makes sense.

        Not once the zip is closed or an upstream with nothing buffered has
        ended: the producer stops waiting (unpaired elements are reported at
        close).
        """
        if self._closed:
            return False
        return not any(u._closed and not b for u, b in zip(self.upstreams, self.buffers,
                                                            strict=True))

    def _wake(self, release: bool = False) -> None:
        """Wake the producers waiting for room; ``release``: they stop waiting."""
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(release)

    def _add_upstream(self, upstream: Stream[Any]) -> None:
        super()._add_upstream(upstream)
        self.buffers.append(deque())
        if self._metadata is not None:
            self._metadata.append(deque())

    def _remove_upstream(self, upstream: Stream[Any]) -> None:
        i = self.upstreams.index(upstream)
        super()._remove_upstream(upstream)
        del self.buffers[i]
        if self._metadata is not None:
            for ms in self._metadata.pop(i):
                release_refs(ms)
        # The stream a producer waited for may be the one removed (its own
        # buffer too): those waiting go on, as if room had come.
        self._wake(release=True)

    def _on_close(self, who: Stream[Any] | None) -> Any:
        pending = super()._on_close(who)
        if self._waiters:
            self._wake()  # ``who`` has ended: waiting for its elements is over
        return pending

    def _flush(self) -> Any:
        self._wake()  # closed: no room will come
        left = sum(len(b) for b in self.buffers)
        if left:
            held = {i: list(b) for i, b in enumerate(self.buffers) if b}
            logger.warning("%s closed with %d unpaired element(s), by input: %s; they cannot "
                           "form a tuple", self._label(), left, short_repr(held))
        return None


@Stream.register_api()
class CombineLatest(InterleavedInputs):
    """Emit a tuple of the latest element of each stream on every update.

    Parameters
    ----------
    *upstreams : Stream
    emit_on : Stream, int or iterable of them, optional
        Only updates from these upstreams emit (all by default).

    Examples
    --------
    >>> from streams import Stream
    >>> a, b = Stream(), Stream()
    >>> L = a.combine_latest(b, emit_on=a).sink_to_list()
    >>> a.emit(1); b.emit("x"); b.emit("y"); a.emit(2)
    >>> L
    [(2, 'y')]
    """

    __slots__ = ("_emit_on_all", "_metadata", "emit_on", "last", "missing")
    _operator = "combine_latest"
    _local_only = "its output depends on arrival times"
    _params = ("emit_on",)
    _state = ("last", "missing")

    def __init__(self, *upstreams: Stream[Any], **kwargs: Any) -> None:
        emit_on = kwargs.pop("emit_on", None)
        Stream.__init__(self, upstreams=list(upstreams), **kwargs)
        if emit_on is None:
            chosen: tuple[int, ...] = tuple(range(len(upstreams)))
        else:
            items = emit_on if isinstance(emit_on, Iterable) and not isinstance(
                emit_on, Stream) else (emit_on,)
            chosen = tuple(self._position(e) for e in items)
        self.emit_on = chosen
        self._emit_on_all = emit_on is None
        self.last: list[Any] = [None] * len(upstreams)
        self.missing = set(range(len(upstreams)))
        # streamz's metadata of each latest element (refs retained until it
        # is replaced); None until an element comes with metadata.
        self._metadata: list[Any] | None = None

    def _position(self, e: Any) -> int:
        if isinstance(e, int) and not isinstance(e, bool):
            if not 0 <= e < len(self.upstreams):
                raise ValueError(f"combine_latest(): emit_on index {e} is out of range")
            return e
        for i, u in enumerate(self.upstreams):
            if u is e:
                return i
        raise ValueError(f"combine_latest(): emit_on {e!r} is not one of the combined streams")

    def _add_upstream(self, upstream: Stream[Any]) -> None:
        super()._add_upstream(upstream)
        i = len(self.upstreams) - 1
        self.last.append(None)
        if self._metadata is not None:
            self._metadata.append([])
        self.missing.add(i)
        if self._emit_on_all:  # "every upstream emits" includes the new one
            self.emit_on = (*self.emit_on, i)

    def _remove_upstream(self, upstream: Stream[Any]) -> None:
        i = self.upstreams.index(upstream)
        if self.emit_on == (i,):
            raise ValueError(
                f"{self._label()}: cannot remove {upstream!r}, the only stream it emits on"
            )

        def shift(positions: Iterable[int]) -> list[int]:
            return [j - (j > i) for j in positions if j != i]

        del self.last[i]
        if self._metadata is not None:
            release_refs(self._metadata.pop(i))
        self.missing = set(shift(self.missing))
        self.emit_on = tuple(shift(self.emit_on))
        super()._remove_upstream(upstream)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        idx = _index_of(self, who)
        for i in idx:
            self.last[i] = x
            self.missing.discard(i)
        if metadata is not None or self._metadata is not None:
            return self._update_metadata(idx, metadata or [])
        if not self.missing and any(i in self.emit_on for i in idx):
            return self._emit(tuple(self.last))
        return None

    def _update_metadata(self, idx: list[int], metadata: list[Any]) -> Any:
        """``update``'s path once metadata came: each latest element's is held."""
        if self._metadata is None:
            self._metadata = [[] for _ in self.upstreams]
        held = self._metadata
        for i in idx:
            retain_refs(metadata)
            release_refs(held[i])  # the element it replaces is no longer held
            held[i] = metadata
        if self.missing or not any(i in self.emit_on for i in idx):
            return None
        flat = [m for ms in held for m in ms]
        return self._emit(tuple(self.last), flat) if flat else self._emit(tuple(self.last))


@Stream.register_api()
class ZipLatest(InterleavedInputs):
    """Pair every element of the first (lossless) stream with the latest of the others.

    Elements of the lossless stream that arrive before every other stream
    has emitted are buffered and emitted once they all have.

    Examples
    --------
    >>> from streams import Stream
    >>> a, b = Stream(), Stream()
    >>> L = a.zip_latest(b).sink_to_list()
    >>> a.emit(1); a.emit(2); b.emit("x"); a.emit(3)
    >>> L
    [(1, 'x'), (2, 'x'), (3, 'x')]
    """

    __slots__ = ("_lossless_metadata", "_metadata", "last", "lossless_buffer", "missing")
    _operator = "zip_latest"
    _local_only = "its output depends on arrival times"
    _state = ("last", "missing", "lossless_buffer")

    def __init__(self, lossless: Stream[Any], *upstreams: Stream[Any], **kwargs: Any) -> None:
        Stream.__init__(self, upstreams=[lossless, *upstreams], **kwargs)
        self.last: list[Any] = [None] * len(self.upstreams)
        self.missing = set(range(len(self.upstreams)))
        self.lossless_buffer: deque[Any] = deque()
        # streamz's metadata, once an element came with some: of the latest
        # element of each lossy stream (held until replaced), and of each
        # buffered lossless element (held until emitted).
        self._metadata: list[Any] | None = None
        self._lossless_metadata: deque[Any] = deque()

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        idx = _index_of(self, who)
        if metadata is not None or self._metadata is not None:
            self._hold_metadata(idx, metadata or [])
        if 0 in idx:
            self.lossless_buffer.append(x)
        for i in idx:
            self.last[i] = x
            self.missing.discard(i)
        if self.missing:
            return None
        pending = []
        while self.lossless_buffer:
            self.last[0] = self.lossless_buffer.popleft()
            if self._metadata is None:
                pending.append(self._emit(tuple(self.last)))
                continue
            own = self._lossless_metadata.popleft()
            flat = [m for ms in (own, *self._metadata[1:]) for m in ms]
            try:
                pending.append(self._emit(tuple(self.last), flat) if flat
                               else self._emit(tuple(self.last)))
            finally:
                release_refs(own)
        return gather_pending(pending)

    def _hold_metadata(self, idx: list[int], metadata: list[Any]) -> None:
        if self._metadata is None:  # the first metadata: earlier elements had none
            self._metadata = [[] for _ in self.upstreams]
            self._lossless_metadata.extend([] for _ in self.lossless_buffer)
        held = self._metadata
        for i in idx:
            retain_refs(metadata)
            if i == 0:  # held until emitted, then released
                self._lossless_metadata.append(metadata)
            else:  # held until replaced
                release_refs(held[i])
                held[i] = metadata

    def _flush(self) -> Any:
        if self.lossless_buffer:
            logger.warning("%s closed with %d element(s) never paired: %s never emitted",
                           self._label(), len(self.lossless_buffer),
                           [self.upstreams[i] for i in sorted(self.missing)])
        return None


@Stream.register_api()
class Union(Stream[Any]):
    """Merge several streams: every element of each goes downstream.

    Examples
    --------
    >>> from streams import Stream
    >>> a, b = Stream(), Stream()
    >>> L = a.union(b).sink_to_list()
    >>> a.emit(1); b.emit(2)
    >>> L
    [1, 2]
    """

    __slots__ = ()
    _operator = "union"
    _local_only = None

    def __init__(self, *upstreams: Stream[Any], **kwargs: Any) -> None:
        Stream.__init__(self, upstreams=list(upstreams), **kwargs)
