"""Sources; streamz's ``sink_to_file`` is importable from here, as there."""

from ..sinks.basic import sink_to_file

__all__ = ["sink_to_file"]
