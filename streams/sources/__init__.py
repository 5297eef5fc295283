"""Sources; streamz's ``Source`` (the base of custom sources) and ``sink_to_file`` are
importable from here, as there."""

from ..sinks.basic import sink_to_file
from .base import Source

__all__ = ["Source", "sink_to_file"]
