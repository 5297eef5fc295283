"""Where ``streams.inline`` reads a function's source: its own block, else its file."""

from __future__ import annotations

import ast
import functools
import importlib.util
import linecache
import types
from typing import Any

import pytest

from streams import Stream, inline_source
from tests.streams.test_inline import fused_source, inlined

# A lambda whose line is no statement of its own: only the file shows it.
SPLIT_LAMBDA = (
    lambda x:
    x * 3 + 1)


def load(tmp_path: Any, name: str, text: str) -> types.ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parsed_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text ``ast.parse`` is given from now on.

    The parsed blocks are forgotten first: another test may have parsed the
    same lines (``def inc(x): return x + 1`` is common).
    """
    inline_source._parsed_block.cache_clear()
    sizes: list[int] = []
    parse = ast.parse

    @functools.wraps(parse)
    def counting(source: Any, *args: Any, **kwargs: Any) -> Any:
        sizes.append(len(source) if isinstance(source, str) else 0)
        return parse(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    return sizes


def test_a_function_in_a_long_module_is_read_from_its_own_lines(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Parsing a whole 2,000-line module made a pipeline's first emit take
    # ~100 ms (streamz's test_buffer, which allows 10 ms for ten emits).
    filler = "".join(f"def other_{i}(y):\n    return y - {i}\n\n\n" for i in range(2000))
    module = load(tmp_path, "long_module", filler + "def inc(x):\n    return x + 1\n")
    sizes = parsed_sizes(monkeypatch)
    source: Stream[Any] = Stream()
    out = source.map(module.inc).sink_to_list()
    source.emit(1)
    assert out == [2]
    assert "+ 1" in fused_source(source)  # written into the code, not called
    assert max(sizes) < 100  # `def inc(x): return x + 1`, not the module


@pytest.mark.parametrize("text, name", [
    ("import functools\n\n@functools.lru_cache\ndef deco(x):\n    return x\n\n\n"
     "class Holder:\n    @staticmethod\n    def method(x):\n        return x * 5\n", "method"),
    ("def make():\n    def inner(x):\n        '''Doc.'''\n        return -x\n    return inner\n"
     "\n\ninner = make()\n", "inner"),
], ids=["static method", "nested def"])
def test_an_indented_function_is_read_from_its_block(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, text: str, name: str) -> None:
    module = load(tmp_path, f"indented_{name}", text)
    func = module.Holder.method if name == "method" else module.inner
    sizes = parsed_sizes(monkeypatch)
    assert inlined(func)
    assert sizes and max(sizes) < len(text) - 20


def test_a_lambda_inside_a_longer_statement_is_read_from_its_file() -> None:
    assert inlined(SPLIT_LAMBDA)
    source: Stream[Any] = Stream()
    out = source.map(SPLIT_LAMBDA).sink_to_list()
    source.emit(2)
    assert out == [7]
    assert "* 3 + 1" in fused_source(source)


def test_lambdas_on_one_line_are_told_apart_by_their_code(tmp_path: Any) -> None:
    module = load(tmp_path, "one_line", "pair = (lambda x: x + 1, lambda x: x + 2)\n"
                                        "twins = (lambda x: x + 1, lambda x: x + 1)\n")
    for func, expected in zip(module.pair, (3, 4), strict=True):
        source: Stream[Any] = Stream()
        out = source.map(func).sink_to_list()
        source.emit(2)
        assert out == [expected] and inlined(func)
    assert not any(inlined(f) for f in module.twins)  # two candidates: no guessing


@pytest.mark.parametrize(("before", "after"), [("x * 2", "x * 2.0"), ("x * 0.0", "x * -0.0"),
                                               ("(x, 1)", "(x, True)")])
def test_a_file_edited_to_a_constant_of_another_type_is_not_guessed(
        tmp_path: Any, before: str, after: str) -> None:
    # Equal constants of other types (2 == 2.0, 0.0 == -0.0, 1 == True) passed
    # for the code that runs: the edited expression was inlined instead.
    module = load(tmp_path, f"edited_{abs(hash(after))}", f"def f(x):\n    return {before}\n")
    path = tmp_path / f"{module.__name__}.py"
    path.write_text(f"def f(x):\n    return {after}\n")
    linecache.checkcache(str(path))
    assert not inlined(module.f)
    source: Stream[Any] = Stream()
    out = source.map(module.f).sink_to_list()
    source.emit(3)
    assert repr(out) == repr([module.f(3)])  # 6 not 6.0, 0.0 not -0.0, (3, 1) not (3, True)


class _Hung:
    """What a library hangs on a parsed node (IPython's ``executing``: a parent)."""

    copied = 0

    def __deepcopy__(self, memo: Any) -> Any:
        _Hung.copied += 1
        return self


def test_attributes_other_code_hangs_on_the_parsers_shared_nodes_are_not_copied() -> None:
    # ast.parse shares one Load() between all its trees; executing gives it a
    # parent, and each inlined function's deep copy copied that parent's whole
    # module tree (a graph's first emit in Jupyter: 63 ms instead of 1.2).
    load = ast.parse("x", mode="eval").body.ctx  # type: ignore[attr-defined]
    load.parent = _Hung()
    try:
        def triple(x: int) -> int:
            return x * 3

        source: Stream[Any] = Stream()
        out = source.map(triple).sink_to_list()
        source.emit(2)
        assert out == [6] and inlined(triple)
        assert " * 3\n" in fused_source(source)  # written in, not called
        assert _Hung.copied == 0
    finally:
        del load.parent
