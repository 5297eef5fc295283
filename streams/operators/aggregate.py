"""Stateful operators over one stream: scan, frequencies, slice, unique, collect.

Their state is named in ``_state`` so that ``snapshot()``/``restore()`` and
checkpoints capture it.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, ClassVar

from toolz import identity

from ..core import NO_DEFAULT, Stream
from ..errors import short_repr
from ..fusion import Fuser, recompiled_when_set
from ..metadata import release_refs, retain_refs
from ..pending import failing_after, gather_pending
from ._checks import check_callable, check_count, check_keywords, key_function, one_key
from .expiry import ExpiringKeys, Expiry, check_ttl

__all__ = ["Accumulate", "Collect", "Frequencies", "Slice", "Unique"]


@Stream.register_api()
class Accumulate(ExpiringKeys):
    """Accumulate a running state and emit it: a running reduction.

    ``scan`` is the same operator.

    Parameters
    ----------
    func : callable
        ``func(state, x, **kwargs)`` returns the new state (or, with
        ``returns_state=True``, a ``(state, output)`` pair).
    start : object, optional
        The initial state. Without it, the first element becomes the state
        and is emitted as is (as ``itertools.accumulate`` does).
    returns_state : bool
        ``func`` returns ``(new_state, output)``.
    with_state : bool
        Emit ``(state, output)`` instead of ``output``.
    key : callable or hashable, optional
        Keep one state per key (``key(x)``, or ``x[key]`` if not callable),
        each starting from a copy of ``start``, and emit ``(key, output)``.
        (New here: streamz would pass a ``key=`` keyword on to ``func``.)
    ttl : float or str, optional
        With ``key``: drop a key's state once the event time (the largest
        ``time(x)`` seen, all keys together) is more than ``ttl`` seconds
        past that key's last element; its next element starts from
        ``start`` again. See :mod:`streams.operators.expiry`.
    time : callable or hashable, optional
        With ``ttl``: ``time(x)`` (or ``x[time]``), the element's event time
        in seconds (or a ``datetime``).

    Examples
    --------
    >>> from operator import add
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.scan(add, start=0).sink_to_list()
    >>> for i in range(4):
    ...     source.emit(i)
    >>> L
    [0, 1, 3, 6]

    One running sum per key:

    >>> source = Stream()
    >>> L = source.scan(lambda s, x: s + x[1], start=0, key=0).sink_to_list()
    >>> for x in [("a", 1), ("b", 5), ("a", 2)]:
    ...     source.emit(x)
    >>> L
    [('a', 1), ('b', 5), ('a', 3)]

    Forgetting a key after 10 seconds of event time without it:

    >>> source = Stream()
    >>> L = source.scan(lambda s, x: s + x[2], start=0, key=0, ttl=10, time=1).sink_to_list()
    >>> for x in [("a", 0, 1), ("b", 5, 1), ("a", 8, 1), ("b", 20, 1), ("a", 21, 1)]:
    ...     source.emit(x)
    >>> L
    [('a', 1), ('b', 1), ('a', 2), ('b', 1), ('a', 1)]
    """

    __slots__ = (
        "_expiry",
        "_func",
        "_key",
        "args",
        "key",
        "kwargs",
        "returns_state",
        "start",
        "state",
        "time",
        "ttl",
        "with_state",
    )
    #: The initial state; shadows ``Stream.start()`` on this node, as in streamz.
    start: Any
    _func: Any
    func = recompiled_when_set("_func", "The function of (state, x).")
    _operator = "accumulate"
    _takes_function = True
    _local_only = None
    _graphviz_shape = "box"  # as streamz draws it
    _params: ClassVar[tuple[str, ...]] = (
        "start", "returns_state", "with_state", "key", "ttl", "time", "args", "kwargs")
    _state = ("state",)

    def __init__(self, upstream: Stream[Any], func: Callable[..., Any], start: Any = NO_DEFAULT,
                 returns_state: bool = False, stream_name: str | None = None,
                 with_state: bool = False, key: Any = None, ttl: float | str | None = None,
                 time: Any = None, **kwargs: Any) -> None:
        # scan and accumulate are one operator: a message names both.
        check_callable("scan", func, "a function of (state, x) as its first argument "
                       "(accumulate() is the same operator)", "lambda state, x: state + x, start=0")
        self._expiry: Expiry | None = check_ttl("scan", ttl, time, key)
        check_keywords("scan", func, kwargs, ("start", "returns_state", "stream_name",
                                              "with_state", "key", "ttl", "time"))
        self.ttl = ttl
        self.time = time
        self.func = func
        self.start = start
        self.returns_state = returns_state
        self.with_state = with_state
        self.key = key
        self._key = None if key is None else key_function(key, "scan")
        self.args = ()
        self.kwargs = kwargs
        self.state: Any = {} if key is not None else start
        Stream.__init__(self, upstream, stream_name=stream_name)

    def _step(self, state: Any, x: Any) -> tuple[Any, Any]:
        """One step: the new state and the output, from the old state."""
        if state is NO_DEFAULT:
            return x, x
        result = self._func(state, x, **self.kwargs)
        if self.returns_state:
            try:
                new, out = result
            except (TypeError, ValueError):
                raise TypeError(f"with returns_state=True the function must return "
                                f"(new_state, output), got {short_repr(result)}") from None
            return new, out
        return result, result

    def _advance(self, x: Any) -> Any:
        """Take ``x`` into the state; return what to emit (may raise)."""
        if self._key is None:
            self.state, out = self._step(self.state, x)
            state = self.state
        else:
            k = one_key(self._key(x))
            if self._expiry is not None:
                for gone in self._expiry.advance(k, self._expiry.seconds(x)):
                    self.state.pop(gone, None)
            old = self.state.get(k, NO_DEFAULT)
            if old is NO_DEFAULT and self.start is not NO_DEFAULT:
                old = copy.deepcopy(self.start)
            self.state[k], out = self._step(old, x)
            state = self.state[k]
            out = (k, out)
        return (state, out) if self.with_state else out

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            out = self._advance(x)
        except Exception as e:
            return self._fail(x, e)
        return self._emit(out) if metadata is None else self._emit(out, metadata)

    def _fusable(self) -> bool:
        return True

    def _fuse(self, f: Fuser, x: str) -> str:
        out = f.fresh()
        if self._key is not None or self.returns_state or self.with_state:
            advance = f.bind(self._advance, "advance")
            f.step(self, x, f"{out} = {advance}({x})")
            return out
        # The plain running reduction is the hot case: written inline.
        node = f.bind(self, "node")
        func = f.bind(self.func, "f")
        nodefault = f.bind(NO_DEFAULT, "NO_DEFAULT")
        kw = f", **{f.bind(self.kwargs, 'kwargs')}" if self.kwargs else ""
        if self.state is not NO_DEFAULT:
            # Once there is a state there always is (restore() recompiles).
            f.step(self, x, f"{node}.state = {out} = {func}({node}.state, {x}{kw})")
            return out
        f.step(self, x, (
            f"if {node}.state is {nodefault}:\n"
            f"    {node}.state = {out} = {x}\n"
            f"else:\n"
            f"    {node}.state = {out} = {func}({node}.state, {x}{kw})"
        ))
        return out


Stream.register_api(attribute_name="scan")(Accumulate)


def _increment(counts: dict[Any, int], x: Hashable) -> tuple[dict[Any, int], dict[Any, int]]:
    # A new dict each time: an emitted count never changes afterwards.
    new = {**counts, x: counts.get(x, 0) + 1}
    return new, new


@Stream.register_api()
class Frequencies(Accumulate):
    """Count occurrences; emit the counts so far after every element.

    Each emitted dict is a new one: earlier emissions do not change when
    later elements arrive.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.frequencies().sink_to_list()
    >>> for x in "aba":
    ...     source.emit(x)
    >>> L
    [{'a': 1}, {'a': 1, 'b': 1}, {'a': 2, 'b': 1}]
    """

    __slots__ = ()
    _operator = "frequencies"
    _takes_function = False
    _params: ClassVar[tuple[str, ...]] = ()

    def __init__(self, upstream: Stream[Any], **kwargs: Any) -> None:
        super().__init__(upstream, _increment, start={}, returns_state=True, **kwargs)
        self.state = {}


@Stream.register_api()
class Slice(Stream[Any]):
    """Keep elements ``start``, ``start + step``... up to ``end``, like ``islice``.

    At ``end`` the node disconnects from upstream and closes downstream (the
    stream is over for it). streamz counted ``step`` from 0 instead of from
    ``start``; this follows ``itertools.islice``.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.slice(1, 7, 2).sink_to_list()
    >>> for i in range(10):
    ...     source.emit(i)
    >>> L
    [1, 3, 5]
    """

    __slots__ = ("end", "start", "state", "step")
    #: The first index kept; shadows ``Stream.start()`` on this node, as in streamz.
    start: Any
    _operator = "slice"
    _local_only = None
    _params = ("start", "end", "step")
    _state = ("state",)

    def __init__(self, upstream: Stream[Any], start: int | None = None, end: int | None = None,
                 step: int | None = None, **kwargs: Any) -> None:
        check_count("slice", "start", start, 0, optional=True)
        check_count("slice", "end", end, 0, optional=True)
        check_count("slice", "step", step, 1, optional=True)
        self.start = start or 0
        self.end = end
        self.step = step or 1
        self.state = 0
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        i = self.state
        if self.end is not None and i >= self.end:
            return None
        self.state = i + 1
        pending = None
        if i >= self.start and (i - self.start) % self.step == 0:
            pending = self._emit(x) if metadata is None else self._emit(x, metadata)
        if self.end is not None and self.state >= self.end:
            for u in list(self.upstreams):
                u.disconnect(self)
            try:
                closed = self._on_close(None)
            except Exception as e:  # raised after x's work (a coroutine sink's)
                return failing_after([pending], e)
            pending = gather_pending([pending, closed])
        return pending


@Stream.register_api()
class Unique(Stream[Any]):
    """Emit only elements whose key has not been seen.

    Parameters
    ----------
    maxsize : int, optional
        Remember only the last ``maxsize`` distinct keys (a key seen again
        becomes the most recent); unbounded by default.
    key : callable or hashable
        ``key(x)`` (or ``x[key]``) decides what "the same" means.
    hashable : bool
        False for unhashable keys (kept in a list: slower).

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.unique().sink_to_list()
    >>> for x in [1, 2, 1, 3, 2]:
    ...     source.emit(x)
    >>> L
    [1, 2, 3]
    """

    __slots__ = ("_key", "hashable", "key", "maxsize", "seen")
    _operator = "unique"
    _local_only = None
    _params = ("maxsize", "key", "hashable")
    _state = ("seen",)

    def __init__(self, upstream: Stream[Any], maxsize: int | None = None,
                 key: Any = identity, hashable: bool = True, **kwargs: Any) -> None:
        check_count("unique", "maxsize", maxsize, 1, optional=True)
        self.maxsize = maxsize
        self.key = key
        self._key = key_function(key, self._operator)
        self.hashable = hashable
        self.seen: Any = OrderedDict() if hashable else []
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            k = self._key(x)
            new = self._remember(k)
        except TypeError as e:
            if self.hashable and "unhashable" in str(e):  # say what to do
                e = TypeError(f"{e}; give unique(hashable=False) to compare such elements "
                              "by equality (slower)")
            return self._fail(x, e)
        except Exception as e:
            return self._fail(x, e)
        if not new:
            return None
        return self._emit(x) if metadata is None else self._emit(x, metadata)

    def _remember(self, k: Any) -> bool:
        seen = self.seen
        if self.hashable:
            if k in seen:
                seen.move_to_end(k)
                return False
            seen[k] = True
            if self.maxsize is not None and len(seen) > self.maxsize:
                seen.popitem(last=False)
            return True
        if k in seen:
            seen.remove(k)
            seen.append(k)
            return False
        seen.append(k)
        if self.maxsize is not None and len(seen) > self.maxsize:
            del seen[0]
        return True


@Stream.register_api()
class Collect(Stream[Any]):
    """Hold elements until :meth:`flush` is called, then emit them as a tuple.

    Closing the stream flushes what is held.

    Examples
    --------
    >>> from streams import Stream
    >>> source, trigger = Stream(), Stream()
    >>> collector = source.collect()
    >>> L = collector.sink_to_list()
    >>> _ = trigger.sink(collector.flush)
    >>> source.emit(1)
    >>> source.emit(2)
    >>> trigger.emit("now")
    >>> L
    [(1, 2)]
    """

    __slots__ = ("_metadata", "cache")
    _operator = "collect"
    _local_only = "it emits when flush() is called in this process"
    _state = ("cache",)

    def __init__(self, upstream: Stream[Any], cache: list[Any] | None = None,
                 metadata_cache: Any = None, **kwargs: Any) -> None:
        self.cache: list[Any] = [] if cache is None else cache
        # streamz's metadata of the held elements (their refs retained while held).
        self._metadata: list[Any] = [] if metadata_cache is None else list(metadata_cache)
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        self.cache.append(x)
        if metadata:
            retain_refs(metadata)
            self._metadata.append(metadata)
        return None

    def flush(self, _: Any = None) -> Any:
        """Emit the held elements as one tuple and forget them."""
        out = tuple(self.cache)
        self.cache.clear()
        if not self._metadata:
            return self._emit(out)
        held, self._metadata = self._metadata, []
        try:
            return self._emit(out, [m for ms in held for m in ms])
        finally:
            for ms in held:
                release_refs(ms)

    def _flush(self) -> Any:
        return self.flush() if self.cache else None
