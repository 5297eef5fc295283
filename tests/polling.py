"""Waiting for what another thread or process does, without timing anything."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(done: Callable[[], object], guard: float = 60.0) -> None:
    """Poll another thread's or process's progress until ``done()`` holds.

    ``guard`` only bounds a hang: the condition is what the test asserts.
    """
    deadline = time.monotonic() + guard
    while not done():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.005)  # polling, not timing a test
