"""A general stateful operator: ``stateful_map``, a state per key that a function updates.

``scan`` emits its running state; ``stateful_map`` lets the function decide
what to emit (nothing, one element, several) and when to forget a key, which
is what sessionising, deduplicating or alerting on a change needs.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..core import Stream
from ..pending import emit_each, failing_after, gather_pending
from ._checks import check_callable, key_function, one_key
from .expiry import ExpiringKeys, Expiry, check_ttl

logger = logging.getLogger("streams")

__all__ = ["StatefulMap"]


@Stream.register_api()
class StatefulMap(ExpiringKeys):
    """Update a state with each element and emit what the function returns.

    ``func(state, x)`` returns ``(new_state, outputs)``: ``outputs`` is an
    iterable of the elements to emit, in order (empty to emit nothing); a
    string or a dict is refused, as one output it would go as its parts.
    Returning ``None`` as the new state discards the state: the next element
    starts again from ``start``. With ``key``, each key has its own state,
    independent of the others (so an engine may keep keys apart: Spark keeps
    each key's state in its state store, Dask in its stage).

    Parameters
    ----------
    func : callable
        ``func(state, x) -> (new_state, outputs)``.
    start : object
        The state a new key (or the stream) starts from; a copy is used.
    key : callable or hashable, optional
        Keep one state per ``key(x)`` (or ``x[key]`` if not callable).
    ttl : float or str, optional
        With ``key``: a key expires once the event time (the largest
        ``time(x)`` seen, all keys together) is more than ``ttl`` seconds
        past its last element; its state is dropped (the next element
        starts from ``start``). See :mod:`streams.operators.expiry`.
    time : callable or hashable, optional
        With ``ttl``: ``time(x)`` (or ``x[time]``), the element's event time
        in seconds (or a ``datetime``).
    on_expire : callable, optional
        With ``ttl``: ``on_expire(key, state)`` returns the elements to emit
        when a key expires (a timer on event time), before the element that
        moved time on. At ``close()`` event time ends, so every key still
        held expires, oldest first. A key whose state ``func`` discarded
        (``None``) does not expire.

    Examples
    --------
    Emit a running count, and a final one when a key sees ``"end"``:

    >>> from streams import Stream
    >>> def count(n, x):
    ...     user, event = x
    ...     if event == "end":
    ...         return None, [(user, n)]     # forget this user, emit its total
    ...     return n + 1, []
    >>> source = Stream()
    >>> L = source.stateful_map(count, start=0, key=0).sink_to_list()
    >>> for x in [("a", "click"), ("b", "click"), ("a", "click"), ("a", "end"),
    ...           ("b", "end"), ("a", "end")]:
    ...     source.emit(x)
    >>> L
    [('a', 2), ('b', 1), ('a', 0)]

    A session summary per user once they are idle for 10 seconds of event
    time (``x[1]``), and for everyone still active at the end:

    >>> def clicks(n, x):
    ...     return n + 1, []
    >>> source = Stream()
    >>> node = source.stateful_map(clicks, start=0, key=0, ttl=10, time=1,
    ...                            on_expire=lambda user, n: [(user, n)])
    >>> L = node.sink_to_list()
    >>> for x in [("a", 0), ("b", 3), ("a", 5), ("b", 12), ("a", 30)]:
    ...     source.emit(x)
    >>> L
    [('a', 2), ('b', 2)]
    >>> source.close()
    >>> L
    [('a', 2), ('b', 2), ('a', 1)]
    """

    __slots__ = ("_expiry", "_key", "func", "key", "on_expire", "start", "state", "time",
                 "ttl")
    _operator = "stateful_map"
    _takes_function = True
    _local_only = None
    _params = ("start", "key", "ttl", "time", "on_expire")
    _state = ("state",)
    #: The initial state; shadows ``Stream.start()`` on this node, as ``scan``'s does.
    start: Any

    def __init__(self, upstream: Stream[Any], func: Callable[[Any, Any], Any], start: Any = None,
                 key: Any = None, ttl: float | str | None = None, time: Any = None,
                 on_expire: Callable[[Any, Any], Any] | None = None, **kwargs: Any) -> None:
        check_callable("stateful_map", func, "a function of (state, x) as its first argument",
                       "lambda state, x: (state, [x]), key=0")
        self._expiry: Expiry | None = check_ttl("stateful_map", ttl, time, key)
        if on_expire is not None:
            if ttl is None:
                raise ValueError("stateful_map(): on_expire= is called when a key expires; "
                                 "give ttl= and time= too")
            check_callable("stateful_map", on_expire, "on_expire= as a function of (key, state)",
                           "f, key=0, ttl=60, time=1, on_expire=lambda key, state: [state]")
        self.ttl = ttl
        self.time = time
        self.on_expire = on_expire
        self.func = func
        self.start = start
        self.key = key
        self._key = None if key is None else key_function(key, self._operator)
        self.state: Any = {} if key is not None else None
        Stream.__init__(self, upstream, **kwargs)

    def _fresh(self) -> Any:
        return None if self.start is None else copy.deepcopy(self.start)

    def _call(self, state: Any, x: Any) -> tuple[Any, list[Any]]:
        result = self.func(state, x)
        try:
            new, outputs = result
        except (TypeError, ValueError):
            raise TypeError(f"stateful_map(): the function must return (new_state, outputs), "
                            f"got {result!r:.80}") from None
        return new, _elements(outputs, "the function's outputs", "(new_state, [output])")

    def _arrive(self, x: Any) -> tuple[Any, list[Any]]:
        """``x``'s key and the keys its time expires (may raise: ``x``'s failure)."""
        if self._key is None:
            return None, []
        k = one_key(self._key(x))
        if self._expiry is None:
            return k, []
        return k, list(self._expiry.advance(k, self._expiry.seconds(x)))

    def _advance(self, k: Any, x: Any) -> list[Any]:
        """Take ``x`` (of key ``k``) into the state; return its outputs (may raise)."""
        if self._key is None:
            new, outputs = self._call(self._fresh() if self.state is None else self.state, x)
            self.state = new
            return outputs
        old = self.state.get(k)
        new, outputs = self._call(self._fresh() if old is None else old, x)
        if new is None:
            self.state.pop(k, None)
            if self._expiry is not None:
                self._expiry.forget(k)
        else:
            self.state[k] = new
        return outputs

    def _expired(self, k: Any) -> Any:
        """Drop ``k``'s state and emit what ``on_expire`` returns for it (or its error).

        Every output goes, even after one fails downstream; the first such
        failure is raised after.
        """
        state = self.state.get(k)
        try:
            outputs = self._expire(k)
        except Exception as e:
            return self._fail((k, state), e)
        return emit_each(self._emit, outputs)

    def _expire_all(self, keys: list[Any], pending: list[Any]) -> Exception | None:
        """:meth:`_expired` of each of ``keys``, every one; the first failure, not raised."""
        error: Exception | None = None
        for k in keys:
            try:
                pending.append(self._expired(k))
            except Exception as e:
                error = error or e
        return error

    def _expire(self, k: Any) -> list[Any]:
        """Drop ``k``'s state; what ``on_expire`` returns for it."""
        state = self.state.pop(k, None)
        if self.on_expire is None or state is None:
            return []
        return _elements(self.on_expire(k, state), "on_expire's result", "[output]")

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            k, gone = self._arrive(x)
        except Exception as e:
            return self._fail(x, e)
        # The keys x's time expires go first, so that a failure of x loses
        # none of their outputs; a failure downstream of them (or of their
        # on_expire, under "raise") is theirs, raised once x has gone too.
        pending: list[Any] = []
        error = self._expire_all(gone, pending) if gone else None
        try:
            self._take(k, x, pending, metadata)
        except Exception as e:
            if error is None:
                error = e
            else:
                logger.error("%s: failed on element %r after an expired key's output "
                             "failed (raised)", self._label(), x, exc_info=e)
        if error is not None:  # raised after the work the others started
            return failing_after(pending, error)
        return gather_pending(pending)

    def _take(self, k: Any, x: Any, pending: list[Any], metadata: Any = None) -> None:
        """Run the function on ``x`` and emit its outputs (or its failure, to the policy).

        Its outputs carry ``x``'s metadata, as a ``map``'s output does. Every
        output goes, even after one fails downstream (the state took ``x``:
        emitting ``x`` again would not bring them back); the first failure
        is raised after, as for an expired key's outputs.
        """
        try:
            outputs = self._advance(k, x)
        except Exception as e:
            pending.append(self._fail(x, e))
            return
        if len(outputs) == 1:  # the usual case: no list of pending work to make
            y = outputs[0]
            pending.append(self._emit(y) if metadata is None else self._emit(y, metadata))
        elif outputs:
            pending.append(emit_each(self._emit if metadata is None
                                     else lambda y: self._emit(y, metadata), outputs))

    def _flush(self) -> Any:
        if self._expiry is None or self.on_expire is None:
            return None
        # End of stream: event time ends, every key still held expires; one
        # failing downstream does not keep the others' outputs back.
        pending: list[Any] = []
        error = self._expire_all(list(self._expiry.close()), pending)
        if error is not None:
            return failing_after(pending, error)
        return gather_pending(pending)


def _elements(outputs: Any, what: str, instead: str) -> list[Any]:
    """``outputs`` as a list of elements; one string, bytes or mapping is refused."""
    if outputs is None:  # the likeliest way to mean "nothing": say how
        raise TypeError(f"stateful_map(): {what} must be a list of elements, got None; "
                        f"return {instead.replace('[output]', '[]')} to emit nothing")
    if isinstance(outputs, str | bytes | Mapping):  # one output, not its characters or keys
        raise TypeError(
            f"stateful_map(): {what} must be a list of elements, got the "
            f"{type(outputs).__name__} {outputs!r:.60}, which would go as its "
            f"{'keys' if isinstance(outputs, Mapping) else 'characters'}; return {instead}")
    return list(outputs)  # a failing iterable is this node's error

