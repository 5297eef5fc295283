"""streamz's element metadata through ``scatter()`` and ``gather()``.

A stage without state gives each result the metadata of the element it came
from, as its nodes (``map``, ``filter``, ``flatten``...) pass it on
in-process; the metadata itself stays on the client. So what follows
``gather()`` (a window) holds an element's references exactly as in-process,
and a source that commits an element once its references are released
(streamz's Kafka checkpointing) commits it only once that is done with too.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from distributed import Client, LocalCluster

from streams import RefCounter, Stream


class Pairs(Stream[Any]):
    """Emits ``(x, metadata)`` for every element, as it arrives."""

    def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
        return self._emit((x, metadata))


def inc(x: int) -> int:
    return x + 1


def spread(x: int) -> list[int]:
    """No result for a multiple of 3, two for ``x % 3 == 2``."""
    return [10 * x + k for k in range(x % 3)]


def not_seven(x: int) -> bool:
    return x % 10 != 7


def stateless(s: Stream[Any]) -> Stream[Any]:
    return s.map(spread).flatten().filter(not_seven).map(inc)


def element_metadata(n: int) -> list[list[dict[str, Any]] | None]:
    """Metadata for ``n`` elements, every fourth without any.

    A lock does not pickle: the metadata must never travel to the workers.
    """
    return [None if x % 4 == 3 else [{"ref": RefCounter(), "offset": x, "lock": threading.Lock()}]
            for x in range(n)]


def run(build: Callable[[Stream[Any]], Stream[Any]], metadata: list[Any],
        client: Client | None = None, **options: Any) -> list[Any]:
    """The ``(result, metadata)`` pairs after ``build``'s gather (in-process: without one)."""
    source: Stream[Any] = Stream()
    s = source.scatter(client=client, **options) if client is not None else source
    s = build(s)
    out = Pairs(s.gather() if client is not None else s).sink_to_list()
    for x, m in enumerate(metadata):
        source.emit(x, metadata=m)
    source.close()
    return out


@pytest.mark.dask
@pytest.mark.parametrize("options", [{}, {"batch_size": 3}, {"batch_size": 1, "ordered": False},
                                     {"batch_size": 4, "ordered": False}])
def test_gather_emits_each_result_with_its_elements_metadata(
        client: Client, options: dict[str, Any]) -> None:
    metadata = element_metadata(24)
    expected = run(stateless, metadata)
    got = run(stateless, metadata, client, **options)
    if options.get("ordered", True):
        assert got == expected
    else:  # batches in the order they finish; each result keeps its own metadata
        assert sorted(got, key=lambda pair: pair[0]) == sorted(expected, key=lambda pair: pair[0])
    assert [m[0]["ref"].count for m in metadata if m] == [0] * 18


def branches(s: Stream[Any]) -> Stream[Any]:
    return s.map(inc).union(s.filter(not_seven).map(spread).flatten())


@pytest.mark.dask
@pytest.mark.parametrize("options", [{}, {"batch_size": 5}])
def test_results_of_several_branches_carry_their_elements_metadata(
        client: Client, options: dict[str, Any]) -> None:
    metadata = element_metadata(16)
    assert run(branches, metadata, client, **options) == run(branches, metadata)


@pytest.mark.dask
@pytest.mark.parametrize("options", [{}, {"batch_size": 4}, {"ordered": False}])
def test_a_window_after_gather_holds_its_elements_references(
        client: Client, options: dict[str, Any]) -> None:
    # streamz's at-least-once Kafka source commits an element once its
    # references are all released: while partition() holds its result, the
    # element is not done.
    def counts(dask: bool) -> tuple[list[int], list[int], list[Any]]:
        source: Stream[Any] = Stream()
        if dask:
            scatter = source.scatter(client=client, **options)
            s = scatter.map(inc).gather()
        else:
            s = source.map(inc)
        out = Pairs(s.partition(2)).sink_to_list()
        refs = [RefCounter(), RefCounter()]
        source.emit(1, metadata=[{"ref": refs[0]}])
        if dask:
            scatter.flush()  # its result went through gather() to partition()
        held = [r.count for r in refs]
        source.emit(2, metadata=[{"ref": refs[1]}])
        source.close()
        windows = [(x, [m["ref"] is r for m, r in zip(ms, refs, strict=True)]) for x, ms in out]
        return held, [r.count for r in refs], windows

    assert counts(dask=True) == counts(dask=False) == ([1, 0], [0, 0], [((2, 3), [True, True])])


@pytest.mark.dask
@pytest.mark.parametrize("options", [{}, {"batch_size": 3}])
def test_await_emit_gives_results_their_elements_metadata(
        cluster: LocalCluster, options: dict[str, Any]) -> None:
    metadata = element_metadata(12)

    async def main() -> tuple[list[Any], list[int]]:
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as client:
            source: Stream[Any] = Stream(asynchronous=True)
            scatter = source.scatter(client=client, **options)
            out = Pairs(stateless(scatter).gather().partition(3)).sink_to_list()
            for x, m in enumerate(metadata[:-1]):
                await source.emit(x, metadata=m)
            await scatter.flush()
            # The last results wait in partition(3), with their elements' references.
            held = [m[0]["ref"].count for m in metadata if m]
            await source.emit(len(metadata) - 1, metadata=metadata[-1])
            await source.aclose()
            return out, held

    source: Stream[Any] = Stream()
    expected = Pairs(stateless(source).partition(3)).sink_to_list()
    for x, m in enumerate(metadata[:-1]):
        source.emit(x, metadata=m)
    expected_held = [m[0]["ref"].count for m in metadata if m]
    source.emit(len(metadata) - 1, metadata=metadata[-1])
    source.close()
    assert 1 in expected_held  # some element's results are in the window
    assert asyncio.run(main()) == (expected, expected_held)
    assert [m[0]["ref"].count for m in metadata if m] == [0] * 9


def windows(s: Stream[Any]) -> Stream[Any]:
    return s.map(inc).partition(2)


@pytest.mark.dask
@pytest.mark.parametrize("options", [{}, {"batch_size": 3}])
def test_a_stateful_stage_lets_go_of_every_reference(
        client: Client, options: dict[str, Any]) -> None:
    # Its elements' references are held until its batch's results are
    # replayed (see scatter()); none is left held at the end.
    metadata = element_metadata(9)
    got = run(windows, metadata, client, **options)
    assert [x for x, _ in got] == [x for x, _ in run(windows, metadata)]
    assert [m[0]["ref"].count for m in metadata if m] == [0] * 7


@pytest.mark.dask
def test_a_stateful_stage_releases_each_reference_once_its_results_went_on(
        client: Client) -> None:
    # A plain scatter() replays an element's results before emit() returns:
    # its references go then, though the window on the workers holds it
    # (see scatter()); not only at the end.
    source: Stream[Any] = Stream()
    windows(source.scatter(client=client)).gather().sink_to_list()
    ref = RefCounter()
    source.emit(1, metadata=[{"ref": ref}])
    assert ref.count == 0
    source.close()
