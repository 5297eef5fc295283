"""Errors name the node and the element; per-node policies; build-time checks."""

from __future__ import annotations

import logging
import operator
import os
from typing import Any

import pytest

from streams import NodeError, Stream


@pytest.mark.parametrize("fused", [True, False])
def test_raise_policy_names_node_and_element(fused: bool) -> None:
    source = Stream()
    upstream = source if fused else source.union(Stream())
    upstream.map(lambda x: 10 // x, stream_name="div").sink_to_list()
    with pytest.raises(NodeError) as info:
        source.emit(0)
    msg = str(info.value)
    assert "map(<lambda>) 'div'" in msg
    assert "failed on element 0" in msg
    assert "ZeroDivisionError" in msg
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert info.value.element == 0


def test_element_repr_is_truncated() -> None:
    source = Stream()
    source.map(operator.itemgetter("missing")).sink_to_list()
    with pytest.raises(NodeError) as info:
        source.emit({i: "x" * 1000 for i in range(100)})
    assert len(str(info.value)) < 400


@pytest.mark.parametrize("fused", [True, False])
def test_skip_policy_logs_and_continues(fused: bool, caplog: pytest.LogCaptureFixture) -> None:
    source = Stream()
    upstream = source if fused else source.union(Stream())
    out = upstream.map(int).on_error("skip").sink_to_list()
    with caplog.at_level(logging.WARNING, logger="streams"):
        for s in ["1", "x", "3"]:
            source.emit(s)
    assert out == [1, 3]
    assert "map(int) failed on element 'x'" in caplog.text


@pytest.mark.parametrize("fused", [True, False])
def test_route_policy_sends_records_to_error_stream(fused: bool) -> None:
    source = Stream()
    upstream = source if fused else source.union(Stream())
    node = upstream.map(int).on_error("route")
    good, bad = node.sink_to_list(), node.errors.sink_to_list()
    for s in ["1", "x", "3", "y"]:
        source.emit(s)
    assert good == [1, 3]
    assert [r.element for r in bad] == ["x", "y"]
    assert all(isinstance(r.exception, ValueError) and r.node is node for r in bad)


def test_failing_element_goes_no_further_but_other_branches_run() -> None:
    source = Stream()
    bad = source.map(lambda x: 1 / x).on_error("skip").sink_to_list()
    good = source.sink_to_list()
    source.emit(0)
    assert bad == [] and good == [0]


@pytest.mark.parametrize("op", ["filter", "remove", "starmap", "scan", "pluck", "sink",
                                "partition_key", "unique_key"])
def test_every_function_node_reports_failures(op: str) -> None:
    source = Stream()
    build = {
        "filter": lambda: source.filter(lambda x: 1 / 0),
        "remove": lambda: source.remove(lambda x: 1 / 0),
        "starmap": lambda: source.starmap(lambda *a: 1 / 0),
        "scan": lambda: source.scan(lambda a, b: 1 / 0, start=0),
        "pluck": lambda: source.pluck(5),
        "sink": lambda: source.sink(lambda x: 1 / 0),
        "partition_key": lambda: source.partition(2, key=lambda x: 1 / 0),
        "unique_key": lambda: source.unique(key=lambda x: 1 / 0),
    }[op]
    build()
    with pytest.raises(NodeError, match="failed on element"):
        source.emit((1, 2))


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda s: s.map(3), TypeError, r"map\(\) takes a function .* got 3 \(int\)"),
        (lambda s: s.starmap("f"), TypeError, r"starmap\(\) takes a function"),
        (lambda s: s.filter(1), TypeError, r"filter\(\) takes a function"),
        (lambda s: s.sink(None), TypeError, r"sink\(\) takes a function"),
        (lambda s: s.scan(0), TypeError,
         r"scan\(\) takes a function of \(state, x\) .*e\.g\. scan\(lambda state, x:"),
        (lambda s: s.accumulate(0), TypeError,
         r"scan\(\) takes a function .*\(accumulate\(\) is the same operator\)"),
        (lambda s: s.partition(0), ValueError, r"partition\(\): n must be >= 1, got 0"),
        (lambda s: s.partition("3"), TypeError, r"partition\(\): n must be an int"),
        (lambda s: s.partition(2, timeout=-1), ValueError, r"timeout must be > 0"),
        (lambda s: s.sliding_window(-1), ValueError, r"sliding_window\(\): n must be >= 1"),
        (lambda s: s.partition_unique(0), ValueError, r"partition_unique\(\): n must be >= 1"),
        (lambda s: s.partition_unique(2, keep="middle"), ValueError, r"keep must be"),
        (lambda s: s.unique(maxsize=0), ValueError, r"unique\(\): maxsize must be >= 1"),
        (lambda s: s.slice(-1), ValueError, r"slice\(\): start must be >= 0"),
        (lambda s: s.slice(0, 5, 0), ValueError, r"slice\(\): step must be >= 1"),
        (lambda s: s.map(str).on_error("ignore"), ValueError, r"on_error takes one of"),
        (lambda s: s.gather(), ValueError, r"gather\(\) follows stream"),
        (lambda s: s.zip(), TypeError, None),
        (lambda s: Stream.from_iterable(5), TypeError, r"from_iterable\(\) takes an iterable"),
        (lambda s: s.combine_latest(Stream(), emit_on=7), ValueError, r"out of range"),
    ],
)
def test_bad_arguments_fail_at_build_time(build, error, message) -> None:
    source = Stream()
    if message is None:
        build(source)  # zip with a single stream is allowed (it emits 1-tuples)
        return
    with pytest.raises(error, match=message):
        build(source)


