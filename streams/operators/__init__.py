"""The operators, grouped by family; importing this registers them on Stream."""

from .aggregate import Accumulate, Collect, Frequencies, Slice, Unique
from .combine import CombineLatest, Union, Zip, ZipLatest
from .gather import Gather
from .transform import Filter, Flatten, Map, Pluck, Remove, Starmap
from .windows import Partition, PartitionUnique, SlidingWindow

__all__ = [
    "Accumulate",
    "Collect",
    "CombineLatest",
    "Filter",
    "Flatten",
    "Frequencies",
    "Gather",
    "Map",
    "Partition",
    "PartitionUnique",
    "Pluck",
    "Remove",
    "SlidingWindow",
    "Slice",
    "Starmap",
    "Union",
    "Unique",
    "Zip",
    "ZipLatest",
]
