"""Bad arguments a new user gives are refused when the graph is built, naming the operator."""

from __future__ import annotations

import functools
import operator
from pathlib import Path
from typing import Any

import pytest

from streams import Stream


def test_sink_to_textfile_refuses_a_number(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"sink_to_textfile\(\): file must be a path.*int 3"):
        Stream().sink_to_textfile(3)
    Stream().sink_to_textfile(tmp_path / "ok.txt")  # a pathlib.Path is fine


def test_from_textfile_refuses_a_number() -> None:
    with pytest.raises(TypeError, match=r"from_textfile\(\): f must be a path"):
        Stream.from_textfile(123)


def test_asynchronous_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="asynchronous must be True, False or None, got 'yes'"):
        Stream(asynchronous="yes")  # type: ignore[arg-type]


def test_zip_with_a_single_stream_and_a_literal_is_refused() -> None:
    a = Stream()
    with pytest.raises(TypeError, match=r"zip\(\) pairs elements of several streams.*\(x, 3\)"):
        a.zip(3)
    b = Stream()
    L = a.zip(b, "lit").sink_to_list()  # literals with two streams stay allowed
    a.emit(1)
    b.emit(2)
    assert L == [(1, 2, "lit")]


def test_arguments_that_do_not_fit_name_the_operator_and_its_signature() -> None:
    with pytest.raises(TypeError, match=r"^pluck\(\): too many positional arguments; it takes "
                                        r"pluck\(pick, \*\*kwargs\)$"):
        Stream().pluck("a", "b")
    with pytest.raises(TypeError, match=r"^partition\(\): missing a required argument: 'n'"):
        Stream().partition()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^from_iterable\(\): missing .*'iterable'.*"
                                        r"from_iterable\(iterable, start=False"):
        Stream.from_iterable()  # type: ignore[call-arg]
    # A misspelt keyword would reach Stream.__init__ and be blamed on it.
    with pytest.raises(TypeError, match=r"^timed_window\(\): unexpected keyword argument "
                                        r"'slid'; it takes timed_window\(interval, "
                                        r".*slide=None.*stream_name$"):
        Stream().timed_window(10, time=1, slid=5)


@pytest.mark.parametrize(("build", "message"), [
    (lambda s: s.scan(operator.add, strat=0), r"scan\(\): strat= .* did you mean start=\?"),
    (lambda s: s.accumulate(operator.add, start=0, retruns_state=True),
     r"scan\(\): retruns_state= .* did you mean returns_state=\?"),
    (lambda s: s.map(lambda x, scale=1: x * scale, sclae=2),
     r"map\(\): sclae= .* did you mean scale=\?"),
    (lambda s: s.filter(lambda x: x, strem_name="y"), r"filter\(\): .*stream_name="),
    (lambda s: s.sink(print, stram_name="out"), r"sink\(\): .*stream_name="),
])
def test_a_keyword_the_function_cannot_take_is_refused_when_built(
        build: Any, message: str) -> None:
    # The keywords after the function go to it (as streamz's): one it has
    # no parameter for failed on the first element, naming the function.
    with pytest.raises(TypeError, match=message):
        build(Stream())


def test_keywords_the_function_takes_still_go_to_it() -> None:
    source = Stream()
    scaled = source.map(lambda x, scale=1: x * scale, scale=3).sink_to_list()
    kept = source.filter(lambda x, **options: x > options["above"], above=1).sink_to_list()
    unread = source.map(str, stream_name="as text").sink_to_list()  # str's signature: unknown

    def passing(f: Any) -> Any:  # a decorator whose wrapper takes what the function does not
        @functools.wraps(f)
        def wrapper(x: Any, **options: Any) -> Any:
            return f(x) + options.get("plus", 0)
        return wrapper

    @passing
    def same(x: int) -> int:
        return x

    wrapped = source.map(same, plus=10).sink_to_list()
    for x in [1, 2]:
        source.emit(x)
    assert (scaled, kept, unread, wrapped) == ([3, 6], [2], ["1", "2"], [11, 12])


def test_streams_given_as_a_list_are_refused_saying_to_give_them_one_by_one() -> None:
    a, b, c = Stream(), Stream(), Stream()
    with pytest.raises(TypeError, match=r"^union\(\): every input must be a Stream, got "
                                        r"\[.*\]; give streams one by one: a\.union\(b, c\)"):
        a.union([b, c])


def test_a_text_file_that_cannot_be_opened_names_the_sink(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "out.txt"
    with pytest.raises(FileNotFoundError, match=r"sink_to_textfile\(\): cannot write to "
                                                r".*out\.txt.*make its directory first"):
        Stream().sink_to_textfile(str(missing))


@pytest.mark.parametrize("build, says", [
    (lambda s: s.session_window(5, time=["t"]), r"session_window\(\): time="),
    (lambda s: s.timed_window(5, time={"t"}), r"timed_window\(\): time="),
    (lambda s: s.scan(max, start=0, key=["a", "b"]), r"^scan\(\): key="),
    (lambda s: s.stateful_map(lambda n, x: (n, [x]), key={"id": 1}), r"stateful_map\(\): key="),
    (lambda s: s.partition(3, key=[0]), r"partition\(\): key="),
    (lambda s: s.lookup(Stream(), key=["id"]), r"lookup\(\): key="),
])
def test_a_key_or_time_that_cannot_be_an_index_is_refused_when_built(
        build: Any, says: str) -> None:
    # x[["t"]] fails on every element (a list is no dict key): refused now.
    with pytest.raises(TypeError, match=says + r".* must be a function or an index"):
        build(Stream())


@pytest.mark.parametrize("build, says", [
    (lambda s, p: s.sink_to_textfile(p, end=b"\n"), r"sink_to_textfile\(\): end must be a str"),
    (lambda s, p: s.sink_to_stdout(file=3), r"sink_to_stdout\(\): file must be an open text"),
])
def test_a_sink_argument_every_element_would_fail_on_is_refused_when_built(
        tmp_path: Path, build: Any, says: str) -> None:
    with pytest.raises(TypeError, match=says):
        build(Stream(), tmp_path / "out.txt")



@pytest.mark.parametrize(("build", "message"), [
    (lambda s: s.timed_window(10, time=True), r"timed_window\(\): time=True is no time reader"),
    (lambda s: s.session_window(10, time=0, key=True),
     r"session_window\(\): key=True is no key reader"),
    (lambda s: s.scan(max, key=False), r"scan\(\): key=False is no key reader"),
])
def test_a_bool_where_a_reader_goes_is_refused(build: Any, message: str) -> None:
    """time=True reads as a switch; it was taken as x[1], every time silently the second item."""
    with pytest.raises(TypeError, match=message):
        build(Stream())
