"""Inlined user functions (``streams.inline``) behave exactly as called ones."""

from __future__ import annotations

import builtins
import functools
import importlib.util
import linecache
import logging
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import Stream, inline
from streams.errors import NodeError
from streams.fusion import SOURCE_KEY, compile_push

FACTOR = 2


def scaled(x: Any) -> Any:
    return x * FACTOR


def absolute(x: Any) -> Any:
    """A docstring, then the expression."""
    return abs(x)


def first_plus_one(x: Any) -> Any:
    return x[0] + 1


def small_multiple(x: Any) -> Any:
    return type(x) is int and x % 3 == 0


INLINED: dict[str, Callable[[Any], Any]] = {
    "scaled": scaled,
    "absolute": absolute,
    "first_plus_one": first_plus_one,
    "small_multiple": small_multiple,
    "arith": lambda x: x * 2 - 1,
    "floor_div": lambda x: 10 // x,
    "conditional": lambda x: (x, -x) if x > 0 else None,
    "builtins": lambda x: len(x) > 2 if isinstance(x, str) else max(x, 0) + min(abs(x), 10),
    "containers": lambda x: {"a": x, "b": [x, x // 2], "c": {x}},
    "slice": lambda x: x[1:3],
    "rounding": lambda x: round(x / 3, 2),
    "boolean": lambda x: not x or x < 0,
    "chained": lambda x: 0 < x <= 10 and x != 5,
    # Always a bool: a filter tests them outside a try statement.
    "identity": lambda x: type(x[0]) is int,
    "membership": lambda x: x[0] in (1, 2) or not isinstance(x, str),
}

ELEMENTS = st.one_of(
    st.none(), st.integers(-20, 20), st.floats(-1e6, 1e6), st.text(max_size=4),
    st.tuples(st.integers(-5, 5)), st.lists(st.integers(), max_size=3),
)


@contextmanager
def not_inlined() -> Iterator[None]:
    saved, inline.enabled = inline.enabled, False
    try:
        yield
    finally:
        inline.enabled = saved


def fused_source(source: Stream[Any]) -> str:
    text: str = compile_push(source).__globals__[SOURCE_KEY]
    return text


def inlined(func: Callable[[Any], Any]) -> bool:
    return inline.expression(func, "x", lambda obj, hint: hint) is not None


def outcomes(operator: str, func: Callable[[Any], Any], data: list[Any]) -> list[Any]:
    """What each element gives through ``operator(func)``: a value, or the routed error."""
    source: Stream[Any] = Stream()
    node = getattr(source, operator)(func).on_error("route")
    out: list[Any] = []
    node.sink(lambda y: out.append(("value", y)))
    node.errors.sink(lambda r: out.append(
        ("error", r.element, type(r.exception), str(r.exception), r.node is node)))
    for x in data:
        source.emit(x)
    return out


@pytest.mark.parametrize("name", sorted(INLINED))
def test_the_examples_are_inlined(name: str) -> None:
    source: Stream[Any] = Stream()
    source.map(INLINED[name]).sink_to_list()
    assert inlined(INLINED[name])
    assert "except Exception as first_" in fused_source(source)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(INLINED)), operator=st.sampled_from(["map", "filter"]),
       data=st.lists(ELEMENTS, max_size=12))
def test_inlined_gives_what_the_call_gives(name: str, operator: str, data: list[Any]) -> None:
    func = INLINED[name]
    got = outcomes(operator, func, data)
    with not_inlined():
        expected = outcomes(operator, func, data)
    assert got == expected


def raised(func: Callable[[Any], Any], x: Any, iterable: bool) -> NodeError:
    if iterable:
        source: Stream[Any] = Stream.from_iterable([x])
        source.map(func).sink_to_list()
        with pytest.raises(NodeError) as info:
            source.start()
    else:
        source = Stream()
        source.map(func).sink_to_list()
        with pytest.raises(NodeError) as info:
            source.emit(x)
    return info.value


