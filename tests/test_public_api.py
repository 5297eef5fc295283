"""Every public operator is documented with a runnable example and typed."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

import streams
from streams import Stream


def _operator_class(value: object) -> object:
    """The node class behind a registered method (``register_api`` wraps it)."""
    func = value.__func__ if isinstance(value, staticmethod) else value
    return getattr(func, "__wrapped__", None)


OPERATORS = sorted(
    name for name, value in vars(Stream).items()
    if not name.startswith("_") and isinstance(_operator_class(value), type)
)


def test_the_streamz_surface_is_there() -> None:
    expected = {
        "map", "starmap", "filter", "remove", "accumulate", "scan", "partition",
        "partition_unique", "sliding_window", "zip", "combine_latest", "zip_latest", "union",
        "flatten", "concat", "unique", "pluck", "collect", "slice", "frequencies", "sink",
        "sink_to_list", "sink_to_textfile", "emit", "connect", "disconnect", "destroy",
        "visualize", "gather", "from_iterable", "from_textfile", "register_api",
        "scatter",  # as ``import streamz`` with dask installed: a plugin loading streams_dask
    }
    assert expected <= set(dir(Stream))


#: streamz's own top-level names (not its helpers' imports) streams does not have:
#: its machinery (loop thread, weak sets, Tornado callbacks, cuDF reading) and
#: its Dask names, which are ``streams_dask``'s (the core imports no engine).
STREAMZ_ONLY = {
    "APIRegisterMixin", "DaskStream", "OrderedWeakrefSet", "PeriodicCallback",
    "get_io_loop", "get_message_batch_cudf", "scatter", "sync",
}


def test_streamz_top_level_names_are_there() -> None:
    streamz = pytest.importorskip("streamz")
    own = {name for name in dir(streamz) if not name.startswith("_")
           and getattr(getattr(streamz, name), "__module__", "").startswith("streamz")}
    own.add("no_default")  # a string: no ``__module__``
    assert not STREAMZ_ONLY - own, "streamz has changed: update STREAMZ_ONLY"
    missing = sorted(name for name in own - STREAMZ_ONLY if not hasattr(streams, name))
    assert not missing, f"streamz has streamz.{missing}: add them to streams"


@pytest.mark.parametrize("name", OPERATORS)
def test_operator_has_a_docstring_with_an_example(name: str) -> None:
    doc = inspect.getdoc(getattr(Stream, name))
    assert doc, f"Stream.{name} has no docstring"
    assert ">>>" in doc, f"Stream.{name}'s docstring has no example"


@pytest.mark.parametrize("name", OPERATORS)
def test_operator_is_declared_for_type_checkers(name: str) -> None:
    import streams._api as api

    source = inspect.getsource(api)
    assert f"def {name}(" in source, f"declare Stream.{name} in streams/_api.py"


_ATTACHED = """
import inspect, json
import streams.core, streams_dask, streams_spark  # each backend attaches its methods
from streams import Stream
core = inspect.getsourcefile(streams.core)  # the node's own methods are typed there
names = []
for name, value in vars(Stream).items():
    func = value.__func__ if isinstance(value, staticmethod) else value
    if name.startswith("_") or not callable(func) or isinstance(func, type):
        continue
    if inspect.getsourcefile(func) != core:
        names.append(name)
print(json.dumps(names))
"""


def test_every_method_attached_to_stream_is_declared_for_type_checkers() -> None:
    """Not only operator classes: functions set on ``Stream`` by any module too.

    Listed in a fresh interpreter: tests (streamz's suite among them) register
    methods of their own on ``Stream``, and in a shared worker process those
    are still there when this test runs.
    """
    import streams._api as api

    out = subprocess.run([sys.executable, "-c", _ATTACHED], capture_output=True, text=True,
                         check=True, timeout=120)
    attached = json.loads(out.stdout)
    assert {"from_uri", "to_uri", "from_kafka_batched", "to_dataframe"} <= set(attached)
    source = inspect.getsource(api)
    undeclared = [name for name in attached if f"def {name}(" not in source]
    assert not undeclared, f"declare Stream.{undeclared} in streams/_api.py"


def test_every_export_is_documented() -> None:
    for name in streams.__all__:
        obj = getattr(streams, name)
        if callable(obj) or inspect.isclass(obj):
            assert inspect.getdoc(obj), f"streams.{name} has no docstring"


def test_package_is_marked_typed() -> None:
    from importlib.resources import files

    assert files("streams").joinpath("py.typed").is_file()


def _declared() -> dict[str, inspect.Signature]:
    """The signatures ``streams/_api.py`` declares, read from its source."""
    import ast

    import streams._api as api

    tree = ast.parse(inspect.getsource(api))
    out: dict[str, inspect.Signature] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod"
                     for d in node.decorator_list)
        if not static:
            positional = positional[1:]  # self: the upstream
        firsts = len(positional) - len(args.defaults)
        params = [inspect.Parameter(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    default=_default(args.defaults[i - firsts])
                                    if i >= firsts else inspect.Parameter.empty)
                  for i, a in enumerate(positional)]
        if args.vararg:
            params.append(inspect.Parameter(args.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            params.append(inspect.Parameter(
                a.arg, inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if d is None else _default(d)))
        if args.kwarg:
            params.append(inspect.Parameter(args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
        out[node.name] = inspect.Signature(params)
    return out


class _Any:
    """A declared default of ``...``: any default value."""

    def __eq__(self, other: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "..."


def _default(node: object) -> object:
    import ast

    try:
        value = ast.literal_eval(node)  # type: ignore[arg-type]
    except ValueError:
        return _Any()
    return _Any() if value is Ellipsis else value


def _shape(sig: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize("name", OPERATORS)
def test_declared_signature_matches_the_operator_class(name: str) -> None:
    value = vars(Stream)[name]
    klass = _operator_class(value)
    assert isinstance(klass, type)
    actual = inspect.signature(klass)
    params = list(actual.parameters.values())
    static = isinstance(value, staticmethod)
    if not static and params and params[0].kind != inspect.Parameter.VAR_POSITIONAL:
        params = params[1:]  # the upstream is the stream the method is called on
    declared = _declared()[name]
    if klass.__init__ is Stream.__init__:  # type: ignore[misc]
        # No constructor of its own: Stream's keywords (stream_name=...).
        assert _shape(declared) == [("kwargs", inspect.Parameter.VAR_KEYWORD,
                                     inspect.Parameter.empty)]
        return
    assert _shape(declared) == _shape(actual.replace(parameters=params)), (
        f"streams/_api.py declares Stream.{name}{declared}, but {klass.__name__} takes "
        f"{actual}: make them agree")
