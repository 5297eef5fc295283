"""How operators join ``Stream``: registration as methods, subclasses, and plugins.

``Stream.register_api`` makes a node class a method of ``Stream``
(:func:`register_api`); a subclass is checked when it is defined
(:func:`check_subclass`); and operators contributed by other packages come
through entry points. A package declares, in its metadata, entry points in the groups
``streams.nodes``, ``streams.sources`` or ``streams.sinks`` (or streamz's
``streamz.nodes``, ``streamz.sources``, ``streamz.sinks``), each naming a
``streams.Stream`` subclass: a streamz plugin ports by changing its base
class's import, and keeps its metadata. (A class still deriving from
streamz's ``Stream`` cannot join a streams graph: using it raises a
TypeError saying so.) They are registered on first use, so a broken plugin
never breaks ``import streams``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from toolz import identity

from .naming import snake_case
from .pending import done, finish_emit

__all__ = [
    "StreamType", "check_subclass", "load_plugins", "register_api", "register_entry_point",
]

logger = logging.getLogger("streams")

_GROUPS = {
    "streams.nodes": identity,
    "streams.sinks": identity,
    "streams.sources": staticmethod,
    # streamz's groups: a plugin ported by changing its import keeps its metadata.
    "streamz.nodes": identity,
    "streamz.sinks": identity,
    "streamz.sources": staticmethod,
}


def _stream() -> Any:
    from .core import Stream  # plugins.py is imported by core.py

    return Stream


def _streamz_hint(klass: Any) -> str:
    """What to change, for a class still deriving from streamz's ``Stream``."""
    if isinstance(klass, type) and any(
            c.__module__.startswith("streamz") and c.__name__ == "Stream" for c in klass.__mro__):
        return ": it derives from streamz's Stream; import Stream from streams instead"
    return ""


def _lazy(ep: EntryPoint, modifier: Any) -> Any:
    def load(*args: Any, **kwargs: Any) -> Any:
        try:
            klass = ep.load()
        except ModuleNotFoundError as e:
            if not ep.extras or ep.dist is None:
                raise
            # A module of the extra the entry point names (``scatter ... [dask]``).
            raise ImportError(f"{ep.name}() needs {e.name}, which is not installed: pip "
                              f'install "{ep.dist.name}[{",".join(ep.extras)}]"',
                              name=e.name) from e
        Stream = _stream()
        if not (isinstance(klass, type) and issubclass(klass, Stream)):
            raise TypeError(
                f"entry point {ep.name!r} ({ep.value}) must name a subclass of "
                f"streams.Stream{_streamz_hint(klass)}"
            )
        Stream.register_api(modifier=modifier, attribute_name=ep.name)(klass)
        return klass(*args, **kwargs)

    load.__name__ = ep.name
    load.__doc__ = f"Plugin operator {ep.name!r} from {ep.value} (loaded on first use)."
    return modifier(load)


def register_entry_point(cls: Any, entry_point: Any, modifier: Any = identity) -> None:
    """``Stream.register_plugin_entry_point``: a method loading ``entry_point`` on first call.

    As streamz: a name ``cls`` already has is refused (ValueError); a loaded
    object that is not a ``Stream`` subclass raises TypeError when called; once
    loaded, the method is the class's own (its ``__name__`` is the class's).

    Examples
    --------
    >>> from streams import Stream
    >>> class Ep:
    ...     name, module_name = "map", "example"
    >>> Stream.register_plugin_entry_point(Ep())
    Traceback (most recent call last):
    ...
    ValueError: Can't add map from example to Stream: duplicate method name.
    """
    name = entry_point.name
    if hasattr(cls, name):
        raise ValueError(f"Can't add {name} from {getattr(entry_point, 'module_name', '?')} "
                         f"to {cls.__name__}: duplicate method name.")

    def stub(*args: Any, **kwargs: Any) -> Any:
        node = entry_point.load()
        if not (isinstance(node, type) and issubclass(node, _stream())):
            module = (getattr(entry_point, "module_name", None)
                      or getattr(entry_point, "module", None) or "?")
            raise TypeError(f"Error loading {name} from module {module}: {node!r} "
                            f"must be a subclass of streams.Stream{_streamz_hint(node)}")
        if getattr(cls, name).__name__ == "stub":
            cls.register_api(modifier=modifier, attribute_name=name)(node)
            getattr(cls, name).__name__ = node.__name__  # as streamz's functools.wraps
        return node(*args, **kwargs)

    setattr(cls, name, modifier(stub))


