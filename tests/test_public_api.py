"""Every public operator is documented with a runnable example and typed."""

from __future__ import annotations

import inspect

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
    }
    assert expected <= set(dir(Stream))


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


def test_every_export_is_documented() -> None:
    for name in streams.__all__:
        obj = getattr(streams, name)
        if callable(obj) or inspect.isclass(obj):
            assert inspect.getdoc(obj), f"streams.{name} has no docstring"


def test_package_is_marked_typed() -> None:
    from importlib.resources import files

    assert files("streams").joinpath("py.typed").is_file()
