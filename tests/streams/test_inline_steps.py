"""Steps written in place (streams.inline) in one try statement: a filter whose
predicate is a bool tests it in that statement, a map hands its fallback call's
exception to its policy from it. Errors and values stay the called function's.
"""

from __future__ import annotations

from typing import Any

import pytest

from streams import Stream, inline
from streams.errors import NodeError
from streams.fusion import unfused
from tests.streams.test_inline import INLINED, not_inlined, outcomes


def test_a_bool_is_told_from_a_value_whose_truth_test_may_raise() -> None:
    assert inline.boolean(INLINED["identity"]) and inline.boolean(INLINED["membership"])
    assert not inline.boolean(INLINED["chained"]) and not inline.boolean(INLINED["boolean"])
    assert not inline.boolean(print)  # called, not written in place


class Vague:
    """An element whose comparison gives a value without a truth (as a numpy array)."""

    def __eq__(self, other: object) -> Any:
        return self

    def __bool__(self) -> bool:
        raise ValueError("the truth value is ambiguous")

    __hash__ = object.__hash__


@pytest.mark.parametrize("func", [lambda v: v == 1, lambda v: not v, lambda v: v is v == 1])
def test_a_filters_truth_test_that_raises_goes_to_its_policy(func: Any) -> None:
    elements: list[Any] = [Vague(), Vague()]
    got = outcomes("filter", func, elements)
    with not_inlined():
        expected = outcomes("filter", func, elements)
    assert got == expected
    assert [o[2] for o in got] == [ValueError, ValueError]


@pytest.mark.parametrize("iterable", [False, True], ids=["emit", "from_iterable"])
def test_a_bool_predicates_error_is_the_functions_own(iterable: bool) -> None:
    func = INLINED["identity"]

    def error() -> BaseException:
        source: Stream[Any] = Stream.from_iterable([(1,), None]) if iterable else Stream()
        source.filter(func).sink_to_list()
        with pytest.raises(NodeError) as info:
            if iterable:
                source.start()
            else:
                source.emit(None)
        assert info.value.__cause__ is not None
        return info.value.__cause__

    cause = error()
    with not_inlined():
        expected = error()
    assert (type(cause), str(cause)) == (type(expected), str(expected))
    assert cause.__context__ is None
    tb = cause.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    assert tb is not None and tb.tb_frame.f_code is func.__code__


class Flaky:
    """An element whose attribute fails on its first read only."""

    def __init__(self, value: Any) -> None:
        self._value = value
        self.failed = False

    @property
    def value(self) -> Any:
        if not self.failed:
            self.failed = True
            raise LookupError("not yet")
        return self._value


@pytest.mark.parametrize("operator, func", [
    ("map", lambda f: f.value + 1),
    ("filter", lambda f: f.value is not None),
    ("filter", lambda f: f.value is None),
    ("remove", lambda f: f.value is None),
    ("remove", lambda f: f.value is not None),
])
def test_when_the_expression_fails_and_the_call_does_not_the_element_fails(
        operator: str, func: Any) -> None:
    """The function alone, called once, fails on the element (its first read fails):
    so does the step written in place, whose second call read it again and passed."""
    outcomes = []
    for fused in (True, False):
        source: Stream[Any] = Stream.from_iterable([Flaky(2), Flaky(3)])
        out = getattr(source, operator)(func).on_error("skip").map(
            lambda y: "kept" if isinstance(y, Flaky) else y).sink_to_list()
        if fused:
            source.start()
        else:
            with unfused():
                source.start()
        outcomes.append((out, source.offset))
    assert outcomes[0] == outcomes[1] == ([], 2)