#: True once the entry points have been read (it is done once per process).
loaded = False


def load_plugins() -> list[str]:
    """Register the operators that installed packages declare.

    Runs once (later calls return ``[]``): the first node created calls it,
    or the first unknown attribute asked of the ``Stream`` class. A plugin
    never replaces an operator of this package. Returns the names registered.
    """
    global loaded
    if loaded:
        return []
    loaded = True
    added = []
    # One read of every installed package's metadata, not one per group: each
    # read opens every distribution's entry_points.txt (about 20 ms apiece).
    declared = entry_points()
    for group, modifier in _GROUPS.items():
        for ep in declared.select(group=group):
            if ep.name in vars(_stream()):
                if _registered_class(vars(_stream())[ep.name]) != f"{ep.module}:{ep.attr}":
                    logger.warning("plugin %r (%s) ignored: Stream.%s exists",
                                   ep.name, ep.value, ep.name)
                continue  # else: its package was imported first and registered it
            setattr(_stream(), ep.name, _lazy(ep, modifier))
            added.append(ep.name)
    return added


def _registered_class(method: Any) -> str | None:
    """``module:Class`` of the node class ``method`` was registered for, if any."""
    for _ in range(3):  # a staticmethod, its function, the class
        method = getattr(method, "__wrapped__", None)
        if isinstance(method, type):
            return f"{method.__module__}:{method.__qualname__}"
    return None


class StreamType(type):
    """Loads entry-point plugins when an unknown class attribute is asked.

    Scanning installed packages' metadata takes a noticeable part of a
    second, so ``import streams`` does not do it: the first node created
    does (see ``Stream.__init__``), and so does ``Stream.from_kafka`` (a
    plugin source) asked before any node exists. Instances get no
    ``__getattr__``: it would disable CPython's fast attribute access on
    every node, in the hot path.
    """

    if not TYPE_CHECKING:

        def __getattr__(cls, name: str) -> Any:
            return plugin_attribute(cls, name)

    def __dir__(cls) -> list[str]:
        # Completion (``Stream.<tab>``) before any node exists lists the plugins too.
        if not loaded:
            load_plugins()
        return sorted(type.__dir__(cls))


def plugin_attribute(obj: Any, name: str) -> Any:
    if name.startswith("_") or loaded or not load_plugins():
        raise AttributeError(f"type object {obj.__name__!r} has no attribute {name!r}")
    return getattr(obj, name)


def register_api(cls: type, modifier: Callable[[Any], Any] = identity,
                 attribute_name: str | None = None) -> Callable[[type], type]:
    """Register a node class as a method on ``Stream`` (and subclasses).

    ``Stream.register_api`` (``cls`` is the class it is called on).
    ``CombineLatest`` becomes ``.combine_latest``; pass ``staticmethod`` as
    ``modifier`` for sources, as streamz does.

    Examples
    --------
    >>> from streams import Stream
    >>> @Stream.register_api()
    ... class Double(Stream):
    ...     def update(self, x, who=None, metadata=None):
    ...         return self._emit(2 * x)
    >>> source = Stream()
    >>> L = source.double().sink_to_list()
    >>> source.emit(4)
    >>> L
    [8]
    """

    def _(klass: type) -> type:
        name = attribute_name or snake_case(klass.__name__)
        if issubclass(klass, _stream()):  # not a helper such as sink_to_plot's LivePlot
            if "_operator" not in klass.__dict__:
                klass._operator = name  # type: ignore[attr-defined]
            from .spec import register_operator

            register_operator(klass)

        # A streamz plugin still deriving from streamz's Stream: its __init__
        # would fail deep in streamz on a streams upstream. Say so when used.
        foreign = not issubclass(klass, _stream()) and any(
            c.__name__ == "Stream" and c.__module__.partition(".")[0] == "streamz"
            for c in klass.__mro__)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if foreign:
                raise TypeError(
                    f"{name}(): {klass.__module__}.{klass.__qualname__} derives from streamz's "
                    "Stream, which cannot join a streams graph; derive it from streams.Stream "
                    "(change the import of its base class)")
            try:
                return klass(*args, **kwargs)
            except TypeError as e:
                _check_arguments(name, klass, args, kwargs, modifier is staticmethod, e)
                raise

        wrapped.__name__ = name
        wrapped.__qualname__ = f"{cls.__name__}.{name}"
        wrapped.__doc__ = klass.__doc__
        wrapped.__wrapped__ = klass  # type: ignore[attr-defined]
        setattr(cls, name, modifier(wrapped))
        return klass

    return _


