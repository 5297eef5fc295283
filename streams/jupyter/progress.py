"""Progress bars: ``stream.progress()`` counts the elements going through.

The bar is ``tqdm.auto``'s: a widget in Jupyter, text in a terminal. It
shows the count, the total when it is known (a ``from_iterable`` source over
a sized iterable, or ``total=``), and the rate in elements per second. tqdm
is imported when a bar is created, never at ``import streams``.

Examples
--------
>>> import io
>>> from streams import Stream
>>> source = Stream.from_iterable(range(100))
>>> out = source.progress(file=io.StringIO()).map(str).sink_to_list()
>>> bar = source.downstreams[0].bar
>>> bar.total, bar.n
(100, 0)
>>> source.start()
>>> bar.n, len(out)
(100, 100)
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any

from ..clock import Clock, get_clock
from ..core import Stream
from ..fusion import Fuser
from ..spec import Traits
from .display import _hook_cell_end
from .throttle import cell_end

__all__ = ["Progress", "progress_bar"]


def progress_bar(total: int | None = None, desc: str | None = None, unit: str = "it",
                 clock: Clock | None = None, **kwargs: Any) -> Any:
    """A ``tqdm.auto`` bar whose times come from the stream clock.

    For engines that report their own progress: a Dask or Spark runner
    calls ``bar.update(1)`` per task or micro-batch done, with
    ``unit="task"`` or ``unit="batch"``. Reading time from the clock in
    force (``streams.clock.get_clock()``) keeps rates exact under a virtual
    clock in tests.

    Parameters
    ----------
    total : int, optional
        The number of steps expected, if known.
    desc : str, optional
        The bar's label.
    unit : str
        What a step is called in the rate (``"it/s"``, ``"batch/s"``).
    clock : Clock, optional
        Defaults to ``get_clock()``.
    **kwargs
        Passed to ``tqdm.auto.tqdm`` (``leave``, ``disable``, ``mininterval``...).

    Examples
    --------
    >>> import io
    >>> from streams import VirtualClock
    >>> clock = VirtualClock()
    >>> bar = progress_bar(total=10, unit="batch", clock=clock, file=io.StringIO())
    >>> for _ in range(4):
    ...     clock.advance(0.5)
    ...     _ = bar.update(1)
    >>> bar.n, bar.format_dict["elapsed"]
    (4, 2.0)
    """
    from tqdm.auto import tqdm

    if total is None:
        # Unknown total: no "/?" and no meaningless time left, just count and rate.
        kwargs.setdefault("bar_format", "{desc}: {n_fmt}{unit} [{elapsed}, {rate_fmt}]")
    bar = tqdm(total=total, desc=desc, unit=unit, **kwargs)
    clock = clock if clock is not None else get_clock()
    # tqdm reads time through ``self._time`` (time.time by default); the
    # stream clock makes rates agree with the pipeline's own notion of time.
    bar._time = clock.now
    bar.start_t = bar.last_print_t = clock.now()
    return bar


def _length_of(node: Stream[Any]) -> int | None:
    """The number of elements a ``from_iterable`` source will emit, if known."""
    iterable = getattr(node, "iterable", None)
    if iterable is None:
        return None
    n = operator.length_hint(iterable, -1)
    return n if n >= 0 else None


@Stream.register_api()
class Progress(Stream[Any]):
    """Pass elements through unchanged, counting them on a progress bar.

    The bar (``tqdm.auto``: a widget in Jupyter, text elsewhere) shows the
    count, the rate in elements per second and, when the total is known,
    the fraction done and the time left. The total is ``total``, else the
    length of the upstream ``from_iterable``'s iterable if it has one. The
    bar closes when the stream ends. In a fused chain the count is one
    inlined call per element; tqdm itself redraws at most every
    ``mininterval`` seconds.

    Parameters
    ----------
    total : int, optional
        The number of elements expected; None for unknown (count and rate only).
    desc : str, optional
        The label; defaults to the upstream's name.
    unit : str
        What the rate counts: by default elements (``"12.5 elements/s"``);
        ``" rows"`` gives ``rows/s``.
    **kwargs
        Passed to ``tqdm.auto.tqdm`` (``leave``, ``disable``, ``mininterval``...).

    With an unknown total the bar shows the count, the time elapsed and the
    rate, and no time left.

    The count is the node's state: a pipeline restored from a checkpoint
    (:class:`~streams.Checkpointer`) counts on from the elements counted
    before it, and its rate from there. A checkpoint taken before the count
    was kept restores the bar from 0.

    Examples
    --------
    >>> import io
    >>> from streams import Stream
    >>> source = Stream()
    >>> counted = source.progress(total=3, desc="rows", file=io.StringIO())
    >>> L = counted.sink_to_list()
    >>> for row in "abc":
    ...     source.emit(row)
    >>> L, counted.bar.n, counted.bar.total
    (['a', 'b', 'c'], 3, 3)
    """

    __slots__ = ("_tick", "bar", "desc", "total", "unit")
    _operator = "progress"
    _local_only = "it draws in this process"
    _params = ("total", "desc", "unit")
    _state = ("count",)
    #: A changed label or total means the same count: the checkpoint still applies.
    _state_params = ()
    #: A checkpoint taken before the count was kept restores the bar from 0.
    _state_added = ("count",)
    _graphviz_shape = "cds"

    def __init__(self, upstream: Stream[Any], total: int | None = None, desc: str | None = None,
                 unit: str = "it", **kwargs: Any) -> None:
        if total is not None and (not isinstance(total, int) or total < 0):
            raise ValueError(f"progress(): total must be a count >= 0 or None, got {total!r}")
        stream_name = kwargs.pop("stream_name", None)
        self.total = total if total is not None else _length_of(upstream)
        self.desc = desc if desc is not None else (upstream.stream_name or upstream._label())
        self.unit = unit
        Stream.__init__(self, upstream, stream_name=stream_name)
        #: The ``tqdm`` bar.
        self.bar = progress_bar(self.total, self.desc,
                                " elements" if unit == "it" else unit, **kwargs)
        # A disabled tqdm bar counts nothing; the count is still the state.
        self._tick = self._count_one if self.bar.disable else self.bar.update
        cell_end.add(self)
        # In a kernel the count is redrawn when each cell ends, whether or not
        # a live view has registered that hook before.
        _hook_cell_end()

    @property
    def count(self) -> int:
        """The elements counted: in this run, and in the runs a restore carries on."""
        return int(self.bar.n)

    @count.setter
    def count(self, n: int) -> None:
        bar = self.bar
        # tqdm's average rate is (n - initial) over the time since its start.
        bar.n = bar.last_print_n = bar.initial = n
        bar.refresh()

    def _count_one(self) -> None:
        self.bar.n += 1

    def _traits(self) -> Traits:
        # In a Spark-resident segment it passes elements on, and Spark's
        # reports of the segment's micro-batches move the bar
        # (streams_spark.listener). Its count is no state an engine keeps.
        return replace(super()._traits(), identity_on_engine=True, stateful=False)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        self._tick()
        return self._emit(x) if metadata is None else self._emit(x, metadata)

    def _cell_end(self) -> None:
        """Show the count now (a notebook cell ended: see ``throttle.flush_all``)."""
        bar = self.bar
        if not bar.disable and bar.n != bar.last_print_n:
            bar.refresh()

    def _remove_upstream(self, upstream: Stream[Any]) -> None:
        super()._remove_upstream(upstream)
        if not self.upstreams:  # cut off: the bar goes, not left open above later ones
            self.bar.close()

    def destroy(self, streams: list[Stream[Any]] | None = None) -> None:
        super().destroy(streams)
        if not self.upstreams:
            self.bar.close()

    def _fusable(self) -> bool:
        return True

    def _fuse(self, f: Fuser, x: str) -> str:
        f.line(f"{f.bind(self._tick, 'tick')}()")
        return x

    def _flush(self) -> Any:
        self.bar.close()
        return None