def test_node_error_keeps_the_original_type() -> None:
    # issue 15: code catching ZeroDivisionError around emit keeps working.
    source = Stream()
    source.map(lambda x: 1 / x, stream_name="inv").sink_to_list()
    with pytest.raises(ZeroDivisionError) as info:
        source.emit(0)
    err = info.value
    assert isinstance(err, NodeError)
    assert err.element == 0 and err.node.stream_name == "inv"
    assert isinstance(err.__cause__, ZeroDivisionError)
    assert any("element 0" in note for note in err.__notes__)


def test_node_error_of_a_type_with_its_own_init_and_str() -> None:
    source = Stream()
    source.map(lambda x: b"\xff".decode()).sink_to_list()
    with pytest.raises(UnicodeDecodeError, match="failed on element 1"):
        source.emit(1)
    source = Stream()
    source.map(lambda d: d["missing"]).sink_to_list()
    with pytest.raises(KeyError) as info:
        source.emit({})
    assert str(info.value).startswith("map(<lambda>) failed on element {}")


def test_a_node_error_keeps_the_arguments_and_fields_handlers_read(tmp_path: Any) -> None:
    # As streamz, which raises the original error: e.args[0] of a KeyError,
    # e.errno and e.filename of an OSError, a UnicodeDecodeError's fields.
    missing = str(tmp_path / "missing.txt")
    source = Stream()
    source.map(lambda d: os.stat(d["path"])).sink_to_list()
    with pytest.raises(KeyError) as key_error:
        source.emit({})
    assert key_error.value.args == ("path",)
    with pytest.raises(FileNotFoundError) as os_error:
        source.emit({"path": missing})
    assert (os_error.value.errno, os_error.value.filename) == (2, missing)
    assert os_error.value.args == (2, "No such file or directory")
    decode = Stream()
    decode.map(lambda b: b.decode("ascii")).sink_to_list()
    with pytest.raises(UnicodeDecodeError) as unicode_error:
        decode.emit(b"a\xff")
    e = unicode_error.value
    assert (e.encoding, e.object, e.start, e.end, e.reason) == (
        "ascii", b"a\xff", 1, 2, "ordinal not in range(128)")
    assert str(e).startswith("map(<lambda>) failed on element b'a\\xff'")
    with pytest.raises(FileNotFoundError) as source_error:
        Stream.from_textfile(missing).start()
    assert (source_error.value.errno, source_error.value.filename) == (2, missing)


def test_error_after_a_timer_is_logged_and_the_node_keeps_going(
        clock: Any, caplog: pytest.LogCaptureFixture) -> None:
    source = Stream()
    out = source.delay(1.0).map(lambda x: 1 / x).sink_to_list()
    for x in (1, 0, 2):
        source.emit(x)
    with caplog.at_level(logging.ERROR, logger="streams"):
        clock.advance(1.0)
    assert out == [1.0, 0.5]
    assert "ZeroDivisionError" in caplog.text


def test_a_node_error_has_the_attributes_its_original_type_reads() -> None:
    # redis-py's errors' repr reads an attribute their __init__ sets; the
    # NodeError, of that type, failed to repr (asyncio's report of a task).
    import redis

    source = Stream()

    def fail(x: Any) -> None:
        raise redis.ConnectionError("refused")

    source.sink(fail)
    with pytest.raises(redis.ConnectionError) as info:
        source.emit(1)
    assert repr(info.value).startswith("NodeError[ConnectionError](")
    assert info.value.error_type == info.value.error.error_type  # type: ignore[attr-defined]


def test_messages_say_what_to_do_for_unhashable_elements_and_returns_state() -> None:
    source = Stream()
    source.unique().sink_to_list()
    with pytest.raises(TypeError, match=r"unhashable type: 'list'; give "
                                        r"unique\(hashable=False\)"):
        source.emit([1])
    source = Stream()
    source.accumulate(operator.add, start=0, returns_state=True).sink_to_list()
    with pytest.raises(TypeError, match=r"with returns_state=True the function must return "
                                        r"\(new_state, output\), got 1"):
        source.emit(1)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("build, element, argument", [
    (lambda s: s.timed_window(60.0, time=1, key=0), ("u",), "in time=1:"),
    (lambda s: s.timed_window(60.0, time=1, key=0), (), "in time=1 and key=0:"),
    (lambda s: s.scan(operator.add, key="k"), {"j": 1}, "in key='k':"),
    (lambda s: s.scan(operator.add, key=0, ttl=5, time=2), ("u", 1), "in time=2:"),
    (lambda s: s.stateful_map(lambda st, x: (st, [x]), key=0, ttl=5, time=2), ("u", 1),
     "in time=2:"),
    (lambda s: s.session_window(5.0, time="t", key="k"), {"t": 1.0}, "in key='k':"),
    (lambda s: s.scan(operator.add, key=lambda e: e["k"]), {"j": 1}, "on element {'j': 1}: "),
    # One side's readers are not tried on the other's elements.
    (lambda s: s.lookup(Stream(), key="id", table_key="id"), {"user": 7},
     "on element {'user': 7}: "),
])
def test_an_item_key_that_fails_is_named(build, element, argument, fused: bool) -> None:
    # An item key runs as inline code: no line of the user's names it in the traceback.
    source = Stream()
    upstream = source if fused else source.union(Stream())
    build(upstream).sink(print)
    with pytest.raises(NodeError) as info:
        source.emit(element)
    assert argument in str(info.value)
