"""The notebooks keep their executed outputs, so a reader on GitHub sees the pictures.

Refreshed with ``python tests/notebooks/store_outputs.py``; the suite executes
the notebooks again anyway (test_notebooks.py).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def outputs_of(nb: nbformat.NotebookNode, needle: str) -> list[dict[str, object]]:
    return [o for c in nb.cells if c.cell_type == "code" and needle in c.source
            for o in c.get("outputs", [])]


@pytest.mark.parametrize("name", NAMES)
def test_every_code_cell_is_stored_executed(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    not_run = [c.source[:60] for c in code if not c.get("execution_count")]
    assert not not_run, f"{name}: cells stored without being run: {not_run}"
    counts = [c.execution_count for c in code]
    assert counts == sorted(counts), f"{name}: stored from an out-of-order run"
    assert any(c.get("outputs") for c in code), f"{name}: no output stored"


@pytest.mark.parametrize("name", ["01-quickstart.ipynb", "03-dask.ipynb", "04-spark.ipynb"])
def test_the_graph_pictures_are_stored(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    pictures = [o for o in outputs_of(nb, ".visualize(") if "image/svg+xml" in o.get("data", {})]
    assert pictures, f"{name}: no visualize() picture stored"


def test_the_windows_timeline_is_stored() -> None:
    nb = nbformat.read(NOTEBOOKS / "02-async-and-tornado.ipynb", as_version=4)
    assert any("image/png" in o.get("data", {}) for o in outputs_of(nb, "timed_window(1.0)"))
