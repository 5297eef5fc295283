"""join() and lookup() of two Dask segments: each side gathered, the node run here."""

from __future__ import annotations

from typing import Any

import pytest
from distributed import Client

import streams_dask  # noqa: F401
from streams import Stream

pytestmark = pytest.mark.dask

ITEMS = [("L", ("x", 1.0)), ("R", ("x", 1.5)), ("L", ("y", 2.0)), ("R", ("y", 2.2)),
         ("L", ("x", 5.0)), ("R", ("x", 5.5))]


def run(make: Any, client: Client | None) -> list[Any]:
    a, b = Stream(), Stream()
    left, right = (a, b) if client is None else (a.scatter(), b.scatter())
    node = make(left, right)
    out = (node if client is None else node.gather()).sink_to_list()
    for side, x in ITEMS:
        (a if side == "L" else b).emit(x)
    a.close()
    b.close()
    return out


@pytest.mark.parametrize("make", [
    lambda left, right: left.join(right, key=0, within=1, time=1),
    lambda left, right: left.lookup(right, key=0, default=None),
], ids=["join", "lookup"])
def test_a_join_of_two_segments_gives_the_in_process_pairs(client: Client, make: Any) -> None:
    # The gather() put before each side used to be taken for a stranger: every
    # element failed ("received from ..., which is not its upstream").
    assert run(make, client) == run(make, None) != []


OVERLAPPING = [({"batch_size": 4}, "batch_size=4"), ({"max_in_flight": 2}, "max_in_flight=2"),
               ({"ordered": False}, "ordered=False")]


@pytest.mark.parametrize("make", [
    lambda left, right: left.join(right, key=0, within=1, time=1),
    lambda left, right: left.lookup(right, key=0, default=None),
    lambda left, right: left.combine_latest(right),
], ids=["join", "lookup", "combine_latest"])
@pytest.mark.parametrize(("overlap", "given"), OVERLAPPING, ids=lambda v: str(v))
def test_a_node_following_how_inputs_interleave_is_refused_over_overlapping_segments(
        make: Any, overlap: dict[str, Any], given: str) -> None:
    # The results of such segments come back in batches: a join saw another
    # interleaving than was emitted, judged an element on time late and lost
    # its pair; a lookup read another version of the table.
    a, b = Stream(), Stream()
    with pytest.raises(ValueError, match=rf"interleave.*scatter.* is given {given}: .*overlap"):
        make(b.scatter(), a.scatter(**overlap))


def test_a_buffer_in_an_input_segment_is_an_overlap_too() -> None:
    a, b = Stream(), Stream()
    with pytest.raises(ValueError, match=r"given buffer\(8\) in its segment"):
        a.scatter().buffer(8).join(b.scatter(), key=0, within=1, time=1)


def test_inputs_gathered_first_are_joined_as_their_results_come_back(client: Client) -> None:
    a, b = Stream(), Stream()
    left = a.scatter(batch_size=4).gather()
    right = b.scatter(batch_size=4).gather()
    out = left.join(right, key=0, within=1, time=1, lateness=100).sink_to_list()
    for side, x in ITEMS:
        (a if side == "L" else b).emit(x)
    a.close()
    b.close()
    # With lateness covering the batches' delay, every pair is found.
    pairs = run(lambda left, right: left.join(right, key=0, within=1, time=1), None)
    assert sorted(out) == sorted(pairs)


def test_a_zip_of_overlapping_segments_pairs_as_in_process(client: Client) -> None:
    # zip pairs each input's n-th elements: how the inputs interleave does not matter.
    a, b = Stream(), Stream()
    out = a.scatter(batch_size=4).zip(b.scatter(batch_size=4)).gather().sink_to_list()
    for side, x in ITEMS:
        (a if side == "L" else b).emit(x)
    a.close()
    b.close()
    assert out == run(lambda left, right: left.zip(right), None)
