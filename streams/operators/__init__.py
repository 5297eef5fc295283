"""The operators, grouped by family; importing this registers them on Stream."""

from .aggregate import Accumulate, Collect, Frequencies, Slice, Unique
from .combine import CombineLatest, Union, Zip, ZipLatest
from .event_windows import SlidingTimedWindow
from .flow import Buffer, Latest
from .gather import Gather
from .joins import IntervalJoin
from .lookup import LookupJoin
from .map_async import MapAsync
from .pacing import Delay, RateLimit
from .session_windows import SessionWindow
from .stateful import StatefulMap
from .timed import TimedWindow
from .timed_unique import TimedWindowUnique
from .transform import Filter, Flatten, Map, Pluck, Remove, Starmap
from .windows import Partition, PartitionUnique, SlidingWindow

__all__ = [
    "Accumulate",
    "Buffer",
    "Collect",
    "CombineLatest",
    "Delay",
    "Filter",
    "Flatten",
    "Frequencies",
    "Gather",
    "IntervalJoin",
    "Latest",
    "LookupJoin",
    "Map",
    "MapAsync",
    "Partition",
    "PartitionUnique",
    "Pluck",
    "RateLimit",
    "Remove",
    "SessionWindow",
    "Slice",
    "SlidingTimedWindow",
    "SlidingWindow",
    "Starmap",
    "StatefulMap",
    "TimedWindow",
    "TimedWindowUnique",
    "Union",
    "Unique",
    "Zip",
    "ZipLatest",
]
