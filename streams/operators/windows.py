"""Count-based grouping: partition, partition_unique, sliding_window.

What a node holds when the stream closes is emitted, never dropped: a
partial partition or an incomplete sliding window goes downstream at close.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import replace
from typing import Any

from toolz import identity

from ..clock import Handle, get_clock
from ..core import Stream
from ..metadata import emit_held, release_refs, retain_refs
from ..pending import emit_each
from ..pending import gather_pending as _gather_pending
from ..spec import Traits
from ._checks import check_count, key_function
from ._outbox import EPSILON, Outbox, arm, armed_here
from .pacing import call_when_free, locked_method, locked_timer

__all__ = ["Partition", "PartitionUnique", "SlidingWindow"]


@Stream.register_api()
class Partition(Stream[Any]):
    """Group elements into tuples of ``n``.

    Parameters
    ----------
    n : int
        Elements per group (at least 1).
    timeout : float, optional
        Emit a partial group this many seconds after its first element. The
        deadline is checked by a timer on the clock (``streams.clock``) and
        whenever an element arrives, so it holds without a running loop too.
        With no loop running, that timer fires on the shared loop thread
        while the producer emits from its own: the node lets one in at a
        time (see :mod:`streams.operators.pacing`), and groups go out in order.
    key : callable or hashable, optional
        Group separately per key (``key(x)`` or ``x[key]``).

    At close, partial groups are emitted (streamz dropped them).

    With a timeout, on a virtual clock:

    >>> from streams import VirtualClock, use_clock
    >>> with use_clock(VirtualClock()) as clock:
    ...     source = Stream()
    ...     T = source.partition(3, timeout=1.0).sink_to_list()
    >>> source.emit("a")
    >>> clock.advance(1.0)
    >>> T
    [('a',)]

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.partition(3).sink_to_list()
    >>> for i in range(7):
    ...     source.emit(i)
    >>> L
    [(0, 1, 2), (3, 4, 5)]
    >>> source.close()
    >>> L
    [(0, 1, 2), (3, 4, 5), (6,)]
    """

    __slots__ = ("_buffer", "_clock", "_key", "_lock", "_metadata", "_outbox", "_started",
                 "_timer", "key", "n", "timeout")
    _operator = "partition"
    _local_only = None
    _graphviz_shape = "diamond"  # as streamz draws it
    _params = ("n", "key", "timeout")
    _state = ("_buffer",)
    _state_params = ("n", "key")  # a timeout changed applies to the groups held

    def __init__(self, upstream: Stream[Any], n: int, timeout: float | None = None,
                 key: Any = None, **kwargs: Any) -> None:
        n = check_count("partition", "n", n)
        if timeout is not None and not timeout > 0:
            raise ValueError(f"partition(): timeout must be > 0 seconds, got {timeout!r}")
        self.n = n
        self.timeout = timeout
        self.key = key
        self._key = None if key is None else key_function(key, self._operator)
        self._buffer: dict[Any, list[Any]] = {}
        # streamz's metadata of the held elements, per group (refs retained).
        self._metadata: dict[Any, list[Any]] = {}
        # Timeout state (issue 3): when each partial group started, in the
        # buffer's insertion order, which is also deadline order.
        self._started: dict[Any, float] = {}
        self._timer: Handle | None = None
        self._clock = get_clock() if timeout is not None else None
        # With a timeout, its timer may fire on the loop thread while its
        # producer emits (see streams.operators.pacing); without, no lock.
        self._lock = threading.RLock() if timeout is not None else None
        self._outbox = Outbox(self)
        Stream.__init__(self, upstream, **kwargs)

    def _traits(self) -> Traits:
        if self.timeout is None:
            return super()._traits()
        return replace(super()._traits(), local_only=(
            "its timeout is wall-clock time in this process; drop the timeout to run it "
            "on an engine"))

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        lock = self._lock  # None without a timeout: no timer, and nothing to pay for one
        if lock is not None and not lock.acquire(False):
            return call_when_free(lock, self.update, x, who, metadata)
        try:
            if self._key is None:
                k = None
            else:
                try:
                    k = self._key(x)
                except Exception as e:
                    return self._fail(x, e)
            expired = None
            if self.timeout is not None:
                assert self._clock is not None
                now = self._clock.now()
                expired = self._expire(self._outbox.emit, now)
            group = self._buffer.get(k)
            if group is None:
                group = self._buffer[k] = []
                if self.timeout is not None:
                    self._started[k] = now
            group.append(x)
            if self.timeout is not None and not armed_here(self._timer):
                # None, or a timer of a loop since closed (fed under one
                # asyncio.run(), then under the next or with no loop): it would
                # never fire. For the oldest group, which may not be this one.
                self._arm_first()
            if metadata:
                retain_refs(metadata)
                self._metadata.setdefault(k, []).append(metadata)
            if len(group) >= self.n:
                del self._buffer[k]
                self._started.pop(k, None)
                return _gather_pending([expired, self._emit_group(k, group, self._outbox.emit)])
            return expired if expired is not None else self._outbox.wait()
        finally:
            if lock is not None:
                lock.release()

    def snapshot(self) -> dict[str, Any]:
        if self._lock is None:
            return super().snapshot()
        assert self._clock is not None
        with self._lock:
            state = super().snapshot()
            # How long each open group has waited: its timeout goes on from
            # there after a restore (the time the pipeline was down does not count).
            now = self._clock.now()
            state["waited"] = {k: now - t for k, t in self._started.items()}
            return state

    def restore(self, state: dict[str, Any]) -> None:
        if self._lock is None:
            super().restore(state)
            return
        with self._lock:
            self._restore(state)

    def _restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._started = {}
        if self._clock is None:
            return
        now = self._clock.now()
        waited = state.get("waited", {})  # none in snapshots of older versions
        for k in sorted(self._buffer, key=lambda k: -waited.get(k, 0.0)):  # deadline order
            self._started[k] = now - waited.get(k, 0.0)
        self._arm_first()

    def _arm_first(self) -> None:
        """Arm the timer for the oldest open group, if any."""
        assert self._clock is not None and self.timeout is not None
        if self._started:
            first = next(iter(self._started.values()))
            self._timer = arm(self._clock, first + self.timeout, self._on_timer)

    def _expire(self, emit: Any, now: float) -> Any:
        """Emit the partial groups whose timeout has passed by ``now``, oldest first."""
        assert self.timeout is not None
        limit = now - self.timeout + EPSILON
        pending = []
        for k, started in list(self._started.items()):
            if started > limit:
                break
            del self._started[k]
            pending.append(self._emit_group(k, self._buffer.pop(k), emit))
        return _gather_pending(pending)

    @locked_timer
    def _on_timer(self, due: float) -> None:
        assert self._clock is not None
        self._expire(self._outbox.send, max(self._clock.now(), due))
        self._arm_first()

    @locked_method
    def _flush(self) -> Any:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        groups, self._buffer = self._buffer, {}
        self._started.clear()
        # No later closing sends what a failure leaves: every group goes.
        emit = self._outbox.emit
        sent = emit_each(lambda k: self._emit_group(k, groups[k], emit),
                         [k for k, g in groups.items() if g])
        return _gather_pending([sent, self._outbox.wait()])

    def _emit_group(self, k: Any, group: list[Any], emit: Any) -> Any:
        """Emit ``group`` with its elements' metadata, if any, then release their refs."""
        held = self._metadata.pop(k, None) if self._metadata else None
        if not held:
            return emit(tuple(group))
        try:
            return emit(tuple(group), [m for ms in held for m in ms])
        finally:
            for ms in held:
                release_refs(ms)


