"""Fixtures for executing the notebooks: a kernel of this interpreter, a scratch copy.

Every notebook runs on a fresh kernel named ``python3`` whose command is
this test run's own interpreter (``sys.executable -m ipykernel_launcher``),
so the notebooks see the same environment, and the working tree's
``streams``, whatever kernels the machine has installed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A Jupyter data dir, first on ``JUPYTER_PATH``, with a ``python3`` kernel of this env."""
    data = tmp_path_factory.mktemp("jupyter")
    spec_dir = data / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (streams tests)",
        "language": "python",
        "env": {"PYTHONPATH": pythonpath},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", os.pathsep.join(
            p for p in (str(data), os.environ.get("JUPYTER_PATH")) if p))
        # Notebooks draw with matplotlib: never try a GUI backend in CI.
        mp.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        yield data


@pytest.fixture(scope="session")
def notebook_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch copy of notebooks/: what notebooks write stays out of the tree."""
    work = tmp_path_factory.mktemp("notebooks")
    shutil.copytree(NOTEBOOKS, work, dirs_exist_ok=True)
    return work
