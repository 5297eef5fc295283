"""Shared fixtures: a virtual clock for anything timed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streams import VirtualClock, use_clock


@pytest.fixture
def clock() -> Iterator[VirtualClock]:
    """A virtual clock installed for the test: time moves only by ``advance``."""
    with use_clock(VirtualClock()) as c:
        yield c