@Stream.register_api()
class PartitionUnique(Stream[Any]):
    """Group elements into tuples of ``n`` elements with distinct keys.

    Parameters
    ----------
    n : int
        Distinct keys per group.
    key : callable or hashable
        ``key(x)`` or ``x[key]``; the element itself by default.
    keep : {"first", "last"}
        Which element to keep when a key repeats within a group.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.partition_unique(2).sink_to_list()
    >>> for x in [1, 1, 2, 3, 3, 4]:
    ...     source.emit(x)
    >>> L
    [(1, 2), (3, 4)]
    """

    __slots__ = ("_buffer", "_key", "_metadata", "keep", "key", "n")
    _operator = "partition_unique"
    _local_only = None
    _graphviz_shape = "diamond"  # as streamz draws it
    _params = ("n", "key", "keep")
    _state = ("_buffer",)

    def __init__(self, upstream: Stream[Any], n: int, key: Any = identity,
                 keep: str = "first", **kwargs: Any) -> None:
        n = check_count("partition_unique", "n", n)
        if keep not in ("first", "last"):
            raise ValueError(f"partition_unique(): keep must be 'first' or 'last', got {keep!r}")
        self.n = n
        self.key = key
        self._key = key_function(key, self._operator)
        self.keep = keep
        self._buffer: dict[Any, Any] = {}
        self._metadata: dict[Any, Any] = {}  # the kept elements' streamz metadata, by key
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            k = self._key(x)
        except Exception as e:
            return self._fail(x, e)
        if self.keep == "last":
            # Re-insert so the group's order reflects the kept elements' order.
            self._buffer.pop(k, None)
            self._buffer[k] = x
            if self._metadata:
                release_refs(self._metadata.pop(k, None))  # the element replaced is done
            self._hold(k, metadata)
        elif k not in self._buffer:
            self._buffer[k] = x
            self._hold(k, metadata)
        if len(self._buffer) == self.n:
            return self._emit_group()
        return None

    def _hold(self, k: Any, metadata: Any) -> None:
        if metadata:
            retain_refs(metadata)  # released once its group is emitted
            self._metadata[k] = metadata

    def _emit_group(self) -> Any:
        result = tuple(self._buffer.values())
        held = [self._metadata[k] for k in self._buffer if k in self._metadata]
        self._buffer.clear()
        self._metadata.clear()
        return emit_held(self._emit, result, held)

    def _flush(self) -> Any:
        if not self._buffer:
            return None
        return self._emit_group()


