"""The node: topology, lifecycle, registration, plugins, keep-alive."""

from __future__ import annotations

import gc
import sys
import textwrap
import weakref
from pathlib import Path
from typing import Any

import pytest

import streams.plugins
from streams import Stream, StreamClosedError


def test_emit_runs_graph_to_completion_synchronously() -> None:
    source = Stream()
    out = source.map(lambda x: x + 1).sink_to_list()
    assert source.emit(1) is None
    assert out == [2]


def test_upstreams_downstreams_and_upstream_property() -> None:
    source = Stream()
    m = source.map(str)
    assert m.upstream is source and m.upstreams == [source]
    assert source.downstreams == [m]
    assert source.upstream is None


def test_connect_and_disconnect() -> None:
    a, b = Stream(), Stream()
    out = b.sink_to_list()
    a.connect(b)
    a.emit(1)
    a.disconnect(b)
    a.emit(2)
    b.emit(3)
    assert out == [1, 3]
    assert b.upstreams == []


def test_connect_rejects_non_streams() -> None:
    with pytest.raises(TypeError, match=r"connect\(\) takes a Stream"):
        Stream().connect(print)  # type: ignore[arg-type]


def test_disconnect_unknown_node_is_an_error() -> None:
    with pytest.raises(ValueError, match="not downstream"):
        Stream().disconnect(Stream())


def test_destroy_disconnects_and_emitting_into_it_fails() -> None:
    source = Stream()
    m = source.map(str)
    out = m.sink_to_list()
    m.destroy()
    source.emit(1)  # nothing downstream any more
    assert out == []
    assert source.downstreams == []
    with pytest.raises(StreamClosedError, match=r"map\(str\) was destroyed"):
        m.emit(1)


def test_emitting_into_a_closed_source_fails_loudly() -> None:
    source = Stream()
    source.sink_to_list()
    source.close()
    with pytest.raises(StreamClosedError, match="element 5 was not emitted"):
        source.emit(5)


def test_close_reaches_multi_upstream_nodes_once_all_upstreams_closed() -> None:
    a, b = Stream(), Stream()
    u = a.union(b)
    out = u.partition(3).sink_to_list()
    a.emit(1)
    b.emit(2)
    a.close()
    assert out == []  # b still open: union is not closed
    b.close()
    assert out == [(1, 2)]


def test_repr_names_operator_function_and_stream_name() -> None:
    source = Stream(stream_name="src")
    assert repr(source) == "<stream 'src'>"
    assert repr(source.map(len, stream_name="lengths")) == "<map(len) 'lengths'>"
    # str() is streamz's format (issue 15): code that prints nodes sees the same text.
    assert str(source.partition(3)) == "<partition: 3>"
    assert str(source.map(len)) == "<map: len>"
    assert str(source) == "<src; Stream>"


def test_stream_name_on_every_operator() -> None:
    source = Stream()
    nodes = [
        source.map(str, stream_name="n"),
        source.filter(None, stream_name="n"),
        source.scan(max, stream_name="n"),
        source.partition(2, stream_name="n"),
        source.sliding_window(2, stream_name="n"),
        source.unique(stream_name="n"),
        source.pluck(0, stream_name="n"),
        source.flatten(stream_name="n"),
        source.zip(Stream(), stream_name="n"),
        source.union(Stream(), stream_name="n"),
        source.sink(print, stream_name="n"),
        source.collect(stream_name="n"),
        source.slice(1, stream_name="n"),
        source.frequencies(stream_name="n"),
    ]
    assert all(n.stream_name == "n" for n in nodes)


def test_register_api_derives_snake_case_names_and_keeps_docs() -> None:
    @Stream.register_api()
    class EveryOther(Stream):
        """Keep every other element."""

        __slots__ = ("i",)

        def __init__(self, upstream, **kwargs):
            self.i = 0
            super().__init__(upstream, **kwargs)

        def update(self, x, who=None, metadata=None):
            self.i += 1
            return self._emit(x) if self.i % 2 else None

    try:
        source = Stream()
        out = source.every_other().sink_to_list()
        for i in range(5):
            source.emit(i)
        assert out == [0, 2, 4]
        assert Stream.every_other.__doc__ == "Keep every other element."
    finally:
        del Stream.every_other


def test_register_api_staticmethod_for_sources() -> None:
    @Stream.register_api(staticmethod)
    class FromPair(Stream):
        def __init__(self, a, b, **kwargs):
            super().__init__(**kwargs)
            self.pair = (a, b)

    try:
        assert Stream.from_pair(1, 2).pair == (1, 2)
    finally:
        del Stream.from_pair


def test_pipeline_lives_while_its_source_is_referenced_and_dies_after() -> None:
    # streamz kept every sink in a global set, so pipelines never died (#252).
    source = Stream()
    out: list[int] = []
    sink = source.map(lambda x: x).sink(out.append)
    probe = weakref.ref(sink)
    del sink
    gc.collect()
    source.emit(1)
    assert out == [1] and probe() is not None
    del source
    gc.collect()
    assert probe() is None


