"""Where a live view draws (:class:`Surface`), and the HTML it draws an element as.

A surface is an ``ipywidgets`` widget when ipywidgets is installed, else an
updatable IPython display (``display_id``). IPython and ipywidgets are
imported only when something is drawn.
"""

from __future__ import annotations

import base64
import html
import reprlib
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["Surface", "html_of"]


def _ipython_display() -> Any:
    """``IPython.display``, imported only when something is displayed."""
    import IPython.display

    return IPython.display


def _import_widgets() -> Any:
    try:
        import ipywidgets
    except ImportError:
        return None
    return ipywidgets


class Surface:
    """Where a live view draws: a widget, or an updatable IPython display.

    Parameters
    ----------
    make_widget : callable
        Builds the ipywidgets widget (called only if ipywidgets imports).
    set_widget : callable
        ``set_widget(widget, bundle)`` updates the widget from a MIME bundle.
    widget : bool or None
        Use a widget (True), an IPython display (False), or a widget if
        ipywidgets is installed (None).
    """

    def __init__(self, make_widget: Callable[[Any], Any],
                 set_widget: Callable[[Any, dict[str, Any]], None],
                 widget: bool | None = None) -> None:
        widgets = _import_widgets() if widget is not False else None
        if widget and widgets is None:
            raise ImportError("a widget view needs ipywidgets: pip install ipywidgets")
        self.widget: Any = make_widget(widgets) if widgets is not None else None
        self._set_widget = set_widget
        self.display_id = uuid.uuid4().hex
        self.shown = False

    def update(self, bundle: dict[str, Any]) -> None:
        """Draw ``bundle`` (a dict from MIME type to data)."""
        if self.widget is not None:
            self._set_widget(self.widget, bundle)
        elif self.shown:
            _ipython_display().update_display(_raw(bundle), raw=True,
                                              display_id=self.display_id)

    def show(self, bundle: dict[str, Any]) -> None:
        """Display the surface in the current output, ``bundle`` as fallback."""
        display = _ipython_display().display
        if self.widget is not None:
            data = dict(self.widget._repr_mimebundle_())
            # The text a front end without widgets shows (and nbconvert's text output).
            data["text/plain"] = bundle.get("text/plain", data.get("text/plain", ""))
            display(data, raw=True)
        else:
            display(_raw(bundle), raw=True, display_id=self.display_id)
        self.shown = True

    def close(self) -> None:
        if self.widget is not None:
            self.widget.close()


def _raw(bundle: dict[str, Any]) -> dict[str, Any]:
    """``bundle`` as IPython displays raw data: binary formats base64-encoded."""
    return {k: base64.b64encode(v).decode("ascii") if isinstance(v, bytes) else v
            for k, v in bundle.items()}


_short = reprlib.Repr()
_short.maxlist = _short.maxtuple = _short.maxset = _short.maxdict = 20
_short.maxstring = _short.maxother = 300
_short.maxlevel = 4


def html_of(x: Any) -> str:
    """HTML for an element: its ``_repr_html_`` if it has one, else a short repr.

    Examples
    --------
    >>> html_of("<b>")
    '<pre>&#x27;&lt;b&gt;&#x27;</pre>'
    >>> len(html_of(list(range(10**6)))) < 200
    True
    """
    rich = getattr(type(x), "_repr_html_", None)
    if rich is not None:
        try:
            out = rich(x)
        except Exception:  # a broken _repr_html_ must not break the view
            out = None
        if isinstance(out, str):
            return out
    return f"<pre>{html.escape(_short.repr(x))}</pre>"