@pytest.mark.parametrize("iterable", [False, True], ids=["emit", "from_iterable"])
@pytest.mark.parametrize("name, x", [
    ("floor_div", 0), ("first_plus_one", None), ("scaled", None), ("conditional", "a")])
def test_an_error_is_the_functions_own(name: str, x: Any, iterable: bool) -> None:
    func = INLINED[name]
    error = raised(func, x, iterable)
    with not_inlined():
        expected = raised(func, x, iterable)
    cause = error.__cause__
    assert cause is not None and expected.__cause__ is not None
    assert (type(error), str(error)) == (type(expected), str(expected))
    assert (type(cause), str(cause)) == (type(expected.__cause__), str(expected.__cause__))
    assert cause.__context__ is None  # not chained to the inlined expression's failure
    tb = cause.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    assert tb is not None and tb.tb_frame.f_code is func.__code__  # raised in the function


def test_an_error_while_handling_another_keeps_that_context() -> None:
    try:
        raise KeyError("handled by the caller")
    except KeyError as handled:
        error = raised(INLINED["floor_div"], 0, iterable=False)
        with not_inlined():
            expected = raised(INLINED["floor_div"], 0, iterable=False)
        assert expected.__cause__ is not None and expected.__cause__.__context__ is handled
        assert error.__cause__ is not None and error.__cause__.__context__ is handled


def test_event_time_windows_inline_their_time_and_key_functions() -> None:
    def windows() -> tuple[Stream[Any], list[Any], list[Any]]:
        source: Stream[Any] = Stream()
        node = source.timed_window(10, time=lambda e: e[0], key=lambda e: e[1] % 2)
        node.on_error("route")
        errors = node.errors.map(lambda r: (r.element, repr(r.exception))).sink_to_list()
        return source, node.sink_to_list(), errors

    source, out, errors = windows()
    assert fused_source(source).count("except Exception as first_") == 2
    with not_inlined():
        reference, expected, expected_errors = windows()
    for e in [(1, 1), (2, 2), None, (3, "a"), (15, 3)]:
        source.emit(e)
        reference.emit(e)
    assert (out, errors) == (expected, expected_errors)
    assert [element for element, _ in errors] == [None, (3, "a")]


def test_skip_logs_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    source: Stream[Any] = Stream()
    out = source.map(INLINED["floor_div"]).on_error("skip").sink_to_list()
    with caplog.at_level(logging.WARNING, logger="streams"):
        for x in [2, 0, 5]:
            source.emit(x)
    assert out == [5, 2]
    assert [r.getMessage() for r in caplog.records] == [
        "map(<lambda>) failed on element 0: ZeroDivisionError: integer division or modulo by zero"]


def test_a_global_rebound_after_the_graph_is_built_is_seen() -> None:
    global FACTOR
    source: Stream[Any] = Stream.from_iterable([1, 2])
    out = source.map(scaled).sink_to_list()
    source.emit(1)
    FACTOR = 5
    try:
        source.emit(1)
        source.start()  # the fused loop
    finally:
        FACTOR = 2
    assert out == [2, 5, 5, 10]


def abs_and(x: Any) -> Any:
    return (abs, x)


def test_a_global_shadowing_a_builtin_is_the_modules() -> None:
    def shadow(v: Any) -> Any:
        return v

    globals()["abs"] = shadow
    try:
        assert inlined(abs_and)
        source: Stream[Any] = Stream()
        out = source.map(abs_and).sink_to_list()
        source.emit(1)
    finally:
        del globals()["abs"]
    assert out == [(shadow, 1)]


def test_a_deleted_global_raises_the_functions_name_error() -> None:
    source: Stream[Any] = Stream()
    source.map(scaled).sink_to_list()
    del globals()["FACTOR"]
    try:
        with pytest.raises(NameError, match="name 'FACTOR' is not defined"):
            source.emit(1)
    finally:
        globals()["FACTOR"] = 2


