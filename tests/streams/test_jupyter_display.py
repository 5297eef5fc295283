"""The live view: throttled redraws on the virtual clock, lifecycle, the display hook."""

from __future__ import annotations

import itertools
import subprocess
import sys
from typing import Any

import pytest

import streams.jupyter.display as display_mod
from streams import NO_DEFAULT, NodeError, Stream, VirtualClock
from streams.jupyter import LiveView, Throttle, flush_all, live_view
from streams.jupyter.display import html_of


def test_import_streams_loads_no_notebook_library() -> None:
    code = ("import sys, streams; "
            "print(sorted(m for m in ('IPython', 'ipywidgets', 'tqdm', 'matplotlib', "
            "'graphviz') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_an_undisplayed_stream_has_no_view_node() -> None:
    source = Stream()
    L = source.map(str).sink_to_list()
    source.emit(1)
    assert L == ["1"] and [type(d).__name__ for d in source.downstreams] == ["Map"]


# ----------------------------------------------------------------------
# Throttle


def test_throttle_draws_first_change_at_once_and_last_change_later(clock: VirtualClock) -> None:
    drawn: list[float] = []
    t = Throttle(lambda: drawn.append(clock.now()), interval=0.2)
    t.poke()
    assert drawn == [0.0]
    clock.advance(0.05)
    t.poke()
    t.poke()
    assert drawn == [0.0] and t.pending
    clock.advance(0.1)
    assert drawn == [0.0]
    clock.advance(0.05)
    assert drawn == [0.0, 0.2] and not t.pending
    clock.advance(10)
    assert drawn == [0.0, 0.2]  # nothing changed: no redraw


def test_throttle_bounds_the_redraw_rate_and_draws_the_final_state(clock: VirtualClock) -> None:
    drawn: list[tuple[float, int]] = []
    state = {"n": 0}
    t = Throttle(lambda: drawn.append((clock.now(), state["n"])), interval=0.2)
    for _ in range(10_000):  # 10,000 changes in 10 s of virtual time
        state["n"] += 1
        t.poke()
        clock.advance(0.001)
    clock.advance(1.0)
    times = [when for when, _ in drawn]
    assert len(drawn) <= 10 / 0.2 + 2
    assert all(b - a >= 0.2 - 1e-9 for a, b in itertools.pairwise(times))
    assert drawn[-1][1] == 10_000


class _NoLoopClock:
    """A clock with no loop to schedule on, like LoopClock outside asyncio."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def call_later(self, delay: float, callback: Any, *args: Any) -> Any:
        raise RuntimeError("no running loop")

    def sleep(self, delay: float) -> Any:
        raise RuntimeError("no running loop")


def test_throttle_without_a_loop_draws_at_a_later_change_or_at_flush() -> None:
    clock = _NoLoopClock()
    drawn: list[float] = []
    t = Throttle(lambda: drawn.append(clock.t), interval=1.0, clock=clock)
    t.poke()
    t.poke()
    assert drawn == [0.0] and t.pending
    clock.t = 1.5
    t.poke()
    assert drawn == [0.0, 1.5]
    t.poke()
    flush_all()  # what the end of a Jupyter cell does
    assert drawn == [0.0, 1.5, 1.5] and not t.pending


def test_throttle_rejects_a_negative_interval() -> None:
    with pytest.raises(ValueError, match="interval"):
        Throttle(lambda: None, interval=-1)


# ----------------------------------------------------------------------
# LiveView


@pytest.mark.parametrize("widget", [True, False])
def test_live_view_shows_latest_element_and_count(clock: VirtualClock, widget: bool) -> None:
    source = Stream()
    view = LiveView(source.map(lambda x: x * 2), interval=0.5, widget=widget)
    assert view.latest is NO_DEFAULT and "no element yet" in view.html()
    for i in range(100):
        source.emit(i)
    assert (view.latest, view.count, view.renders) == (198, 100, 1)
    clock.advance(0.5)
    assert view.renders == 2
    assert "198" in view.html() and "100 elements" in view.html()
    assert view.text() == "map(<lambda>): 100 elements, live; latest: 198"
    if widget:
        assert "198" in view.widget.value and "100 elements" in view.widget.value
    else:
        assert view.widget is None


def test_live_view_draws_the_end_of_the_stream_at_once(clock: VirtualClock) -> None:
    source = Stream()
    view = LiveView(source, interval=10, widget=True)
    for i in range(5):
        source.emit(i)
    source.close()
    assert view.status == "ended" and view.renders == 2
    assert "ended" in view.widget.value and "<pre>4</pre>" in view.widget.value


def test_live_view_stops_when_the_stream_is_destroyed(clock: VirtualClock) -> None:
    source = Stream()
    view = LiveView(source, interval=1.0, widget=True)
    source.emit(1)
    source.emit(2)  # waits for the trailing redraw
    source.destroy()
    assert view.status == "stopped" and view.node.upstreams == []
    assert "stopped" in view.widget.value and "<pre>2</pre>" in view.widget.value
    renders = view.renders
    clock.advance(5)
    assert view.renders == renders and clock.pending == 0


def test_closing_a_live_view_detaches_it(clock: VirtualClock) -> None:
    source = Stream()
    L = source.sink_to_list()
    view = LiveView(source, widget=True)
    source.emit(1)
    view.close()
    assert view.status == "closed" and view.node not in source.downstreams
    source.emit(2)
    assert L == [1, 2] and view.count == 1


def test_live_view_uses_rich_html_and_survives_a_broken_formatter(clock: VirtualClock) -> None:
    class Rich:
        def _repr_html_(self) -> str:
            return "<table><tr><td>rich</td></tr></table>"

    assert html_of(Rich()) == "<table><tr><td>rich</td></tr></table>"
    assert html_of("<script>") == "<pre>&#x27;&lt;script&gt;&#x27;</pre>"

    def broken(x: Any) -> str:
        raise ZeroDivisionError("boom")

    source = Stream()
    view = LiveView(source, formatter=broken, widget=False)
    source.emit(1)
    assert "formatter failed" in view.html() and view.count == 1


def test_live_view_is_a_described_node(clock: VirtualClock) -> None:
    source = Stream()
    view = LiveView(source, widget=False)
    spec = view.node.describe()
    assert spec.operator == "live_view" and spec.upstream_ids == (source.describe().id,)


def test_live_view_on_an_asynchronous_stream(clock: VirtualClock) -> None:
    import asyncio

    async def main() -> LiveView:
        source = Stream(asynchronous=True)
        view = LiveView(source, interval=0.2, widget=False)
        for i in range(10):
            await source.emit(i)
        await clock.advance_async(0.2)
        return view

    view = asyncio.run(main())
    assert (view.latest, view.count, view.renders) == (9, 10, 2)


# ----------------------------------------------------------------------
# The display hook


class _FakeShell:
    """What ``show`` needs of a kernel's shell: a kernel and events."""

    def __init__(self) -> None:
        self.kernel = object()
        self.hooks: list[Any] = []

        class Events:
            def register(_, name: str, func: Any) -> None:
                self.hooks.append((name, func))

        self.events = Events()


@pytest.fixture
def shown(monkeypatch: pytest.MonkeyPatch) -> tuple[_FakeShell, list[dict[str, Any]]]:
    """Pretend to run in a kernel; collect what is displayed."""
    import IPython.display

    shell = _FakeShell()
    bundles: list[dict[str, Any]] = []
    monkeypatch.setattr(display_mod, "_ipython_kernel", lambda: shell)
    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, raw=False, **kw: bundles.append(obj))
    return shell, bundles


