"""Live display of a stream in Jupyter: the latest element, updated as it flows.

A stream shown as the last expression of a cell (or passed to IPython's
``display``) attaches a :class:`LiveView`: a sink node downstream of the
stream that keeps the latest element and redraws a small widget at most once
per ``interval`` seconds, whatever the element rate. Nothing here is
imported by ``import streams``; IPython and ipywidgets load only when a
stream is displayed, so streams that are never shown pay nothing.

The drawing surface is an ``ipywidgets.HTML`` widget when ipywidgets is
installed, else an updatable IPython display (``display_id``), which works
in any front end that knows ``update_display_data``.

Here live the views (:class:`LiveView`, and the sink node and common part
the live plots of :mod:`streams.jupyter.plot` share) and what displaying a
stream does; the redraw throttle lives in :mod:`streams.jupyter.throttle`,
the drawing surface and ``html_of`` in :mod:`streams.jupyter.surface`
(importable from here too).

Examples
--------
>>> from streams import Stream, VirtualClock, use_clock
>>> with use_clock(VirtualClock()) as clock:
...     source = Stream()
...     view = LiveView(source.map(lambda x: x * 10), interval=1.0, widget=False)
...     for i in range(5):
...         source.emit(i)
>>> view.latest, view.count, view.renders      # the first element drew at once
(40, 5, 1)
>>> clock.advance(1.0)                           # the trailing redraw, one interval later
>>> view.renders, "40" in view.html()
(2, True)
"""

from __future__ import annotations

import html
import weakref
from collections.abc import Callable
from typing import Any

from ..core import NO_DEFAULT, Stream
from ..fusion import Fuser
from ..graph import label
from .surface import Surface, _ipython_display, _short, html_of
from .throttle import DEFAULT_INTERVAL, Throttle, flush_all

__all__ = ["DEFAULT_INTERVAL", "LiveView", "Surface", "Throttle", "flush_all", "html_of",
           "live_view", "show"]


def _ipython_kernel() -> Any:
    """The IPython shell if it runs in a kernel (widgets can reach a browser)."""
    import sys

    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    shell = ipython.get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return None
    return shell


_hooked_shells: weakref.WeakSet[Any] = weakref.WeakSet()


def _hook_cell_end() -> None:
    shell = _ipython_kernel()
    if shell is not None and shell not in _hooked_shells:
        shell.events.register("post_execute", flush_all)
        _hooked_shells.add(shell)


class _ViewNode(Stream[Any]):
    """The sink node through which a live view receives elements."""

    __slots__ = ("view",)
    _operator = "live_view"
    _graphviz_hidden = True  # the library adds it: visualize() draws the user's graph
    _checkpointed = False  # showing a stream or not never changes its checkpoints
    _local_only = "it draws in this process"
    _graphviz_shape = "note"

    def __init__(self, upstream: Stream[Any], view: _Watcher) -> None:
        self.view = view
        Stream.__init__(self, upstream)

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        try:
            self.view._add(x)
        except Exception as e:  # an element the view cannot draw follows the error policy
            return self._fail(x, e)
        return None

    def _fusable(self) -> bool:
        return True

    def _fuse(self, f: Fuser, x: str) -> str | None:
        # Inlined into the compiled chain: one call per element, no update() hop.
        f.step(self, x, f"{f.bind(self.view._add, 'view_add')}({x})")
        return None

    def _flush(self) -> Any:
        self.view._end("ended")
        return None

    def _remove_upstream(self, upstream: Stream[Any]) -> None:
        super()._remove_upstream(upstream)
        if not self.upstreams:
            self.view._end("stopped")


class _Watcher:
    """The common part of live views and plots: a node, a throttle, a surface."""

    #: Set by subclasses before ``_attach``.
    _surface: Surface
    #: The node class: its operator name is what pictures and errors show.
    _node_class: type[_ViewNode] = _ViewNode

    def _attach(self, stream: Stream[Any], interval: float) -> None:
        self.count = 0
        self.renders = 0
        #: ``"live"``, ``"ended"`` (the stream closed), ``"stopped"`` (destroyed or
        #: disconnected) or ``"closed"`` (:meth:`close` was called).
        self.status = "live"
        self.label = label(stream)
        #: The stream the user asked to watch (a sink's view watches what it receives).
        self.watched = stream
        self._throttle = Throttle(self._render, interval)
        receiving = _receiving(stream)
        self._node = self._node_class(receiving, self)
        if receiving._closed:  # shown after its run ended (the cell after the run's)
            self.status = "ended"

    @property
    def node(self) -> Stream[Any]:
        """The sink node attached to the stream."""
        return self._node

    def _add(self, x: Any) -> None:
        self._take(x)
        self.count += 1
        self._throttle.poke()

    def _take(self, x: Any) -> None:
        raise NotImplementedError

    def _bundle(self) -> dict[str, Any]:
        raise NotImplementedError

    def _render(self) -> None:
        self.renders += 1
        self._surface.update(self._bundle())

    def _end(self, status: str) -> None:
        if self.status != "live":
            return
        self.status = status
        self._throttle.cancel()
        self._render()

    def close(self) -> None:
        """Detach from the stream and close the widget."""
        if self.status == "closed":
            return
        self._throttle.cancel()
        self.status = "closed"  # before disconnecting, so that no "stopped" redraw happens
        for u in list(self._node.upstreams):
            u.disconnect(self._node)
        self._surface.close()

    def flush(self) -> None:
        """Draw the latest state now, if it has changed since the last draw."""
        self._throttle.flush()

    def _ipython_display_(self, **kwargs: Any) -> None:
        _hook_cell_end()
        self._surface.show(self._bundle())