def closure() -> tuple[Callable[[Any], Any], Callable[[Any], None]]:
    k = 1

    def times_k(x: Any) -> Any:
        return x * k

    def set_k(value: Any) -> None:
        nonlocal k
        k = value

    return times_k, set_k


def test_a_closure_variable_rebound_by_nonlocal_is_seen() -> None:
    times_k, set_k = closure()
    assert inlined(times_k)
    source: Stream[Any] = Stream()
    out = source.map(times_k).sink_to_list()
    source.emit(3)
    set_k(10)
    source.emit(3)
    assert out == [3, 30]


def test_lambdas_on_one_line_are_told_apart() -> None:
    plus, minus, renamed = (lambda x: x + 1), (lambda x: x - 1), (lambda y: y + 1)
    twin_a, twin_b = (lambda x: x * 2), (lambda x: x * 2)
    assert [inline.expression(f, "v", lambda obj, hint: hint) for f in (plus, minus, renamed)] \
        == ["v + 1", "v - 1", "v + 1"]
    assert not inlined(twin_a) and not inlined(twin_b)  # two look-alikes: not guessed
    source: Stream[Any] = Stream()
    outs = [source.map(f).sink_to_list() for f in (plus, minus, renamed, twin_a, twin_b)]
    source.emit(10)
    assert outs == [[11], [9], [11], [20], [20]]


def test_a_source_file_edited_after_import_is_not_trusted(tmp_path: Any) -> None:
    path = tmp_path / "edited_module.py"
    path.write_text("def f(x):\n    return x + 1\n")
    spec = importlib.util.spec_from_file_location("edited_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert inline.expression(module.f, "v", lambda obj, hint: hint) == "v + 1"
    path.write_text("def f(x):\n    return x + 2\n")
    linecache.checkcache(str(path))
    module.f.__code__ = module.f.__code__.replace()  # a new code object: looked up again
    assert not inlined(module.f)
    source: Stream[Any] = Stream()
    out = source.map(module.f).sink_to_list()
    source.emit(1)
    assert out == [2]


def test_a_global_is_read_as_an_attribute_of_its_module() -> None:
    source: Stream[Any] = Stream()
    source.map(scaled).sink_to_list()
    text = fused_source(source)
    assert ".FACTOR" in text and "globals_" not in text


def load_module(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, text: str) -> types.ModuleType:
    """A module imported from ``text``, as ``sys.modules`` knows it."""
    path = tmp_path / "globals_module.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("globals_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "globals_module", module)
    spec.loader.exec_module(module)
    return module


MODULE = """\
K = 1

def plus_k(x):
    return (x + K, MISSING if x == 0 else x)

def own_dict(x):
    return (x, __dict__)
"""


@pytest.mark.parametrize("twist", ["getattr", "subclass", "plain"])
def test_a_module_answering_for_its_names_is_read_through_its_dict(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, twist: str) -> None:
    module = load_module(tmp_path, monkeypatch, MODULE)
    if twist == "getattr":  # it answers for names it does not hold; a function raises
        module.__getattr__ = lambda name: "from __getattr__"  # type: ignore[method-assign]
    elif twist == "subclass":
        class Answering(types.ModuleType):
            K = property(lambda self: "from a property")
            MISSING = property(lambda self: "from a property")

        module.__class__ = Answering
    source: Stream[Any] = Stream()
    out = source.map(module.plus_k).on_error("route")
    values = out.sink_to_list()
    errors = out.errors.map(lambda r: type(r.exception)).sink_to_list()
    source.emit(1)
    source.emit(0)
    assert values == [(2, 1)] and errors == [NameError]
    assert ("globals_module_" in fused_source(source)) == (twist == "plain")


