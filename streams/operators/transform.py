"""Element-wise operators: map, starmap, filter, remove, pluck, flatten.

Each has a generic ``update`` (the reference behaviour, used when a node is
called directly) and a ``_fuse`` method writing the same step as inline
code for ``streams.fusion``. The two are tested against each other.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from ..core import NO_DEFAULT, Stream
from ..errors import NodeError
from ..fusion import Fuser, recompiled_when_set
from ..metadata import release_refs, retain_refs
from ..pending import failing_after, gather_pending
from ..spec import Traits
from ._checks import check_callable, check_keywords
from ._outbox import being_cancelled

__all__ = ["Filter", "Flatten", "Map", "Pluck", "Remove", "Starmap"]


class _FunctionNode(Stream[Any]):
    """A node applying a user function with extra ``*args, **kwargs``."""

    __slots__ = ("_func", "_is_async", "args", "kwargs")
    _params = ("args", "kwargs")
    _takes_function = True
    _local_only = None

    def __init__(
        self, upstream: Stream[Any], func: Callable[..., Any] | None, *args: Any, **kwargs: Any
    ) -> None:
        stream_name = kwargs.pop("stream_name", None)
        check_keywords(self._operator, func, kwargs, ("stream_name",))
        self.func = func
        self.args = args
        self.kwargs = kwargs
        Stream.__init__(self, upstream, stream_name=stream_name)

    def _note_async(self, func: Callable[..., Any] | None) -> None:
        # An object whose ``__call__`` is a coroutine function is awaited too
        # (issue 3: coroutines are awaited, never passed on as values).
        self._is_async = func is not None and (
            inspect.iscoroutinefunction(func)
            or inspect.iscoroutinefunction(type(func).__call__))

    _func: Callable[..., Any] | None
    func = recompiled_when_set(
        "_func", "The user function; set anew, the next element runs the new one.",
        then=_note_async)

    def _fusable(self) -> bool:
        return not self._is_async

    def _traits(self) -> Traits:
        traits = super()._traits()
        if self._is_async:
            return replace(traits, local_only="its function is a coroutine function, and "
                           "coroutines run on this process's event loop")
        return traits

    def _call_code(self, f: Fuser, target: str, x: str, star: str = "") -> str:
        """The statements setting ``target`` to the function's value for ``x``."""
        if star:
            return f"{target} = {f.call(self.func, star + x, self.args, self.kwargs)}"
        return f.apply(target, self.func, x, self.args, self.kwargs)

    def _await_then(self, x: Any, result: Any, then: Callable[[Any], Any],
                    metadata: Any = None) -> Any:
        """The work of awaiting the coroutine ``result`` for ``x``, then ``then(value)``.

        ``metadata``'s refs are retained now and released once ``then`` has
        returned (downstream retained its own if it keeps the element): the
        caller releases its own when this returns, before the coroutine ran,
        and a streamz source commits an element whose refs reach 0.
        """
        retain_refs(metadata)
        return self._awaited(x, result, then, metadata)

    async def _awaited(self, x: Any, result: Any, then: Callable[[Any], Any],
                       metadata: Any) -> None:
        try:
            try:
                value = await result
            except Exception as e:
                pending = self._fail(x, e)
            except asyncio.CancelledError as e:
                if being_cancelled():
                    raise  # the producer awaiting emit is cancelled: that must go on
                # The coroutine ended cancelled (a request cancelled under it):
                # this element failed, as a coroutine sink's does. Raised as it
                # is, it would pass for the producer's own cancellation.
                pending = self._fail(x, e)
            else:
                pending = then(value)
        finally:
            release_refs(metadata)
        if pending is not None:
            await pending


