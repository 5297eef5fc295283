"""Live plots: ``stream.sink_to_plot()`` draws lines that grow as elements arrive.

The plot is drawn with matplotlib (its object API and the Agg renderer: no
pyplot, no global figure state, no GUI backend) into a PNG shown in an
``ipywidgets.Image``, or in an updatable IPython display without
ipywidgets. Redraws are throttled like the live view (at most one per
``interval`` seconds of the stream clock), because drawing a figure costs
milliseconds while elements may arrive every microsecond. matplotlib is
imported when a plot is created, never at ``import streams``.

Examples
--------
>>> from streams import Stream
>>> source = Stream()
>>> plot = source.sink_to_plot(widget=False)
>>> for y in [1, 4, 9]:
...     source.emit(y)
>>> plot.data
{'y': ([0, 1, 2], [1, 4, 9])}
>>> plot.png()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
"""

from __future__ import annotations

import datetime
import io
from collections import deque
from collections.abc import Mapping
from numbers import Real
from typing import Any

from ..core import Stream
from .display import _ViewNode, _Watcher
from .surface import Surface

__all__ = ["LivePlot"]


class _PlotNode(_ViewNode):
    __slots__ = ()
    _operator = "sink_to_plot"
    _graphviz_hidden = False  # the user added it
    _checkpointed = False  # but it only draws: adding or removing a plot keeps checkpoints
    _graphviz_shape = "trapezium"


@Stream.register_api(attribute_name="sink_to_plot")
class LivePlot(_Watcher):
    """Plot a stream's elements as lines, redrawn as they arrive (``sink_to_plot``).

    Each element adds one point per line:

    * a number ``y``: one line ``"y"``, x is the element's index;
    * a pair ``(x, y)``: one line ``"y"`` at that x;
    * a mapping ``{"name": y, ...}``: one line per name, x is the index.

    The returned object shows the plot when it is the last expression of a
    Jupyter cell; :attr:`figure` is the matplotlib figure, to style or save.

    Parameters
    ----------
    stream : Stream
        The stream to plot.
    interval : float
        Minimum seconds between two redraws.
    keep : int or None
        Keep the last ``keep`` points of each line (None: all of them).
    title, xlabel, ylabel : str, optional
        Labels of the axes.
    figsize : tuple of float
        Width and height in inches.
    widget : bool or None
        Draw in an ``ipywidgets.Image`` (True), an updatable IPython display
        (False), or a widget if ipywidgets is installed (None).

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> plot = source.map(lambda t: {"sin": t % 3, "cos": t % 2}).sink_to_plot(
    ...     widget=False, keep=2)
    >>> for t in range(4):
    ...     source.emit(t)
    >>> plot.data["sin"], plot.count
    (([2, 3], [2, 0]), 4)
    """

    _node_class = _PlotNode

    def __init__(self, stream: Stream[Any], interval: float = 0.5, keep: int | None = 10_000,
                 title: str | None = None, xlabel: str | None = None,
                 ylabel: str | None = None, figsize: tuple[float, float] = (6.0, 3.0),
                 widget: bool | None = None) -> None:
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int)
                                 or keep < 1):
            raise ValueError(f"sink_to_plot(): keep must be an int >= 1 or None, got {keep!r}")
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.keep = keep
        self._series: dict[str, tuple[deque[Any], deque[Any]]] = {}
        self._lines: dict[str, Any] = {}
        #: The matplotlib figure (drawn with Agg).
        self.figure = Figure(figsize=figsize, layout="constrained")
        FigureCanvasAgg(self.figure)
        self.axes = self.figure.add_subplot()
        self.axes.set_title(title or f"{stream._label()}")
        if xlabel:
            self.axes.set_xlabel(xlabel)
        if ylabel:
            self.axes.set_ylabel(ylabel)
        self.axes.grid(True, alpha=0.3)
        self._surface = Surface(lambda w: w.Image(format="png"), _set_image, widget)
        self._attach(stream, interval)
        self._surface.update(self._bundle())  # empty axes until the first point

    def _point(self, name: str, x: Any, y: Any) -> None:
        series = self._series.get(name)
        if series is None:
            series = self._series[name] = (deque(maxlen=self.keep), deque(maxlen=self.keep))
        series[0].append(x)
        series[1].append(y)

    def _take(self, e: Any) -> None:
        if isinstance(e, Mapping):
            points = [(str(name), self.count, y) for name, y in e.items()]
        elif isinstance(e, tuple | list) and len(e) == 2:
            points = [("y", e[0], e[1])]
        else:
            points = [("y", self.count, e)]
        # Every value is checked before any is kept: a point matplotlib
        # cannot draw would fail each later redraw, not only this element.
        for name, x, y in points:
            for what, value in (("x", x), ("y", y)):
                if not _plottable(value):
                    shape = "" if len(points) == 1 and name == "y" else f" of {name!r}"
                    raise TypeError(
                        f"sink_to_plot() plots numbers, (x, y) pairs or dicts of numbers "
                        f"(dates as x too): the {what} value{shape} is {value!r} "
                        f"({type(value).__name__}); add a .map() before it that makes one")
        for name, x, y in points:
            self._point(name, x, y)

    @property
    def data(self) -> dict[str, tuple[list[Any], list[Any]]]:
        """The points kept, as ``{line name: (xs, ys)}``."""
        return {name: (list(xs), list(ys)) for name, (xs, ys) in self._series.items()}

    def _draw(self) -> None:
        for name, (xs, ys) in self._series.items():
            line = self._lines.get(name)
            if line is None:
                (line,) = self.axes.plot([], [])
                self._lines[name] = line
                if len(self._series) > 1:  # outside the axes: never over the lines
                    # Labels given: matplotlib leaves out a line whose own
                    # label starts with "_" (a dict key such as "_raw").
                    self.axes.legend(list(self._lines.values()), list(self._lines),
                                     loc="upper left", bbox_to_anchor=(1.01, 1.0))
            line.set_data(list(xs), list(ys))
        self.axes.relim()
        self.axes.autoscale_view()

    def png(self) -> bytes:
        """The plot as PNG bytes, drawn from the current data."""
        self._draw()
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=80)
        return buf.getvalue()

    def text(self) -> str:
        """A plain-text summary (what a front end without images shows)."""
        names = ", ".join(self._series) or "no line yet"
        return f"live plot of {self.label}: {self.count} points ({names}), {self.status}"

    def _bundle(self) -> dict[str, Any]:
        return {"image/png": self.png(), "text/plain": self.text()}

    @property
    def widget(self) -> Any:
        """The ipywidgets ``Image`` drawn into, or None."""
        return self._surface.widget


def _set_image(widget: Any, bundle: dict[str, Any]) -> None:
    widget.value = bundle["image/png"]


def _plottable(value: Any) -> bool:
    """A number, or a date or time (an x value matplotlib draws)."""
    if isinstance(value, Real | datetime.date):
        return True
    return type(value).__name__ in ("datetime64", "timedelta64")
