"""Sinks; ``Sink`` and ``_global_sinks`` are importable from here, as in streamz."""

from .basic import Sink, _global_sinks

__all__ = ["Sink", "_global_sinks"]