@pytest.mark.parametrize("group", ["streams.nodes", "streamz.nodes"])
def test_plugins_from_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   group: str) -> None:
    # A real distribution on sys.path declaring an entry point, as pip would install it.
    pkg = tmp_path / "streams_plugin_demo.py"
    pkg.write_text(textwrap.dedent("""
        from streams import Stream

        class Triple(Stream):
            def update(self, x, who=None, metadata=None):
                return self._emit(3 * x)
    """))
    dist = tmp_path / "streams_plugin_demo-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: streams-plugin-demo\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[{group}]\ntriple = streams_plugin_demo:Triple\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(streams.plugins, "loaded", False)
    try:
        source = Stream()  # the first node created loads the plugins
        out = source.triple().sink_to_list()
        source.emit(2)
        assert out == [6]
    finally:
        for name in ("triple",):
            if name in Stream.__dict__:
                delattr(Stream, name)
        sys.modules.pop("streams_plugin_demo", None)


def test_an_entry_point_to_a_streamz_class_says_what_to_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import EntryPoint

    (tmp_path / "streamz_plugin_demo.py").write_text(textwrap.dedent("""
        import streamz

        class Triple(streamz.Stream):
            def update(self, x, who=None, metadata=None):
                return self._emit(3 * x)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    Stream.register_plugin_entry_point(
        EntryPoint("streamz_triple", "streamz_plugin_demo:Triple", "streams.nodes"))
    try:
        with pytest.raises(TypeError, match=r"^Error loading streamz_triple from module "
                           r"streamz_plugin_demo: .*Triple'> must be a subclass of "
                           r"streams\.Stream: it derives from streamz's Stream; import Stream "
                           r"from streams instead$"):
            Stream().streamz_triple()
    finally:
        delattr(Stream, "streamz_triple")
        sys.modules.pop("streamz_plugin_demo", None)


def test_unknown_attribute_is_a_plain_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_operator"):
        Stream.no_such_operator
    with pytest.raises(AttributeError, match="no_such_operator"):
        Stream().no_such_operator  # type: ignore[attr-defined]


def test_mixing_explicit_sync_and_async_is_refused() -> None:
    # issue 15, as streamz: asynchronous= said twice, differently, in one graph.
    sync = Stream(asynchronous=False)
    with pytest.raises(ValueError, match="both asynchronous and synchronous"):
        Stream(asynchronous=True, upstream=sync)
    assert Stream(upstream=sync).asynchronous is False
    assert Stream(asynchronous=True, upstream=Stream()).asynchronous is True


def test_a_refused_connect_leaves_the_graph_as_it_was() -> None:
    # The refused node was left in downstreams: after any later change every
    # element failed ("join received from ..., which is not its upstream").
    left, right, third = Stream(), Stream(), Stream()
    joined = left.join(right, key=lambda x: x, within=0, time=lambda x: x)
    seen = third.sink_to_list()
    third.emit(1)
    with pytest.raises(ValueError, match="joins exactly two streams"):
        third.connect(joined)
    assert joined not in third.downstreams
    third.map(str)  # a change: the push function is compiled again
    third.emit(2)
    assert seen == [1, 2]


def test_a_node_connected_twice_gets_each_element_once() -> None:
    # As streamz, whose downstreams are a set: a notebook cell that calls
    # a.connect(b) run twice does not double b's elements.
    a, b = Stream(), Stream()
    out = b.sink_to_list()
    a.connect(b)
    a.connect(b)
    a.emit(1)
    assert out == [1]
    assert a.downstreams.count(b) == 1 and b.upstreams == [a]
    a.disconnect(b)
    a.emit(2)
    assert out == [1]


def test_a_streamz_plugin_holding_elements_counts_their_references_as_in_streamz() -> None:
    from streams import RefCounter

    class pairs(Stream):  # streamz names node classes as their methods
        """A streamz-style node: holds one element, emits pairs, with their metadata."""

        def __init__(self, upstream: Stream, **kwargs: Any) -> None:
            self.held: list[Any] = []
            self.held_metadata: list[Any] = []
            Stream.__init__(self, upstream, **kwargs)

        def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
            self._retain_refs(metadata)
            self.held.append(x)
            self.held_metadata.extend(metadata or [])
            if len(self.held) < 2:
                return None
            out, self.held = tuple(self.held), []
            metadata, self.held_metadata = self.held_metadata, []
            pending = self._emit(out, metadata)
            self._release_refs(metadata)
            return pending

    source = Stream()
    node = pairs(source)
    out = node.sink_to_list()
    first, second = RefCounter(), RefCounter()
    source.emit(1, metadata=[{"ref": first}])
    assert first.count == 1  # held
    source.emit(2, metadata=[{"ref": second}])
    assert (first.count, second.count, out) == (0, 0, [(1, 2)])
    # Named by its class, as streamz names every node; filter's function as streamz's.
    assert str(node) == "<pairs>" and node._label() == "pairs"
    keep = lambda x: x > 0
    assert source.filter(keep).predicate is keep
