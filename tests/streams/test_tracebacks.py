"""Tracebacks in IPython/Jupyter show the user's code, not the library's frames
(``__tracebackhide__``, which pytest honours as well)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("IPython")


@pytest.fixture(scope="module")
def shell() -> Any:
    from IPython.testing.globalipapp import start_ipython

    return start_ipython()


def run_cell(shell: Any, capsys: pytest.CaptureFixture[str], code: str) -> str:
    shell.run_cell(code)
    out = capsys.readouterr()
    return out.out + out.err


@pytest.mark.parametrize("code", [
    "s = Stream()\ns.map(lambda x: 1 / x).sink_to_list()\ns.emit(0)",
    "s = Stream.from_iterable([1, 0])\ns.map(lambda x: 1 / x).sink_to_list()\ns.start()",
])
def test_an_error_in_a_user_function_shows_no_library_frame(
        shell: Any, capsys: pytest.CaptureFixture[str], code: str) -> None:
    text = run_cell(shell, capsys, "from streams import Stream\n" + code)
    assert "NodeError[ZeroDivisionError]: map(<lambda>) failed on element 0" in text
    assert "1 / x" in text  # the user's line is shown
    # IPython always shows the frame that raised (the node's policy); the
    # library frames between the user's call and it are hidden.
    for frame in ("Stream.emit", "_compile_and_push", "Source.start", "_run_sync",
                  "_element_done_sync", "Push an element into the stream"):
        assert frame not in text
    assert "skipping hidden" in text
