"""The end of a Jupyter cell redraws progress bars, with or without a live view shown."""

from __future__ import annotations

import io
from typing import Any

import pytest

from streams import Stream

IPython = pytest.importorskip("IPython")


class _KernelShell:
    """A kernel's shell as the cell-end hook sees it: a kernel and IPython's real events."""

    def __init__(self) -> None:
        from IPython.core.events import EventManager, available_events

        self.kernel = object()
        self.events = EventManager(self, available_events)

    def end_cell(self) -> None:
        """What the kernel does after running a cell."""
        self.events.trigger("post_execute")


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> _KernelShell:
    shell = _KernelShell()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    return shell


def test_a_progress_bar_alone_is_redrawn_when_the_cell_ends(kernel: _KernelShell) -> None:
    out = io.StringIO()
    source = Stream()
    counted = source.progress(file=out, mininterval=3600, desc="rows")
    counted.sink_to_list()
    # The next cell: no live view was ever displayed in this session.
    for i in range(1000):
        source.emit(i)
    assert counted.bar.n == 1000 and "rows: 1000" not in out.getvalue()  # tqdm waits
    kernel.end_cell()
    assert "rows: 1000" in out.getvalue().rsplit("\r", 1)[-1]


def test_the_hook_is_registered_once_per_shell(kernel: _KernelShell) -> None:
    from streams.jupyter import flush_all

    for _ in range(3):
        Stream().progress(file=io.StringIO())
    hooks: list[Any] = kernel.events.callbacks["post_execute"]
    assert hooks.count(flush_all) == 1


def test_outside_a_kernel_no_hook_is_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    shell = _KernelShell()
    shell.kernel = None  # a terminal IPython: tqdm draws text, nothing to hook
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    Stream().progress(file=io.StringIO())
    assert shell.events.callbacks["post_execute"] == []
