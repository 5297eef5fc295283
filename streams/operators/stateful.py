"""A general stateful operator: ``stateful_map``, a state per key that a function updates.

``scan`` emits its running state; ``stateful_map`` lets the function decide
what to emit (nothing, one element, several) and when to forget a key, which
is what sessionising, deduplicating or alerting on a change needs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..core import Stream
from ..pending import gather_pending
from ..spec import Traits
from ._checks import check_callable, key_function

__all__ = ["StatefulMap"]


@Stream.register_api()
class StatefulMap(Stream[Any]):
    """Update a state with each element and emit what the function returns.

    ``func(state, x)`` returns ``(new_state, outputs)``: ``outputs`` is an
    iterable of the elements to emit, in order (empty to emit nothing).
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
    """

    __slots__ = ("_key", "func", "key", "start", "state")
    _operator = "stateful_map"
    _takes_function = True
    _local_only = None
    _params = ("start", "key")
    _state = ("state",)
    #: The initial state; shadows ``Stream.start()`` on this node, as ``scan``'s does.
    start: Any

    def __init__(self, upstream: Stream[Any], func: Callable[[Any, Any], Any], start: Any = None,
                 key: Any = None, **kwargs: Any) -> None:
        check_callable("stateful_map", func)
        self.func = func
        self.start = start
        self.key = key
        self._key = None if key is None else key_function(key)
        self.state: Any = {} if key is not None else None
        Stream.__init__(self, upstream, **kwargs)

    def _traits(self) -> Traits:
        # Keyed, each key's state is independent: an engine may route by key.
        return replace(super()._traits(), key=self.key)

    def _fresh(self) -> Any:
        return None if self.start is None else copy.deepcopy(self.start)

    def _call(self, state: Any, x: Any) -> tuple[Any, list[Any]]:
        result = self.func(state, x)
        try:
            new, outputs = result
        except (TypeError, ValueError):
            raise TypeError(f"stateful_map(): the function must return (new_state, outputs), "
                            f"got {result!r:.80}") from None
        return new, list(outputs)  # a failing iterable is this node's error

    def _advance(self, x: Any) -> list[Any]:
        """Take ``x`` into the state; return the outputs (may raise)."""
        if self._key is None:
            new, outputs = self._call(self._fresh() if self.state is None else self.state, x)
            self.state = new
            return outputs
        k = self._key(x)
        old = self.state.get(k)
        new, outputs = self._call(self._fresh() if old is None else old, x)
        if new is None:
            self.state.pop(k, None)
        else:
            self.state[k] = new
        return outputs

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            outputs = self._advance(x)
        except Exception as e:
            return self._fail(x, e)
        pending = [p for y in outputs if (p := self._emit(y)) is not None]
        return gather_pending(pending) if pending else None
