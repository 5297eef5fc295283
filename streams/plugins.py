"""Operators contributed by other packages, through entry points.

A package declares, in its metadata, entry points in the groups
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
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from toolz import identity

__all__ = ["StreamType", "load_plugins", "register_entry_point"]

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


def _lazy(ep: EntryPoint, modifier: Any) -> Any:
    def load(*args: Any, **kwargs: Any) -> Any:
        klass = ep.load()
        Stream = _stream()
        if not (isinstance(klass, type) and issubclass(klass, Stream)):
            hint = ""
            if isinstance(klass, type) and any(
                    c.__module__.startswith("streamz") and c.__name__ == "Stream"
                    for c in klass.__mro__):
                hint = ": it derives from streamz's Stream; import Stream from streams instead"
            raise TypeError(
                f"entry point {ep.name!r} ({ep.value}) must name a subclass of "
                f"streams.Stream{hint}"
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
            raise TypeError(f"Error loading {name} from module "
                            f"{getattr(entry_point, 'module_name', '?')}: "
                            f"{node.__class__.__name__} must be a subclass of Stream")
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
    for group, modifier in _GROUPS.items():
        for ep in entry_points(group=group):
            if ep.name in vars(_stream()):
                logger.warning("plugin %r (%s) ignored: Stream.%s exists",
                               ep.name, ep.value, ep.name)
                continue
            setattr(_stream(), ep.name, _lazy(ep, modifier))
            added.append(ep.name)
    return added


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


def plugin_attribute(obj: Any, name: str) -> Any:
    if name.startswith("_") or loaded or not load_plugins():
        raise AttributeError(f"type object {obj.__name__!r} has no attribute {name!r}")
    return getattr(obj, name)
