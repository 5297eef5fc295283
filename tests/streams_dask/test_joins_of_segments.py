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
