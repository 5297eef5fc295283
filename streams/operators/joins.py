"""The keyed join of two streams on event time: ``join`` (an interval join).

``join`` pairs the elements of two streams whose keys are equal and whose
event times are close, holding each side only as long as the other side's
watermark says a partner may still come (``lookup``, the join to a changing
table, is in :mod:`streams.operators.lookup`).

It receives from two upstreams (it uses ``who``) and is never fused. On
engines: a Dask segment runs it when both sides branch from one
``scatter()`` (its ordered stage runs this class over each batch, the state
carried from batch to batch, so the result is the in-process one). On
Spark, ``join`` of two Spark-resident inputs (each side from
``Stream.from_spark(df)`` through steps without state, ending in
``to_dataframe(schema)``) becomes Spark's stream-stream join under
watermarks, declared by the join's ``Traits.join`` (see
:mod:`streams_spark.join`); a ``to_spark()`` segment, one linear chain,
refuses it. Every refusal is raised when the graph is built, naming the
node and saying what to do.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..core import Stream
from ..errors import short_repr
from ..metadata import release_refs, retain_refs
from ..pending import emit_each
from ..spec import JoinTime, Traits
from ._checks import key_function, one_key
from ._late import LateElementError, LateSide, seconds_of
from .combine import InterleavedInputs
from .durations import check_interval
from .window_bounds import event_micros, micros_of, seconds, watermark_micros

__all__ = ["IntervalJoin"]


def _sides(op: str, name: str, value: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """Left and right functions from one key (or time) for both, or a pair of them."""
    if value is None:
        raise TypeError(f"{op}(): {name}= is required; give a function (or an item key) "
                        f"for both sides, or a pair ({name}_of_left, {name}_of_right)")
    if isinstance(value, tuple | list) and not callable(value):
        if len(value) != 2:
            raise ValueError(f"{op}(): {name}= as a sequence must be a pair (left, right), "
                             f"got {len(value)} items: {short_repr(value)}")
        return key_function(value[0], op, name), key_function(value[1], op, name)
    one = key_function(value, op, name)
    return one, one


def _pair(value: Any) -> tuple[Any, Any]:
    """``(left, right)`` of a key (or time) given for both sides or as a pair."""
    if isinstance(value, tuple | list) and not callable(value):
        return value[0], value[1]
    return value, value


def _two_streams(op: str, first: Stream[Any], second: Any, what: str) -> None:
    if not isinstance(second, Stream):
        raise TypeError(f"{op}(): {what} must be a Stream, got {short_repr(second)} "
                        f"({type(second).__name__})")
    if second is first:
        raise ValueError(f"{op}(): both inputs are {first._label()}; to join a stream with "
                         f"itself, join it with a pass-through branch of it: "
                         f"s.{op}(Stream(s), ...)")


@Stream.register_api(attribute_name="join")
class IntervalJoin(LateSide, InterleavedInputs):
    """Pair the elements of two streams with equal keys and event times ``within`` apart.

    Emits ``(l, r)`` for every element ``l`` of this stream (the left) and
    ``r`` of ``right`` with ``key(l) == key(r)`` and ``|time(l) - time(r)| <=
    within``, the times compared to the microsecond, as windows cut them
    (and Spark keeps timestamps): ``within=0.3`` pairs times 0.8 and 1.1,
    whose difference as floats is 0.30000000000000004. A pair is emitted
    when the later of its two elements arrives;
    an arriving element is paired with the held elements of the other side
    in the order they arrived. So the output order is fixed by the order of
    arrival alone.

    Each side's watermark is the largest event time it has seen minus
    ``lateness``; the join's watermark is the smaller of the two (minus
    infinity until both sides have emitted), to the microsecond too. An
    element older than ``watermark - within`` can meet no partner that is
    not late, so it is
    dropped from the state: what the join holds is bounded by the
    watermark (:attr:`held` counts it). An element whose event time is
    below the watermark is late (some of its partners may be gone): it is
    not joined, and goes to :attr:`late` if something is connected there,
    else to the node's error policy as a
    :class:`~streams.operators._late.LateElementError`; never silently
    dropped.

    Parameters
    ----------
    right : Stream
        The other stream; its elements come second in each pair.
    key : callable or item key, or a pair of them
        ``key(x)`` (or ``x[key]``) on both sides, or ``(left_key,
        right_key)``: a tuple or list of two is always such a pair.
    within : float or str
        The largest distance between the two event times of a pair, in
        seconds (``0`` joins equal times; ``"500ms"``, ``"2s"``...).
    time : callable or item key, or a pair of them
        An element's event time, a number of seconds or a ``datetime``;
        as ``key``, one for both sides or ``(left_time, right_time)``.
    lateness : float or str
        How far behind the largest event time seen on a side an element
        may be and still be joined completely.

    Elements held at close have met every partner they could: nothing is
    emitted then. Once one side closes, the other side's elements are
    paired with what the join holds and not kept (no partner will come).
    On Dask, with both sides branching from one ``scatter()``, the result
    is the in-process one.

    On Spark, between two inputs that start at ``Stream.from_spark(df)``
    (static or streaming), through steps without state, and ending in
    ``to_dataframe(schema)``, it runs as Spark's stream-stream join: each
    side under ``withWatermark(time, lateness)``, joined on the key (its
    pickle, as for keyed windows) and their timestamps (microseconds) at
    most ``within`` apart. With event times in order on each side, or out
    of order by at most ``lateness``, the pairs are the in-process ones, as
    a multiset (a DataFrame has no order). Late elements differ: Spark has
    no way to :attr:`late`; it joins a late row with the partners its state
    still holds (missing those it has forgotten), or drops it behind the
    watermark of the micro-batch before, where in-process a late element is
    not joined at all. That watermark stands at the epoch until Spark has
    one: a streaming join drops times of 0 and less (1970-01-01 and before)
    in its first micro-batches, which in-process are joined. For a
    streaming input each micro-batch bringing such rows is logged as a
    warning naming this node and the earliest of them. A connected
    :attr:`late`, a step with state before the join or after it, a union on
    either side, a second join on the path, ``gather()`` after it (Spark
    gives the pairs in no order) and a ``to_spark()`` segment are refused
    when the graph is built, each saying what to do.

    Examples
    --------
    Views and clicks of an ad, ``(ad, time)``, joined when a click comes at
    most 10 seconds from a view:

    >>> from streams import Stream
    >>> views, clicks = Stream(), Stream()
    >>> joined = views.join(clicks, key=0, within=10, time=1)
    >>> pairs = joined.sink_to_list()
    >>> views.emit(("ad1", 100)); views.emit(("ad2", 105))
    >>> clicks.emit(("ad1", 104)); clicks.emit(("ad2", 130)); clicks.emit(("ad1", 108))
    >>> pairs
    [(('ad1', 100), ('ad1', 104)), (('ad1', 100), ('ad1', 108))]

    The watermark is the views' 105: nothing before 95 was forgotten yet.
    A view at 120 moves it to 120, and elements before 110 are forgotten;
    a view at 90 is then late:

    >>> joined.held
    5
    >>> views.emit(("ad1", 120))
    >>> joined.held, joined.watermark
    (2, 120.0)
    >>> late = joined.late.sink_to_list()
    >>> views.emit(("ad1", 90))
    >>> late
    [('ad1', 90)]
    """

    # _meta: streamz's metadata of held elements (refs retained), by arrival
    # number; None until an element comes with some (no state: refs are local).
    __slots__ = ("_ended", "_heaps", "_key_of", "_late_us", "_mark_us", "_max_time",
                 "_meta", "_seq", "_sides", "_time_of", "_units", "_within_us", "key",
                 "lateness", "time", "within")
    _operator = "join"
    # Both sides from one scatter(), a Dask stage runs it as here, in order, its
    # state carried from batch to batch; Spark runs its own stream-stream join
    # from the traits (Traits.join), between Spark-resident inputs only.
    _local_only = None
    _params = ("key", "within", "time", "lateness")
    _state = ("_sides", "_heaps", "_max_time", "_seq", "_units")
    _state_added = ("_units",)  # older checkpoints held seconds: see restore()

    def __init__(self, left: Stream[Any], right: Stream[Any], key: Any, within: float | str,
                 time: Any, lateness: float | str = 0.0, **kwargs: Any) -> None:
        op = "join"
        _two_streams(op, left, right, "right")
        self.key = key
        self.time = time
        self._key_of = _sides(op, "key", key)
        self._time_of = _sides(op, "time", time)
        self.within = check_interval(op, within, "within", zero=True)
        self.lateness = check_interval(op, lateness, "lateness", zero=True)
        self._within_us = micros_of(op, "within", self.within, zero=True)
        self._late_us = micros_of(op, "lateness", self.lateness, zero=True)
        # Per side: key -> {arrival number: (microsecond, element)} (dicts keep
        # arrival order), and a heap of (microsecond, arrival number, key) to
        # forget the oldest elements first without scanning every key.
        self._sides: tuple[dict[Any, dict[int, tuple[int, Any]]], ...] = ({}, {})
        self._heaps: tuple[list[tuple[int, int, Any]], ...] = ([], [])
        self._max_time = [-math.inf, -math.inf]
        self._mark_us = -math.inf  # the watermark's microsecond
        self._seq = 0
        self._units = "micros"  # in checkpoints: older ones held the times in seconds
        self._ended = [False, False]  # per side: its upstream has closed
        self._meta: dict[int, list[Any]] | None = None
        Stream.__init__(self, upstreams=[left, right], **kwargs)

    def _traits(self) -> Traits:
        return replace(super()._traits(), join=JoinTime(
            _pair(self.key), _pair(self.time), self.within, self.lateness))

    @property
    def held(self) -> int:
        """How many elements (of both sides) the join holds in its state."""
        return len(self._heaps[0]) + len(self._heaps[1])

    @property
    def watermark(self) -> float:
        """The smaller of the two sides' watermarks (to the microsecond); earlier times are late."""
        return float(seconds(self._mark_us))

    def _add_upstream(self, upstream: Stream[Any]) -> None:
        raise ValueError(f"{self._label()} joins exactly two streams; it cannot take "
                         f"{upstream._label()} as a third (union() them first)")

    # The sides are read from upstreams, not kept apart: an engine that runs the
    # join here puts a gather() in place of an upstream (streams.segment.join_here).
    @property
    def _left(self) -> Stream[Any]:
        return self.upstreams[0]

    @property
    def _right(self) -> Stream[Any]:
        return self.upstreams[1]

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if who is self._left:
            side = 0
        elif who is self._right:
            side = 1
        else:
            raise ValueError(f"{self._label()} received from {who!r}, which is not its upstream")
        try:
            k = one_key(self._key_of[side](x))
            t = seconds_of(self._time_of[side](x))
            us = event_micros(t)
            hash(k)
        except Exception as e:
            return self._fail(x, e)
        if us < self._mark_us:
            watermark = self.watermark
            return self._fail(x, LateElementError(
                f"event time {t!r} is below the watermark {watermark!r} (the smaller of the "
                f"two sides' largest times seen, {min(self._max_time)!r}, - lateness "
                f"{self.lateness!r}): partners within {self.within!r} may already be "
                "forgotten; raise lateness= to accept it"))
        within = self._within_us
        partners = self._sides[1 - side].get(k)
        pairs = [(x, other) if side == 0 else (other, x) for up, other in partners.values()
                 if abs(us - up) <= within] if partners else None
        # Held, and the watermark moved, before its pairs go: a pair failing
        # downstream leaves it held for the partners still to come. What
        # this forgets cannot pair with it: the watermark stays at or below it.
        if not self._ended[1 - side]:  # else no partner will come for it
            if metadata:  # held with x, its refs retained until x is forgotten
                retain_refs(metadata)
                if self._meta is None:
                    self._meta = {}
                self._meta[self._seq] = metadata
            self._hold(side, k, us, x)
        if t > self._max_time[side]:
            self._max_time[side] = t
            self._mark_us = watermark_micros(min(self._max_time), self._late_us)
            self._forget(self._mark_us - self._within_us)
        if not pairs:
            return None
        if metadata or self._meta:
            return self._emit_held(x, side, us, partners or {}, metadata)
        # Every pair goes, even after one fails downstream; the first failure is raised.
        return emit_each(self._emit, pairs)

    def _emit_held(self, x: Any, side: int, us: int, partners: dict[int, tuple[int, Any]],
                   metadata: Any) -> Any:
        """The pairs of ``x``, as ``update`` makes them, each with its two elements' metadata."""
        own, held, within = metadata or [], self._meta or {}, self._within_us
        out = [((x, other), own + (held.get(seq) or [])) if side == 0 else
               ((other, x), (held.get(seq) or []) + own)  # in the pair's order
               for seq, (up, other) in partners.items() if abs(us - up) <= within]
        return emit_each(lambda p: self._emit(*p) if p[1] else self._emit(p[0]), out)

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("_units") != "micros":  # a checkpoint from before: times in seconds
            state = {**state, "_units": "micros",
                     "_sides": tuple({k: {seq: (event_micros(t), x) for seq, (t, x) in held.items()}
                                      for k, held in side.items()} for side in state["_sides"]),
                     "_heaps": tuple([(event_micros(t), seq, k) for t, seq, k in heap]
                                     for heap in state["_heaps"])}  # still heaps: same order
        for held in self._sides:  # replaced: their refs go (arrival numbers start again)
            self._release(held)
        super().restore(state)
        self._mark_us = watermark_micros(min(self._max_time), self._late_us)

    def _on_close(self, who: Stream[Any] | None) -> Any:
        # An ended side sends no partners: the other side's held elements go, its later
        # ones are paired, not held. The watermark stays; the state no longer grows.
        for side, upstream in enumerate((self._left, self._right)):
            if who is upstream and not self._ended[side]:
                self._ended[side] = True
                self._release(self._sides[1 - side])
                self._sides[1 - side].clear()
                self._heaps[1 - side].clear()
        return super()._on_close(who)

    def _flush(self) -> Any:
        for held in self._sides:  # closed: it met every partner it could
            self._release(held)

    def _release(self, held: dict[Any, dict[int, tuple[int, Any]]]) -> None:
        """Release the metadata refs of the elements ``held`` (one side's)."""
        if self._meta:
            for of_key in held.values():
                for seq in of_key:
                    release_refs(self._meta.pop(seq, None))

    def _hold(self, side: int, k: Any, us: int, x: Any) -> None:
        seq = self._seq
        self._seq += 1
        self._sides[side].setdefault(k, {})[seq] = (us, x)
        heapq.heappush(self._heaps[side], (us, seq, k))

    def _forget(self, cutoff: float) -> None:
        """Drop the elements before the microsecond ``cutoff``: no element on time can meet them."""
        for side, heap in enumerate(self._heaps):
            held = self._sides[side]
            while heap and heap[0][0] < cutoff:
                _, seq, k = heapq.heappop(heap)
                of_key = held[k]
                del of_key[seq]
                if not of_key:
                    del held[k]
                if self._meta:
                    release_refs(self._meta.pop(seq, None))