@Stream.register_api()
class SlidingWindow(Stream[Any]):
    """Emit the last ``n`` elements as a tuple, after every element.

    Parameters
    ----------
    n : int
        Window length (at least 1).
    return_partial : bool
        Also emit the shorter windows before ``n`` elements have arrived
        (the streamz default). With False the output equals
        ``toolz.sliding_window(n, seq)``; if the stream closes before ``n``
        elements arrived, the one partial window is emitted at close.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.sliding_window(2, return_partial=False).sink_to_list()
    >>> for i in range(4):
    ...     source.emit(i)
    >>> L
    [(0, 1), (1, 2), (2, 3)]
    """

    __slots__ = ("_buffer", "_metadata", "n", "return_partial")
    _operator = "sliding_window"
    _local_only = None
    _graphviz_shape = "diamond"  # as streamz draws it
    _params = ("n", "return_partial")
    _state = ("_buffer",)

    def __init__(self, upstream: Stream[Any], n: int, return_partial: bool = True,
                 **kwargs: Any) -> None:
        n = check_count("sliding_window", "n", n)
        self.n = n
        self.return_partial = return_partial
        self._buffer: deque[Any] = deque(maxlen=n)
        # streamz's metadata, one list per element of the window; kept only
        # once an element came with metadata.
        self._metadata: deque[Any] = deque()
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        buf = self._buffer
        buf.append(x)
        if metadata is not None or self._metadata:
            return self._update_metadata(metadata or [])
        if self.return_partial or len(buf) == self.n:
            return self._emit(tuple(buf))
        return None

    def _update_metadata(self, metadata: list[Any]) -> Any:
        held = self._metadata
        while len(held) < len(self._buffer) - 1:  # elements that came without metadata
            held.appendleft([])
        retain_refs(metadata)
        held.append(metadata)
        if not (self.return_partial or len(self._buffer) == self.n):
            return None
        pending = self._emit(tuple(self._buffer), [m for ms in held for m in ms])
        if len(held) == self.n:  # the oldest element is in no later window
            release_refs(held.popleft())
        return pending

    def _flush(self) -> Any:
        if not self.return_partial and 0 < len(self._buffer) < self.n:
            return self._emit(tuple(self._buffer))
        return None