def test_displaying_a_stream_shows_one_live_widget(
        clock: VirtualClock, shown: tuple[_FakeShell, list[dict[str, Any]]]) -> None:
    shell, bundles = shown
    source = Stream()
    doubled = source.map(lambda x: 2 * x)
    doubled._ipython_display_()
    doubled._ipython_display_()  # shown twice: still one view, one node
    views = [d for d in doubled.downstreams if isinstance(d, display_mod._ViewNode)]
    assert len(views) == 1
    view = live_view(doubled)
    assert views[0].view is view
    data = bundles[-1]
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == view.widget.model_id
    assert data["text/plain"] == "map(<lambda>): 0 elements, live"
    assert shell.hooks == [("post_execute", flush_all)]
    source.emit(21)
    assert view.latest == 42


def test_outside_a_kernel_display_prints_the_name_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    bundles: list[Any] = []
    monkeypatch.setattr(display_mod, "_ipython_kernel", lambda: None)
    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, raw=False, **kw: bundles.append(obj))
    source = Stream(stream_name="terminal")
    source._ipython_display_()
    assert bundles == [{"text/plain": "<stream 'terminal'>"}] and source.downstreams == []


def test_without_widgets_the_view_updates_its_display(
        clock: VirtualClock, monkeypatch: pytest.MonkeyPatch,
        shown: tuple[_FakeShell, list[dict[str, Any]]]) -> None:
    import IPython.display

    _, bundles = shown
    updates: list[tuple[dict[str, Any], str]] = []
    monkeypatch.setattr(IPython.display, "update_display",
                        lambda obj, raw=False, display_id="": updates.append((obj, display_id)))
    source = Stream()
    view = LiveView(source, widget=False)
    view._ipython_display_()
    assert "no element yet" in bundles[-1]["text/html"]
    source.emit("hello")
    (bundle, display_id), = updates
    assert display_id == view._surface.display_id and "hello" in bundle["text/html"]