def test_a_name_the_module_type_has_is_read_through_the_dict(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_module(tmp_path, monkeypatch, MODULE)
    source: Stream[Any] = Stream()
    out = source.map(module.own_dict).on_error("route")
    errors = out.errors.map(lambda r: type(r.exception)).sink_to_list()
    source.emit(1)
    assert errors == [NameError]  # not the module's ``__dict__`` attribute
    assert "['__dict__']" in fused_source(source)


def _uses_len(x: Any) -> Any:
    return len(x)


#: The same function in a module that defines its own ``len``.
uses_module_len = types.FunctionType(_uses_len.__code__, {
    "len": lambda x: 0, "__builtins__": builtins})


def two_statements(x: Any) -> Any:
    y = x
    return y


def with_default(x: Any, k: int = 1) -> Any:
    return x + k


CALLED: list[Any] = []


@pytest.mark.parametrize("func", [
    lambda x: print(x),
    lambda x: CALLED.append(x) or x,
    lambda x: sorted(x),
    lambda x: x.upper(),
    lambda x: [y for y in x],
    lambda x: (y := x) + y,
    lambda x: f"{x}",
    lambda x: type("T", (), {}),
    lambda x: max(x, key=abs),
    lambda x: lambda: x,
    lambda *x: x,
    two_statements,
    with_default,
    abs,
    functools.partial(scaled),
], ids=lambda f: getattr(f, "__name__", "partial"))
def test_functions_with_effects_or_other_calls_are_called(func: Any) -> None:
    assert not inlined(func)


def test_a_builtin_the_module_redefines_is_not_called_inline() -> None:
    assert inlined(_uses_len)
    assert not inlined(uses_module_len)  # its ``len`` may do anything


class Counted:
    """An element whose ``value`` counts its reads."""

    reads = 0

    def __init__(self, value: Any) -> None:
        self._value = value

    @property
    def value(self) -> Any:
        Counted.reads += 1
        return self._value


def test_an_element_is_read_once_and_again_only_when_it_fails() -> None:
    source: Stream[Any] = Stream()
    out = source.map(lambda c: c.value + 1).on_error("skip").sink_to_list()
    Counted.reads = 0
    source.emit(Counted(1))
    assert (out, Counted.reads) == ([2], 1)
    source.emit(Counted(None))  # the expression fails, then the function does
    assert (out, Counted.reads) == ([2], 3)


def peak_plus_one(it: Any) -> Any:
    return max(it) + 1


@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_an_element_the_expression_changed_before_failing_fails(policy: str) -> None:
    """max() consumes 1 and "a" of the iterator and raises; a second call then saw [5]
    alone and gave 6, where the function fails on the element: it fails here too."""
    source: Stream[Any] = Stream()
    node = source.map(peak_plus_one).on_error(policy)
    out = node.sink_to_list()
    assert "= max_" in fused_source(source)  # written in place
    if policy == "raise":
        with pytest.raises(TypeError, match="'>' not supported"):
            source.emit(iter([1, "a", 5]))
    else:
        source.emit(iter([1, "a", 5]))
    source.emit(iter([1, 2]))
    assert out == [3]


def test_extra_arguments_and_starmap_are_called() -> None:
    source: Stream[Any] = Stream()
    extra = source.map(lambda x: x + 1, 5).on_error("route")
    errors = extra.errors.map(lambda r: type(r.exception)).sink_to_list()
    star = source.map(lambda x: (x,)).starmap(lambda t: t + 1).sink_to_list()
    source.emit(1)
    assert errors == [TypeError]  # "takes 1 positional argument but 2 were given"
    assert star == [2]
    assert fused_source(source).count("except Exception as first_") == 1  # only lambda x: (x,)


def test_the_switch_turns_inlining_off() -> None:
    code = ("from streams import inline\n"
            "print(inline.enabled, inline.expression(lambda r: r + 1, 'x', None))")
    env = dict(os.environ, STREAMS_NO_INLINE="1",
               PYTHONPATH=os.pathsep.join([p for p in sys.path if p]))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=True)
    assert result.stdout.split() == ["False", "None"]