def _check_arguments(name: str, klass: type, args: tuple[Any, ...], kwargs: dict[str, Any],
                     static: bool, error: TypeError) -> None:
    """Raise a TypeError naming the operator and its signature if the call cannot bind.

    Python's own message names ``__init__`` and counts the upstream; this one
    says what to write.
    """
    import inspect

    try:
        signature = inspect.signature(klass)
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return
    params = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    shown = inspect.Signature(params if static else params[1:])
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{name}(): {e}; it takes {name}{shown}") from None
    if str(error).startswith("Stream.__init__() got an unexpected keyword argument"):
        # The operator passed its **kwargs on to Stream.__init__, which lacks one.
        passed_on = set(inspect.signature(_stream().__init__).parameters)
        unknown = [k for k in kwargs if k not in signature.parameters and k not in passed_on]
        if unknown:
            raise TypeError(f"{name}(): unexpected keyword argument {unknown[0]!r}; it takes "
                            f"{name}{shown}, and as **kwargs the Stream options "
                            f"{', '.join(sorted(passed_on - {'self', 'upstream', 'upstreams'}))}")


def check_subclass(cls: Any) -> None:
    """Adapt a ``Stream`` subclass written for streamz, as it is defined.

    * A class overriding ``_emit`` (streamz code does) gets an ``emit`` that
      goes through the override: it must see every element, so the
      compiled push is not called directly; and, without an ``update`` of
      its own, an ``update`` that does too (the elements from upstream).
    * A streamz plugin's ``@gen.coroutine def update`` runs only once
      awaited, on the loop that finishes it (as a sink's coroutine).
    * A class defining its own ``update`` without saying whether its
      description rebuilds it faithfully elsewhere is run in this process
      only: engines refuse it until it sets ``_local_only = None``.
    """
    Stream = _stream()
    own_update = "update" in cls.__dict__  # the author's, not the one given below
    if cls._emit is not Stream._emit:
        if "emit" not in cls.__dict__:
            cls.emit = _emit_through_override
        if cls.update is Stream.update:
            cls.update = _update_through_override
    update = cls.__dict__.get("update")
    if update is not None and getattr(update, "__tornado_coroutine__", False):
        from .sinks.basic import _deferred_tornado_coroutine

        cls.update = _deferred_tornado_coroutine(update)
    declared = any("_local_only" in vars(b) for b in cls.__mro__ if b is not Stream)
    if own_update and not declared:
        cls._local_only = (
            f"{cls.__name__} does not declare that an engine can run it (its "
            "author can set _local_only = None once its NodeSpec rebuilds it)")


def _update_through_override(self: Any, x: Any, who: Any = None, metadata: Any = None) -> Any:
    # ``update`` of a class that overrides ``_emit`` and not ``update``; see check_subclass.
    return self._emit(x) if metadata is None else self._emit(x, metadata)


def _emit_through_override(self: Any, x: Any, asynchronous: bool = False,
                           metadata: Any = None) -> Any:
    # ``emit`` of a class that overrides ``_emit``; see check_subclass.
    pending = self._emit(x) if metadata is None else self._emit(x, metadata)
    if pending is None:
        return done() if asynchronous or self.asynchronous else None
    return finish_emit(self, pending, asynchronous)
