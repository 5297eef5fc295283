"""sink_to_plot(): the points kept, throttled redraws, the picture itself."""

from __future__ import annotations

import io

import pytest

from streams import NodeError, Stream, VirtualClock
from streams.jupyter import LivePlot


def test_numbers_pairs_and_dicts() -> None:
    a, b, c = Stream(), Stream(), Stream()
    numbers = a.sink_to_plot(widget=False)
    pairs = b.sink_to_plot(widget=False)
    named = c.sink_to_plot(widget=False)
    for i in range(3):
        a.emit(i * i)
        b.emit((10 * i, -i))
        c.emit({"up": i, "down": -i})
    assert isinstance(numbers, LivePlot)
    assert numbers.data == {"y": ([0, 1, 2], [0, 1, 4])}
    assert pairs.data == {"y": ([0, 10, 20], [0, -1, -2])}
    assert named.data == {"up": ([0, 1, 2], [0, 1, 2]), "down": ([0, 1, 2], [0, -1, -2])}


def test_keep_bounds_the_points_kept() -> None:
    source = Stream()
    plot = source.sink_to_plot(keep=3, widget=False)
    for i in range(100):
        source.emit(i)
    assert plot.data == {"y": ([97, 98, 99], [97, 98, 99])} and plot.count == 100
    with pytest.raises(ValueError, match="keep"):
        source.sink_to_plot(keep=0)


def test_redraws_are_throttled_on_the_clock(clock: VirtualClock) -> None:
    source = Stream()
    plot = source.sink_to_plot(interval=1.0, widget=True)
    for i in range(500):
        source.emit(i)
        clock.advance(0.01)  # 5 s of virtual time
    clock.advance(1.0)
    assert 5 <= plot.renders <= 7
    assert plot.widget.value[:4] == b"\x89PNG"


def test_the_line_is_drawn_with_every_point() -> None:
    from PIL import Image

    source = Stream()
    plot = source.sink_to_plot(widget=False, figsize=(4, 2))
    for i in range(50):
        source.emit(i % 7)
    (line,) = plot.axes.get_lines()
    png = plot.png()
    assert list(line.get_ydata()) == [i % 7 for i in range(50)]
    assert Image.open(io.BytesIO(png)).size == (320, 160)  # 4 x 2 inches at 80 dpi


def test_an_element_that_cannot_be_plotted_names_the_node() -> None:
    source = Stream()
    source.sink_to_plot(widget=False)
    with pytest.raises(NodeError, match=r"sink_to_plot.*'oops'.*add a \.map\(\)"):
        source.emit("oops")


def test_end_of_stream_draws_the_final_plot(clock: VirtualClock) -> None:
    source = Stream()
    plot = source.sink_to_plot(interval=100, widget=False)
    source.emit(1)
    source.emit(2)
    source.close()
    assert plot.status == "ended" and plot.renders == 2
    assert plot.text() == "live plot of stream: 2 points (y), ended"


def test_a_value_that_cannot_be_plotted_fails_alone(clock: VirtualClock) -> None:
    # It was kept: every later element failed with its error, and so did redraws.
    source = Stream()
    plot = LivePlot(source, widget=False)
    source.emit({"a": 1})
    with pytest.raises(NodeError, match=r"the y value of 'a' is 'oops' \(str\)"):
        source.emit({"a": "oops"})
    with pytest.raises(NodeError, match=r"the x value is 'x'"):
        source.emit(("x", 1))
    source.emit({"a": 2})
    clock.advance(1.0)
    source.close()
    assert plot.data == {"a": ([0, 1], [1, 2])} and plot.count == 2


def test_keep_must_be_a_whole_number() -> None:
    with pytest.raises(ValueError, match=r"keep must be an int >= 1 or None, got 2\.5"):
        Stream().sink_to_plot(widget=False, keep=2.5)


def test_a_line_named_with_an_underscore_is_in_the_legend() -> None:
    source = Stream()
    plot = LivePlot(source, widget=False)
    source.emit({"_raw": 1, "avg": 2})
    plot.png()
    legend = plot.axes.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["_raw", "avg"]
