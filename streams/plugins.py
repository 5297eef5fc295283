"""Operators contributed by other packages, through entry points.

A package declares, in its metadata, entry points in the groups
``streams.nodes``, ``streams.sources`` or ``streams.sinks`` (streamz's
``streamz.*`` groups are read too, so existing plugins work), each naming a
``Stream`` subclass. They are registered on first use, so a broken plugin
never breaks ``import streams``.
"""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from toolz import identity

from .core import Stream

__all__ = ["load_plugins"]

logger = logging.getLogger("streams")

_GROUPS = {
    "streams.nodes": identity,
    "streams.sinks": identity,
    "streams.sources": staticmethod,
    "streamz.nodes": identity,
    "streamz.sinks": identity,
    "streamz.sources": staticmethod,
}


def _lazy(ep: EntryPoint, modifier: Any) -> Any:
    def load(*args: Any, **kwargs: Any) -> Any:
        klass = ep.load()
        if not (isinstance(klass, type) and issubclass(klass, Stream)):
            raise TypeError(
                f"entry point {ep.name!r} ({ep.value}) must name a subclass of streams.Stream"
            )
        Stream.register_api(modifier=modifier, attribute_name=ep.name)(klass)
        return klass(*args, **kwargs)

    load.__name__ = ep.name
    load.__doc__ = f"Plugin operator {ep.name!r} from {ep.value} (loaded on first use)."
    return modifier(load)


_loaded = False


def load_plugins() -> list[str]:
    """Register the operators that installed packages declare.

    Runs once (later calls return ``[]``); ``Stream`` calls it the first time
    an unknown attribute is asked for. A plugin never replaces an operator of
    this package. Returns the names registered.
    """
    global _loaded
    if _loaded:
        return []
    _loaded = True
    added = []
    for group, modifier in _GROUPS.items():
        for ep in entry_points(group=group):
            if hasattr(Stream, ep.name):
                if not group.startswith("streamz."):
                    logger.warning("plugin %r (%s) ignored: Stream.%s exists",
                                   ep.name, ep.value, ep.name)
                continue
            setattr(Stream, ep.name, _lazy(ep, modifier))
            added.append(ep.name)
    return added