@Stream.register_api()
class Map(_FunctionNode):
    """Apply a function to every element.

    A coroutine function is awaited (on an asynchronous stream, ``await
    emit`` waits for it); streamz drops its coroutines with a warning.

    Parameters
    ----------
    func : callable
        Called as ``func(x, *args, **kwargs)``.
    *args, **kwargs
        Extra arguments to ``func``.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.map(lambda x, k: x * k, k=10).sink_to_list()
    >>> for i in range(3):
    ...     source.emit(i)
    >>> L
    [0, 10, 20]
    """

    __slots__ = ()
    _operator = "map"
    _forwards_every_element = True
    #: Starmap unpacks each element into the function's arguments.
    _star = False

    def __init__(self, upstream: Stream[Any], func: Callable[..., Any], *args: Any,
                 **kwargs: Any) -> None:
        check_callable(self._operator, func)
        super().__init__(upstream, func, *args, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            if self._star:
                y = self._func(*x, *self.args, **self.kwargs)  # type: ignore[misc]
            else:
                y = self._func(x, *self.args, **self.kwargs)  # type: ignore[misc]
        except Exception as e:
            return self._fail(x, e)
        if self._is_async:
            if metadata is None:
                return self._await_then(x, y, self._emit)
            return self._await_then(x, y, lambda v: self._emit(v, metadata), metadata)
        return self._emit(y) if metadata is None else self._emit(y, metadata)

    def _fuse(self, f: Fuser, x: str) -> str:
        y = f.fresh()
        if self._star:
            f.step(self, x, self._call_code(f, y, x, star="*"))
        else:
            f.assign(self, x, y, self.func, self.args, self.kwargs)
        return y


@Stream.register_api()
class Starmap(Map):
    """Apply a function to every element, unpacked as arguments.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.starmap(pow).sink_to_list()
    >>> source.emit((2, 3))
    >>> L
    [8]
    """

    __slots__ = ()
    _operator = "starmap"
    _forwards_every_element = True
    _star = True


@Stream.register_api()
class Filter(_FunctionNode):
    """Keep only the elements for which ``predicate`` is true.

    ``predicate=None`` keeps the truthy elements, as in the ``filter`` builtin.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.filter(lambda x: x % 2 == 0).sink_to_list()
    >>> for i in range(5):
    ...     source.emit(i)
    >>> L
    [0, 2, 4]
    """

    __slots__ = ()
    _operator = "filter"

    @property
    def predicate(self) -> Callable[..., Any] | None:
        """streamz's name for the function (:attr:`func`); None keeps truthy elements."""
        return self._func
    _keep = True

    def __init__(self, upstream: Stream[Any], predicate: Callable[..., Any] | None,
                 *args: Any, **kwargs: Any) -> None:
        if predicate is not None:
            check_callable(self._operator, predicate)
        super().__init__(upstream, predicate, *args, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if self._is_async:
            try:
                result = self._func(x, *self.args, **self.kwargs)  # type: ignore[misc]
            except Exception as e:
                return self._fail(x, e)
            return self._await_then(x, result, lambda k: self._decide(x, k, metadata), metadata)
        return self._decide(x, x if self._func is None else NO_DEFAULT, metadata)

    def _decide(self, x: Any, keep: Any, metadata: Any = None) -> Any:
        try:
            if keep is NO_DEFAULT:
                keep = self._func(x, *self.args, **self.kwargs)  # type: ignore[misc]
            # The truth test is the user's code too (a numpy array raises).
            passes = bool(keep) is self._keep
        except Exception as e:
            return self._fail(x, e)
        if not passes:
            return None
        return self._emit(x) if metadata is None else self._emit(x, metadata)

    def _fuse(self, f: Fuser, x: str) -> str:
        negate = "not " if self._keep else ""
        if self.func is None:
            f.step(self, x, f"if {negate}{x}:\n    return None")
            return x
        # A bool written in place is tested where it is computed: its truth
        # test cannot raise and needs no try statement of its own.
        if self.args or self.kwargs or not f.keep_if(self, x, negate, self.func):
            keep = f.fresh("keep")
            f.step(self, x, f"{self._call_code(f, keep, x)}\nif {negate}{keep}:\n    return None")
        return x


@Stream.register_api()
class Remove(Filter):
    """Drop the elements for which ``predicate`` is true.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.remove(lambda x: x % 2 == 0).sink_to_list()
    >>> for i in range(5):
    ...     source.emit(i)
    >>> L
    [1, 3]
    """

    __slots__ = ()
    _operator = "remove"
    _keep = False

    def __init__(self, upstream: Stream[Any], predicate: Callable[..., Any],
                 *args: Any, **kwargs: Any) -> None:
        check_callable("remove", predicate)
        super().__init__(upstream, predicate, *args, **kwargs)


@Stream.register_api()
class Pluck(Stream[Any]):
    """Select an item, or a tuple of items, from every element.

    Parameters
    ----------
    pick : key or list of keys
        ``x[pick]``; a list gives ``tuple(x[p] for p in pick)``.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> a = source.pluck(0).sink_to_list()
    >>> b = source.pluck([0, 2]).sink_to_list()
    >>> source.emit((1, 2, 3))
    >>> a, b
    ([1], [(1, 3)])
    """

    __slots__ = ("pick",)
    _operator = "pluck"
    _forwards_every_element = True
    _local_only = None
    _params = ("pick",)

    def __init__(self, upstream: Stream[Any], pick: Any, **kwargs: Any) -> None:
        self.pick = pick
        Stream.__init__(self, upstream, **kwargs)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            y = tuple(x[p] for p in self.pick) if isinstance(self.pick, list) else x[self.pick]
        except Exception as e:
            return self._fail(x, e)
        return self._emit(y) if metadata is None else self._emit(y, metadata)

    def _fusable(self) -> bool:
        return True

    def _fuse(self, f: Fuser, x: str) -> str:
        y = f.fresh()
        if isinstance(self.pick, list):
            # The keys written in, while the list holds them: it is the
            # user's, read at every element as ``update`` (and streamz) does.
            items = "".join(f"{x}[{f.bind(p, 'k')}], " for p in self.pick)
            pick, now = f.bind(self.pick, "pick"), f.bind(list(self.pick), "keys")
            code = (f"{y} = ({items}) if {pick} == {now} else "
                    f"tuple([{x}[p] for p in {pick}])")
        else:
            code = f"{y} = {x}[{f.bind(self.pick, 'k')}]"
        f.step(self, x, code)
        return y


@Stream.register_api()
class Flatten(Stream[Any]):
    """Emit each item of every (iterable) element.

    ``concat`` is the same operator.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.flatten().sink_to_list()
    >>> source.emit([1, 2])
    >>> source.emit((3,))
    >>> L
    [1, 2, 3]
    """

    __slots__ = ()
    _operator = "flatten"
    _local_only = None

    def update(self, x: Iterable[Any], who: Stream[Any] | None = None,
               metadata: Any = None) -> Any:
        pending = []
        try:
            items = iter(x)
            for item in items:
                p = self._emit(item) if metadata is None else self._emit(item, metadata)
                if p is not None:
                    pending.append(p)
        except NodeError as e:
            # A downstream node failed (it named itself), after the work
            # earlier items left pending: raised once that has run.
            return failing_after(pending, e)
        except Exception as e:
            pending.append(self._fail(x, e))
        if not pending:
            return None
        return gather_pending(pending)


Stream.register_api(attribute_name="concat")(Flatten)
