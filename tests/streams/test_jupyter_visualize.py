"""visualize(): inline SVG for Jupyter, files, names and operators, engines marked."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest

from streams import Segment, Stream


class _Dask(Segment):
    backend = "dask"


class _Spark(Segment):
    backend = "spark"


def _pipeline() -> Stream[Any]:
    source = Stream(stream_name="events")
    on_dask = source.map(str)
    on_dask._segment = _Dask()  # what scatter() does, without a cluster
    on_dask.map(len).gather().sink_to_list()
    on_spark = source.map(abs)
    on_spark._segment = _Spark()
    on_spark.filter(bool).gather().sink(print, stream_name="out")
    return source


def _svg(source: Stream[Any]) -> str:
    data = source.visualize(filename=None)._repr_mimebundle_()
    return html.unescape(data["image/svg+xml"])


def test_jupyter_gets_inline_svg_with_names_and_operators() -> None:
    svg = _svg(_pipeline())
    assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
    for text in ["stream 'events'", "map(str)", "map(len)", "gather", "sink_to_list",
                 "filter(bool)", "sink(print) 'out'"]:
        assert f">{text}<" in svg, text


def test_nodes_on_dask_and_spark_are_marked_and_boxed() -> None:
    svg = _svg(_pipeline())
    assert ">runs on Dask<" in svg and ">runs on Spark<" in svg
    assert svg.count(">[dask]<") == 2 and svg.count(">[spark]<") == 2
    assert "#fde2c3" in svg and "#d6e9f8" in svg  # the engines' tints


def test_local_graphs_have_no_engine_box() -> None:
    source = Stream()
    source.map(abs).sink_to_list()
    svg = _svg(source)
    assert "runs on" not in svg and "[dask]" not in svg


@pytest.mark.parametrize("ext, magic", [("png", b"\x89PNG"), ("svg", b"<?xml")])
def test_writes_picture_files(tmp_path: Path, ext: str, magic: bytes) -> None:
    path = tmp_path / f"graph.{ext}"
    _pipeline().visualize(str(path), rankdir="LR")
    assert path.read_bytes().startswith(magic)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no dot source left


def test_a_file_name_needs_a_format() -> None:
    with pytest.raises(ValueError, match="extension"):
        Stream().visualize("graph")


def test_real_dask_and_spark_segments_are_marked() -> None:
    pytest.importorskip("distributed")
    pytest.importorskip("pyspark")
    import streams_dask  # noqa: F401 - registers scatter()
    import streams_spark  # noqa: F401 - registers to_spark()

    events: Stream[Any] = Stream(stream_name="events")
    events.scatter().map(len).gather().sink_to_list()  # type: ignore[attr-defined]
    events.to_spark().map(str).gather().sink(print)  # type: ignore[attr-defined]
    svg = _svg(events)
    assert ">runs on Dask<" in svg and ">runs on Spark<" in svg
    assert ">map(len)<" in svg and ">map(str)<" in svg


def test_a_live_view_the_library_added_is_not_drawn() -> None:
    from streams.jupyter import live_view

    source = Stream(stream_name="events")
    doubled = source.map(lambda x: 2 * x)
    live_view(doubled)  # what displaying the stream in a notebook adds
    doubled.sink_to_plot()  # added by the user: drawn
    svg = _svg(source)
    assert "live_view" not in svg
    assert "sink_to_plot" in svg
    assert svg.count("<g id=\"edge") == 2


def test_writing_a_picture_leaves_a_file_named_as_its_stem_alone(tmp_path: Path) -> None:
    # graphviz's render() wrote the DOT text to "pipeline", then deleted it.
    notes = tmp_path / "pipeline"
    notes.write_text("my notes")
    source = Stream(stream_name="in")
    source.map(abs).sink(print)
    source.visualize(str(tmp_path / "pipeline.svg"))
    source.visualize(str(tmp_path / "upper.SVG"))  # the format read as graphviz's
    assert notes.read_text() == "my notes"
    assert (tmp_path / "pipeline.svg").read_bytes().lstrip().startswith(b"<?xml")
    assert (tmp_path / "upper.SVG").read_bytes().lstrip().startswith(b"<?xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipeline", "pipeline.svg",
                                                           "upper.SVG"]
