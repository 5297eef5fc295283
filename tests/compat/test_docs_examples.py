"""streamz's documentation examples and ``examples/*.py``, with the import swapped.

Each case of :mod:`docs_examples` runs with its imports rewritten to
``streams`` / ``streams_dask`` (the harness's :func:`rewrite`, as for
streamz's own tests) and must print what the documentation shows (what
streamz 0.6.6 prints); ``STREAMS_COMPAT_TARGET=streamz`` runs the cases
unchanged, against streamz, instead. Examples that serve or run for ever are driven through
real loopback sockets and stopped; waits for output from another thread
are bounded polls, and nothing is asserted about elapsed time.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import os
import socket
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
try:
    from docs_examples import CASES, NOT_RUN
finally:
    sys.path.remove(str(HERE))

TARGET = os.environ.get("STREAMS_COMPAT_TARGET", "streams")
# streamz's side (that the expected output is streamz's own) runs with
# STREAMS_COMPAT_TARGET=streamz, as the harness's: streamz's loop-thread
# examples can hang on a process the rest of the suite has used.
LIBRARIES = [TARGET]
GUARD = 30.0  # seconds: only ever reached when the behaviour under test is broken

_NEEDS_DASK = {name for name, case in CASES.items() if "dask.distributed" in case.code}
_NEEDS_PANDAS = {name for name, case in CASES.items() if "pandas" in case.code}


class _Output(io.StringIO):
    """What the case prints, from any thread."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def write(self, s: str) -> int:
        with self._lock:
            return super().write(s)

    def lines(self) -> list[str]:
        with self._lock:
            return self.getvalue().splitlines()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _helpers(out: _Output, tmp: Path) -> dict[str, Any]:
    """What the cases use in place of files, terminals and time.sleep(600)."""

    def wait_until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + GUARD
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the example printed {out.lines()!r} and stopped")
            time.sleep(0.005)  # polling another thread's progress, not timing a test

    def send_lines(port: int, lines: list[bytes]) -> None:
        # streamz's start() binds on its loop thread after returning: retry until it listens.
        deadline = time.monotonic() + GUARD
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=GUARD)
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)  # polling another thread's progress, not timing a test
        with conn:
            conn.sendall(b"".join(line + b"\n" for line in lines))

    def register_plugin(stream: Any, name: str, klass: type) -> None:
        module = types.ModuleType(f"docs_plugin_{name}")
        setattr(module, klass.__name__, klass)
        sys.modules[module.__name__] = module
        stream.register_plugin_entry_point(importlib.metadata.EntryPoint(
            name, f"{module.__name__}:{klass.__name__}", "streamz.nodes"))

    async def gen_sleep(seconds: float) -> None:
        import asyncio

        await asyncio.sleep(seconds)

    json_file = tmp / "myfile.json"
    json_file.write_text("\n".join(json.dumps(x) for x in [{"a": 1}, [2, 3], "four"]) + "\n")
    csv_files = []
    for i, values in enumerate([[1, 2], [3, 4]]):
        path = tmp / f"2017-01-0{i + 1}.csv"
        path.write_text("value\n" + "".join(f"{v}\n" for v in values))
        csv_files.append(str(path))
    return {"wait_for_lines": lambda n: wait_until(lambda: len(out.lines()) >= n),
            "wait_until": wait_until, "send_lines": send_lines,
            "register_plugin": register_plugin, "gen_sleep": gen_sleep,
            "JSON_FILE": str(json_file), "CSV_FILES": csv_files, "PORT": _free_port(),
            "PNG": tmp / "graph.png"}


@contextlib.contextmanager
def _captured() -> Iterator[_Output]:
    out = _Output()
    with contextlib.redirect_stdout(out):
        yield out


def run_case(name: str, library: str, tmp: Path) -> list[str]:
    """Run case ``name`` on ``library`` (streams or streamz); the lines it printed."""
    from streams_compat import rewrite  # the harness's rewrite (tests/compat/conftest.py)

    code = CASES[name].code
    if library == "streams":
        code = rewrite(code, "streams")
    with _captured() as out:
        namespace = {"__name__": f"docs_example_{name.replace('-', '_')}",
                     **_helpers(out, tmp)}
        exec(compile(code, f"<{CASES[name].origin}>", "exec"), namespace)
    return out.lines()


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_prints_what_the_docs_show(name: str, library: str, tmp_path: Path,
                                           request: pytest.FixtureRequest) -> None:
    reason = CASES[name].broken.get(library)
    if reason is not None and library == "streamz":
        pytest.skip(reason)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
        # A failing case may leave coroutines never awaited behind it.
        request.applymarker(pytest.mark.filterwarnings(
            "ignore::pytest.PytestUnraisableExceptionWarning"))
    if name in _NEEDS_DASK:
        pytest.importorskip("distributed")
    if name in _NEEDS_PANDAS:
        pytest.importorskip("pandas")
    assert run_case(name, library, tmp_path) == CASES[name].expected


def test_what_is_not_run_says_why() -> None:
    assert NOT_RUN and all(reason for reason in NOT_RUN.values())
    assert not set(NOT_RUN) & set(CASES)
