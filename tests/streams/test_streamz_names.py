"""streamz's top-level and ``streamz.dask`` names, after changing only the import.

``import streamz`` brings ``Stream.scatter`` (when dask is installed) and the
names ``sink_to_file``, ``no_default``, ``convert_interval``,
``from_kafka_batched``; ``streamz.dask``'s names are ``streams_dask``'s here.
What depends on the import being the only one runs in a fresh interpreter:
in this process other tests have imported ``streams_dask`` already.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import streams
from streams import Stream

streamz = pytest.importorskip("streamz")


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_import_streams_alone_makes_scatter_work_without_importing_dask() -> None:
    out = _run("""
        import sys
        import streams
        engines = ("dask", "distributed", "pyspark", "streams_dask", "streams_spark")
        print(sorted(m for m in sys.modules if m.partition(".")[0] in engines))
        from dask.distributed import Client
        if __name__ == "__main__":
            with Client(processes=False, n_workers=1, threads_per_worker=1,
                        dashboard_address=None) as client:
                source = streams.Stream()
                L = source.scatter().map(lambda x: x + 1).buffer(4).gather().sink_to_list()
                for i in range(5):
                    source.emit(i)
                source.close()
                print(L, "streams_dask" in sys.modules)
    """)
    assert out.splitlines() == ["[]", "[1, 2, 3, 4, 5] True"]


def test_every_engine_method_loads_its_engine_on_first_call() -> None:
    out = _run("""
        import streams
        s = streams.Stream()
        print(type(s.to_dask()).__name__, type(s.scatter()).__name__,
              type(streams.Stream().to_spark()).__name__)
        # The plugin stubs are replaced: the methods are the engines' registered classes.
        print(streams.Stream.scatter.__wrapped__.__name__,
              streams.Stream.to_spark.__wrapped__.__name__)
    """)
    assert out.splitlines() == ["ToDask Scatter ToSpark", "Scatter ToSpark"]


_NO_ENGINES = """
    import sys

    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("dask", "distributed", "pyspark"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, NotInstalled())
    import streams
"""


def test_without_the_engine_installed_the_error_names_the_extra() -> None:
    out = _run(_NO_ENGINES + """
    for call in (lambda: streams.Stream().scatter(), lambda: streams.Stream().to_spark()):
        try:
            call()
        except ImportError as e:
            print(e)
    """)
    assert out.splitlines() == [
        'scatter() needs distributed, which is not installed: pip install "streams[dask]"',
        'to_spark() needs pyspark, which is not installed: pip install "streams[spark]"',
    ]


def test_streamz_dask_names_are_in_streams_dask() -> None:
    """``from streamz.dask import DaskStream, scatter, gather``: from streams_dask here."""
    import streams_dask

    assert streams_dask.DaskStream is Stream
    assert Stream.scatter.__wrapped__ is streams_dask.scatter  # type: ignore[attr-defined]
    assert Stream.gather.__wrapped__ is streams_dask.gather  # type: ignore[attr-defined]


def test_the_engines_are_plugins_of_the_core() -> None:
    """The core names no engine: they join as entry points (streams.plugins), and one
    imported before the plugins are read is not reported as a clash."""
    out = _run("""
        import logging, sys
        logging.basicConfig(stream=sys.stdout)
        import streams_dask, streams_spark
        import streams, streams.plugins
        streams.plugins.loaded = False  # read them again, the engines already registered
        print(streams.plugins.load_plugins())
    """)
    assert out.splitlines() == ["[]"]
    from importlib.metadata import entry_points

    declared = {(ep.group, ep.name, ep.module.partition(".")[0])
                for group in ("streams.nodes", "streams.sources")
                for ep in entry_points().select(group=group)}
    assert {("streams.nodes", "scatter", "streams_dask"),
            ("streams.nodes", "to_spark", "streams_spark"),
            ("streams.sources", "from_spark", "streams_spark")} <= declared


@pytest.mark.parametrize("name", ["sink_to_file", "convert_interval", "from_kafka_batched",
                                  "get_message_batch", "no_default"])
def test_streamz_top_level_names_exist(name: str) -> None:
    assert hasattr(streamz, name)
    assert getattr(streams, name) is not None
    assert name in streams.__all__


@pytest.mark.parametrize("name", ["sink_to_file", "convert_interval", "get_message_batch"])
def test_same_signature_as_streamz(name: str) -> None:
    def shape(f: object) -> list[tuple[str, object]]:
        return [(p.name, p.default) for p in inspect.signature(f).parameters.values()]  # type: ignore[arg-type]

    assert shape(getattr(streams, name)) == shape(getattr(streamz, name))


@pytest.mark.parametrize("value", [3, 0.5, None, "500ms", "2s", "1min", "1.5h", "10 seconds",
                                   "1d", "250us"])
def test_convert_interval_as_streamz(value: object) -> None:
    assert streams.convert_interval(value) == streamz.convert_interval(value)


def test_convert_interval_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="convert_interval"):
        streams.convert_interval("soon")


def test_sink_to_file_as_streamz(tmp_path: Path) -> None:
    def run(lib: object, path: Path) -> str:
        source = lib.Stream()  # type: ignore[attr-defined]
        with lib.sink_to_file(str(path), source.map(str), prefix="> ",  # type: ignore[attr-defined]
                              suffix=";\n", flush=True) as f:
            source.emit(1)
            source.emit(2)
            assert not f.closed
        return path.read_text()

    assert run(streams, tmp_path / "s.txt") == run(streamz, tmp_path / "z.txt") == "> 1;\n> 2;\n"


def test_no_default_is_an_absent_start() -> None:
    source = Stream()
    totals = source.accumulate(lambda a, b: a + b, start=streams.no_default).sink_to_list()
    for x in (1, 2, 3):
        source.emit(x)
    assert totals == [1, 3, 6]
    assert streams.no_default is streams.NO_DEFAULT


def test_from_kafka_batched_is_the_stream_method() -> None:
    assert streams.from_kafka_batched is Stream.from_kafka_batched
    batches = streams.from_kafka_batched("events", {"bootstrap.servers": "h:9092",
                                                    "group.id": "etl"})
    assert [u.describe().operator for u in batches.upstreams] == ["from_kafka_batched"]


def test_from_kafka_batched_takes_streamzs_arguments_in_streamzs_order() -> None:
    def names(f: object) -> list[str]:
        return list(inspect.signature(f).parameters)  # type: ignore[arg-type]

    ours, theirs = names(streams.from_kafka_batched), names(streamz.from_kafka_batched)
    assert ours[:len(theirs) - 1] == theirs[:-1]  # all but **kwargs, in order
    params = {"bootstrap.servers": "h:9092", "group.id": "etl"}
    assert streams.from_kafka_batched("events", params, engine=None) is not None
    with pytest.raises(ValueError, match=r"engine='cudf' is not supported"):
        streams.from_kafka_batched("events", params, engine="cudf")
