"""``Stream.filenames``: the names of files appearing in a directory (streamz's source)."""

from __future__ import annotations

import os
from glob import glob
from typing import Any

from ..clock import get_clock
from ..core import Stream
from ..operators.durations import check_interval
from .base import Source

__all__ = ["Filenames"]


@Stream.register_api(staticmethod)
class Filenames(Source[str]):
    """Emit the name of each new file matching ``path``, polling every ``poll_interval``.

    Parameters
    ----------
    path : str
        A directory (all its files) or a glob pattern.
    poll_interval : float or str
        Seconds between two looks at the directory.
    start : bool
        Start right away (needs a running loop).

    Files present at the first look are emitted too, in sorted order; each
    name is emitted once, and counted as seen once its work is done: a
    ``start()`` after a failure emits the failing name again. Without a
    running loop, ``start()`` polls from the shared loop thread
    (:mod:`streams.loop_thread`), as streamz does.

    Examples
    --------
    >>> import asyncio, os, tempfile
    >>> from streams import Stream, VirtualClock, use_clock
    >>> d = tempfile.mkdtemp()
    >>> for name in "ba":
    ...     open(os.path.join(d, name), "w").close()
    >>> with use_clock(VirtualClock()) as clock:
    ...     source = Stream.filenames(d, poll_interval=1.0)
    >>> L = source.sink_to_list()
    >>> async def main():
    ...     source.start()
    ...     await clock.advance_async(0)
    ...     open(os.path.join(d, "c"), "w").close()
    ...     await clock.advance_async(1.0)
    ...     source.stop()
    >>> asyncio.run(main())
    >>> [os.path.basename(f) for f in L]
    ['a', 'b', 'c']
    """

    __slots__ = ("_clock", "path", "poll_interval", "seen")
    _operator = "filenames"
    _params = ("path", "poll_interval")
    _needs_loop = True

    def __init__(self, path: str, poll_interval: float | str = 0.1, start: bool = False,
                 **kwargs: Any) -> None:
        if "*" not in path and os.path.isdir(path):
            path = os.path.join(path, "*")
        self.path = path
        self.poll_interval = check_interval("filenames", poll_interval, "poll_interval")
        self.seen: set[str] = set()
        self._clock = get_clock()
        super().__init__(start=start, **kwargs)

    def _new_names(self) -> list[str]:
        return sorted(set(glob(self.path)) - self.seen)

    async def _run_async(self) -> None:
        while not self.stopped:
            for name in self._new_names():
                if self.stopped:
                    break  # the rest is for the next start()
                pending = self._push(name)
                if pending is not None:
                    await pending  # failing, the name is emitted again by a new start()
                self.seen.add(name)
            if not self.stopped:
                await self._clock.sleep(self.poll_interval)
