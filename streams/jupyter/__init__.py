"""Jupyter integration: live views, progress bars, live plots.

* Displaying a stream (the last expression of a cell) shows a
  :class:`~streams.jupyter.display.LiveView` of its latest element.
* ``stream.progress()`` counts elements on a ``tqdm.auto`` bar
  (:class:`~streams.jupyter.progress.Progress`).
* ``stream.sink_to_plot()`` draws lines that grow as elements arrive
  (:class:`~streams.jupyter.plot.LivePlot`).
* ``stream.visualize()`` draws the graph (see :func:`streams.graph.visualize`).

Importing this package imports none of IPython, ipywidgets, tqdm or
matplotlib: each is imported when the feature that needs it is used.
"""

from .display import LiveView, live_view
from .plot import LivePlot
from .progress import Progress, progress_bar
from .throttle import DEFAULT_INTERVAL, Throttle, flush_all

__all__ = [
    "DEFAULT_INTERVAL",
    "LivePlot",
    "LiveView",
    "Progress",
    "Throttle",
    "flush_all",
    "live_view",
    "progress_bar",
]