def test_a_view_refused_by_the_graph_shows_why(
        shown: tuple[_FakeShell, list[dict[str, Any]]]) -> None:
    from streams import Segment

    class Refusing(Segment):
        backend = "spark"

        def admit(self, node: Stream[Any]) -> None:
            raise ValueError("spark cannot run live_view; gather() first")

    _, bundles = shown
    source = Stream()
    source._segment = Refusing()
    source._ipython_display_()
    assert "gather() first" in bundles[-1]["text/plain"]


def test_a_failing_view_node_follows_the_error_policy(clock: VirtualClock) -> None:
    source = Stream()
    source.sink_to_plot(widget=False)
    with pytest.raises(NodeError, match="sink_to_plot"):
        source.emit("not a number")


def test_destroy_tells_downstream_nodes_like_disconnect_does() -> None:
    # The live view stops through this; zip keeps its buffers aligned through it.
    a, b, c = Stream(), Stream(), Stream()
    zipped = a.zip(b, c)
    L = zipped.sink_to_list()
    b.emit("held")
    b.destroy()
    a.emit("a")
    c.emit("c")
    assert L == [("a", "c")]


def test_one_failing_view_does_not_keep_the_others_from_the_cell_end(
        clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    source = Stream()
    views = [LiveView(source, widget=False, interval=1.0) for _ in range(4)]
    source.emit("first")
    source.emit("last")  # each view's redraw waits for the cell's end

    def boom() -> None:
        raise RuntimeError("cannot draw")

    views[0]._throttle.render = boom
    flush_all()
    assert all("last" in v.html() for v in views[1:])
    assert "cannot draw" in caplog.text


def test_a_view_without_a_running_loop_starts_no_thread() -> None:
    # The throttle's timer went to the shared loop thread, which drew the
    # widgets from a second thread (contract 2: synchronous code starts none).
    code = (
        "import threading\n"
        "from streams import Stream\n"
        "from streams.jupyter import LiveView, flush_all\n"
        "s = Stream(); v = LiveView(s, widget=False)\n"
        "s.emit(1); s.emit(2)\n"
        "before = v.renders\n"
        "flush_all()\n"
        "print(sorted(t.name for t in threading.enumerate()), before, v.renders)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "['MainThread'] 1 2"  # the 2 is drawn at the flush


def test_a_view_of_a_stream_that_already_ended_says_so() -> None:
    source = Stream()
    mapped = source.map(str)
    source.close()
    assert LiveView(mapped, widget=False).status == "ended"