class LiveView(_Watcher):
    """A live view of the latest element of a stream, for Jupyter.

    Created when a stream is displayed; create one yourself to choose the
    interval or the formatter. The view is a sink node downstream of
    ``stream``: it costs one call per element plus one clock read, and
    redraws at most once per ``interval`` seconds (see :class:`Throttle`).
    It draws the final element when the stream ends, and stops when the
    stream is destroyed or the view is closed (:meth:`close`).

    Parameters
    ----------
    stream : Stream
        The stream to watch.
    interval : float
        Minimum seconds between two redraws (default :data:`DEFAULT_INTERVAL`).
    formatter : callable, optional
        ``formatter(x) -> str`` of HTML for an element; default
        :func:`html_of` (the element's ``_repr_html_``, else a short repr).
    widget : bool or None
        Draw in an ipywidgets widget (True), an updatable IPython display
        (False), or a widget if ipywidgets is installed (None).

    Attributes
    ----------
    latest : object
        The last element seen (``streams.NO_DEFAULT`` before the first).
    count : int
        How many elements were seen.
    status : str
        ``"live"``, ``"ended"``, ``"stopped"`` or ``"closed"``.

    The view of a sink (a cell ending in ``.sink(f)``) shows what the sink
    received: a sink emits nothing itself.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> view = LiveView(source, widget=False)
    >>> source.emit({"temp": 21.5})
    >>> view.latest, view.count
    ({'temp': 21.5}, 1)
    >>> source.destroy()
    >>> view.status
    'stopped'
    """

    def __init__(self, stream: Stream[Any], interval: float = DEFAULT_INTERVAL,
                 formatter: Callable[[Any], str] | None = None,
                 widget: bool | None = None) -> None:
        self.latest: Any = NO_DEFAULT
        self.formatter = formatter or html_of
        self._surface = Surface(
            lambda w: w.HTML(layout=w.Layout(max_height="24em", overflow="auto")),
            _set_html, widget)
        self._attach(stream, interval)
        self._surface.update(self._bundle())  # "no element yet"; not counted as a render

    def _take(self, x: Any) -> None:
        self.latest = x

    def text(self) -> str:
        """The plain-text form of the view (what a front end without widgets shows)."""
        head = f"{self.label}: {self.count} element{'s' * (self.count != 1)}, {self.status}"
        if self.latest is NO_DEFAULT:
            return head
        return f"{head}; latest: {_short.repr(self.latest)}"

    def html(self) -> str:
        """The HTML the view draws."""
        head = (f"{html.escape(self.label)} &middot; {self.count} "
                f"element{'s' * (self.count != 1)} &middot; {self.status}")
        if self.latest is NO_DEFAULT:
            body = "<i>no element yet</i>"
        else:
            try:
                body = self.formatter(self.latest)
            except Exception as e:  # show the failure instead of breaking the stream
                body = f"<pre>formatter failed: {html.escape(repr(e))}</pre>"
        return (f'<div class="streams-live-view"><div style="color:#666;font-family:'
                f'sans-serif;font-size:smaller">{head}</div>{body}</div>')

    def _bundle(self) -> dict[str, Any]:
        return {"text/html": self.html(), "text/plain": self.text()}

    @property
    def widget(self) -> Any:
        """The ipywidgets widget drawn into, or None."""
        return self._surface.widget


def _set_html(widget: Any, bundle: dict[str, Any]) -> None:
    widget.value = bundle["text/html"]


def _receiving(stream: Stream[Any]) -> Stream[Any]:
    """Where a view of ``stream`` attaches: a sink emits nothing, so the view of a
    sink counts what the sink receives, from its upstream."""
    if stream._operator.startswith("sink") and len(stream.upstreams) == 1:
        return stream.upstreams[0]
    return stream


def _find_view(stream: Stream[Any]) -> LiveView | None:
    for d in _receiving(stream).downstreams:
        if isinstance(d, _ViewNode) and isinstance(d.view, LiveView) and d.view.watched is stream:
            return d.view
    return None


def live_view(stream: Stream[Any], **kwargs: Any) -> LiveView:
    """The live view of ``stream`` shown by ``display(stream)``, created if needed.

    Keyword arguments are those of :class:`LiveView`; given any, a new view
    is made instead of reusing the one displayed.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> view = live_view(source, widget=False)
    >>> live_view(source) is view
    True
    """
    view = None if kwargs else _find_view(stream)
    return view if view is not None else LiveView(stream, **kwargs)


def show(stream: Stream[Any]) -> None:
    """Display a live view of ``stream`` (``Stream._ipython_display_``).

    A stream displayed twice gets one view shown twice, so displaying costs
    at most one sink node per stream. Outside a kernel (terminal IPython)
    only the stream's name is printed: nothing could redraw the view there.
    """
    display = _ipython_display().display
    if _ipython_kernel() is None:
        display({"text/plain": repr(stream)}, raw=True)
        return
    try:
        view = live_view(stream)
    except Exception as e:  # e.g. a Spark segment refusing a Python sink node
        display({"text/plain": f"{stream!r} (no live view: {e})"}, raw=True)
        return
    view._ipython_display_()


def _ipython_display_(self: Stream[Any], **kwargs: Any) -> None:
    """In Jupyter, show a live view of the latest element (see :func:`show`)."""
    show(self)


# Attached here, not in streams.core: the core knows nothing of Jupyter (and
# IPython and ipywidgets load only when a stream is shown).
Stream._ipython_display_ = _ipython_display_  # type: ignore[attr-defined]
