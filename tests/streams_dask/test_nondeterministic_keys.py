"""A key function that gives an element another key at another call: an error, never silent.

On Dask each part of a keyed round calls the key function over the whole
batch and keeps the elements of its own key groups; a random key had some
elements taken by two parts and others by none (400 elements gave 407
running counts), and nothing failed. The parts now report the positions
they took and the client checks them (see :mod:`streams_dask.taken_positions`).
"""

from __future__ import annotations

import asyncio
import random
import re
from typing import Any

import pytest
from distributed import Client, LocalCluster

import streams_dask  # noqa: F401
from streams import Stream
from streams_dask import DaskTaskError
from streams_dask.chain import run_link
from streams_dask.key_groups import parts
from streams_dask.segment import plan_stages
from streams_dask.taken_positions import NondeterministicKey, miscounted
from streams_dask.worker import Failure, Sealed

pytestmark = pytest.mark.dask


def random_key(x: Any) -> float:
    """A new key at every call: each part of a round draws its own."""
    return random.random()


def latest(state: Any, x: int) -> int:
    """A scan that emits each element itself: a doubled or lost one shows."""
    return x


def passed_on(state: Any, x: int) -> tuple[Any, list[int]]:
    return state, [x]


def identity(x: int) -> int:
    return x


def elements(window: tuple[Any, list[int]]) -> list[int]:
    return window[1]


# Each node emits the elements it is given, in input order (a keyed scan
# emits each with its key: plucked off). Every element has a key of its own,
# so a window of its own, and windows close in order of their ends.
KEYED = {
    "scan": (lambda s: s.scan(latest, start=None, key=random_key).pluck(1),
             r"accumulate\(latest\)"),
    "stateful_map": (lambda s: s.stateful_map(passed_on, start=None, key=random_key),
                     r"stateful_map\(passed_on\)"),
    "timed_window": (lambda s: s.timed_window(4, time=identity, key=random_key)
                     .map(elements).flatten(), r"timed_window\(4\.0\)"),
    "session_window": (lambda s: s.session_window(2, time=identity, key=random_key)
                       .map(elements).flatten(), r"session_window\(2\.0\)"),
}


def assert_names_the_node_and_the_fix(error: BaseException, kind: str) -> None:
    message = str(error)
    assert re.match(KEYED[kind][1] + r" \(key=random_key\): its key function gave elements "
                    r"a different key at different calls", message), message
    assert "must return the same key for an element each time it is called" in message
    assert "in a map() before the keyed node" in message


@pytest.mark.parametrize("kind", KEYED)
def test_a_random_key_on_two_workers_is_an_error_naming_the_node(
        client: Client, kind: str) -> None:
    source: Stream[Any] = Stream()
    out = KEYED[kind][0](source.scatter(client=client, batch_size=20)).gather().sink_to_list()
    raised = []
    for x in range(200):
        try:
            source.emit(x)
        except DaskTaskError as e:
            raised.append(e)  # each call after it raises it again
    with pytest.raises(NondeterministicKey) as closed:
        source.close()
    assert all(type(e) is NondeterministicKey for e in raised)
    assert_names_the_node_and_the_fix(raised[0] if raised else closed.value, kind)
    # What came through is each element once, in order: the rounds checked
    # before the failed one; nothing of it or after it.
    assert out == list(range(len(out))) and len(out) < 200


def test_await_emit_sees_the_error_of_a_random_key(cluster: LocalCluster) -> None:
    async def main() -> tuple[list[BaseException], list[Any]]:
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as client:
            source: Stream[Any] = Stream(asynchronous=True)
            node = KEYED["timed_window"][0](source.scatter(client=client, batch_size=20))
            out = node.gather().sink_to_list()
            raised: list[BaseException] = []
            for x in range(200):
                try:
                    await source.emit(x)
                except DaskTaskError as e:
                    raised.append(e)
            try:
                await source.aclose()
            except DaskTaskError as e:
                raised.append(e)
            return raised, out

    raised, out = asyncio.run(main())
    assert raised and all(type(e) is NondeterministicKey for e in raised)
    assert_names_the_node_and_the_fix(raised[0], "timed_window")
    assert out == list(range(len(out))) and len(out) < 200


def test_on_one_worker_a_random_key_takes_every_element_once(one_worker: Client) -> None:
    # One part holds every key group: each element is keyed once, as in-process.
    source: Stream[Any] = Stream()
    out = KEYED["scan"][0](source.scatter(client=one_worker, batch_size=20)).gather()
    got = out.sink_to_list()
    for x in range(200):
        source.emit(x)
    source.close()
    assert got == list(range(200))


def tenths(x: int) -> tuple[int, int]:
    """The step before the keyed one: fails on 0 (a failure carried into the keyed stage)."""
    return (x % 5, 10 // x)


@pytest.mark.parametrize("make", [
    lambda s: s.scan(lambda total, kx: total + kx[1], start=0, key=0),
    lambda s: s.timed_window(4, time=lambda kx: kx[1], key=0),
], ids=["scan", "timed_window"])
def test_the_parts_of_a_deterministic_key_take_each_position_once(make: Any) -> None:
    # Run here, as the two parts' tasks would: the carried failure of 0 is
    # taken by the part of key group 0 alone.
    node = make(Stream().scatter().map(tenths).on_error("route"))
    node.gather()
    plan = plan_stages(node._segment)
    batch = list(range(40))
    links = [run_link(plan.second, batch, groups, Sealed(None), False, plan.first)
             for groups in parts(2)]
    taken = [link.taken for link in links]
    assert miscounted(taken) is None
    assert [t[0] for t in taken if t is not None] == [1, 0]
    failures = [e for _, e in links[0].events if type(e) is Failure and e.element == 0]
    assert len(failures) == 1
    # One part holds every group: nothing to check, nothing sent back.
    (alone,) = parts(1)
    assert run_link(plan.second, batch, alone, Sealed(None), False, plan.first).taken is None


def test_positions_taken_twice_or_by_none_are_counted() -> None:
    assert miscounted([b"\x01\x00\x01", b"\x00\x01\x00"]) is None
    assert miscounted([b"\x01\x01\x00\x01", b"\x00\x01\x00\x00", b"\x00\x01\x00\x00"]) == (1, 1)
    assert miscounted([b"\x01\x00", None]) is None  # a part held every group
