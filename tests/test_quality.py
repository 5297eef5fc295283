"""The code base stays typed and lint-clean (mypy and ruff, as configured)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is in the test extra")
def test_ruff_is_clean() -> None:
    proc = subprocess.run(["ruff", "check", "streams", "streams_dask", "streams_spark", "tests",
                           "benchmarks", "examples"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_is_clean_on_the_packages_and_the_typed_usage() -> None:
    # One run (configured in setup.cfg): the three packages, strict, and
    # tests/typing/usage.py, whose ``type: ignore`` lines are errors mypy must
    # find (an unused ignore fails the run).
    pytest.importorskip("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
