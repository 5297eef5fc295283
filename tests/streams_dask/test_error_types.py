"""An exception raised on a worker keeps its type and attributes on the client.

Pickle rebuilds an exception by calling its class with its ``args``: one
whose ``__init__`` takes other arguments failed that on the client, and
came back as a ``RuntimeError`` that ``except RateLimited`` misses (see
:func:`streams.stage.portable_error`).
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest
from distributed import Client

import streams_dask  # noqa: F401
from streams import NodeError, Stream
from streams.stage import portable_error


class RateLimited(Exception):
    """As client libraries raise: ``__init__`` takes more than the message."""

    def __init__(self, retry_after: int, msg: str) -> None:
        super().__init__(msg)
        self.retry_after = retry_after


def call_api(x: int) -> int:
    if x % 3 == 2:
        raise RateLimited(30 + x, "slow down")
    return x


def caught(source: Stream[Any], error_type: type[BaseException]
           ) -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """Emit 0..5 and close; each error caught as ``error_type``: its element, args, attributes."""
    got = []
    for x in [*range(6), None]:
        try:
            source.emit(x) if x is not None else source.close()
        except error_type as e:
            assert isinstance(e, NodeError)  # which names the node and the element
            got.append((e.element, e.args, {k: v for k, v in vars(e).items()
                                            if k in ("retry_after", "code")}))
    return got


@pytest.mark.dask
@pytest.mark.parametrize("policy", ["raise", "route"])
def test_an_exception_whose_init_takes_other_arguments_keeps_its_type_on_dask(
        client: Client, policy: str) -> None:
    results = []
    for on_dask in (False, True):
        source: Stream[Any] = Stream()
        head = source.scatter(client=client) if on_dask else source
        step = head.map(call_api).on_error(policy)
        records = step.errors.sink_to_list()
        out = (step.gather() if on_dask else step).sink_to_list()
        raised = caught(source, RateLimited)
        routed = [(type(r.exception), r.exception.args, r.exception.retry_after, r.element)
                  for r in records]
        results.append((out, raised, routed))
    assert results[1] == results[0]
    out, raised, routed = results[1]
    assert out == [0, 1, 3, 4]
    if policy == "raise":
        assert [(x, attrs["retry_after"]) for x, _, attrs in raised] == [(2, 32), (5, 35)]
    else:
        assert routed == [(RateLimited, ("slow down",), 32, 2),
                          (RateLimited, ("slow down",), 35, 5)]


@pytest.mark.dask
@pytest.mark.parametrize("two_arguments", [False, True])
def test_an_exception_class_sent_by_value_comes_back_as_itself(
        client: Client, two_arguments: bool) -> None:
    # A class the workers cannot import (a script's __main__, a notebook, a
    # function's own) travels by value, and cloudpickle gives the client back
    # its own class.
    class Local(Exception):
        pass

    class LocalTwo(Exception):
        def __init__(self, code: int, msg: str) -> None:
            super().__init__(msg)
            self.code = code

    def fail(x: int) -> int:
        if x == 1:
            raise LocalTwo(7, "two") if two_arguments else Local("one")
        return x

    source: Stream[Any] = Stream()
    out = source.scatter(client=client).map(fail).gather().sink_to_list()
    got = caught(source, LocalTwo if two_arguments else Local)
    assert out == [0, 2, 3, 4, 5]
    assert got == ([(1, ("two",), {"code": 7})] if two_arguments else [(1, ("one",), {})])


def test_a_portable_copy_keeps_type_args_and_attributes_without_calling_init() -> None:
    error = RateLimited(30, "slow down")
    carried = portable_error(error)
    assert type(carried) is RateLimited and carried.args == ("slow down",)
    back = pickle.loads(pickle.dumps(carried))
    assert type(back) is RateLimited
    assert (back.args, back.retry_after, vars(back)) == (("slow down",), 30, {"retry_after": 30})
    # The user's exception, and how its class pickles, are left as they were.
    assert vars(error) == {"retry_after": 30}
    with pytest.raises(TypeError):
        pickle.loads(pickle.dumps(RateLimited(1, "x")))


def test_an_exception_that_pickles_is_sent_as_it_is() -> None:
    error = ZeroDivisionError("division by zero")
    assert portable_error(error) is error


class HoldsALock(Exception):
    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.lock = threading.Lock()


class WantsArguments(Exception):
    def __new__(cls, code: int) -> WantsArguments:
        return super().__new__(cls, code)

    def __init__(self, code: int) -> None:
        super().__init__(f"code {code}")


@pytest.mark.parametrize(("error", "text"), [
    (HoldsALock("locked"), "HoldsALock: 'locked'"),
    (WantsArguments(3), "WantsArguments: 'code 3'"),
], ids=["attribute_does_not_pickle", "new_wants_arguments"])
def test_what_cannot_travel_becomes_a_runtime_error_naming_its_type(
        error: BaseException, text: str) -> None:
    carried = portable_error(error)
    assert type(carried) is RuntimeError and str(carried) == text


def remember(state: Any, x: int) -> Any:
    """A state that holds a lock from the third element on (a connection cached in it)."""
    return threading.Lock() if x == 2 else x


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_a_state_that_does_not_pickle_is_named_with_its_node(client: Client,
                                                             keyed: bool) -> None:
    # In-process a state is never pickled; on Dask it goes from batch to
    # batch pickled. The message named neither the node nor the state, and
    # blamed "a function that cannot be unpickled on the workers".
    from streams_dask.fetching import DaskTaskError

    source: Stream[Any] = Stream()
    key = {"key": lambda x: x % 2} if keyed else {}
    source.scatter(client=client).scan(remember, start=0, **key).gather().sink_to_list()
    source.emit(1)
    with pytest.raises(DaskTaskError, match=r"accumulate\(remember\): its state .* does not "
                                            r"pickle \(TypeError: cannot pickle '_thread.lock'"):
        source.emit(2)
