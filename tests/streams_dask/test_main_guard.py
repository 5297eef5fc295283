"""A script running a Dask pipeline without the ``__main__`` guard gets one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streams_dask.main_guard import unguarded_line

ROOT = Path(__file__).resolve().parents[2]

PIPELINE = """\
import streams_dask
from streams import Stream

source = Stream.from_iterable(range(10))
out = source.scatter().map(abs).gather().sink_to_list()
print("graph built", flush=True)
source.start()
print(sum(out))
"""


def run_script(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(path)], cwd=path.parent, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.dask
def test_an_unguarded_script_is_told_what_to_do_in_one_line(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(PIPELINE)
    result = run_script(script)
    assert result.returncode == 1
    assert result.stdout == "graph built\n"  # once: no worker re-ran the script
    lines = result.stderr.splitlines()
    assert lines == [lines[0]], result.stderr
    assert lines[0].startswith(f"streams_dask: {script}, line 7, starts Dask worker processes")
    assert 'if __name__ == "__main__":' in lines[0]


GUARDED = """\
import sys
from streams_dask.main_guard import unguarded_line

def check():
    return unguarded_line()

print("top", unguarded_line())
if __name__ == "__main__":
    print("guarded", unguarded_line(), check())
"""


def test_the_guard_is_recognised(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(GUARDED)
    result = run_script(script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"top ('{script}', 7)", "guarded None None"]


def test_not_a_script_is_never_refused() -> None:
    assert unguarded_line() is None  # pytest's __main__ does not call from its top level
