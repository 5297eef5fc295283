"""Execute the notebooks and store their outputs in notebooks/, for readers on GitHub.

Run by hand after changing a notebook: ``python tests/notebooks/store_outputs.py
[NAME ...]``. Each notebook runs on a fresh kernel of this interpreter, with
this checkout first on ``PYTHONPATH``, in a scratch copy of notebooks/ (what
they write stays out of the tree); its checks are not inserted (the test
suite runs them). The test suite executes the notebooks again either way.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


def store(name: str, workdir: Path) -> None:
    """Execute ``notebooks/<name>`` in ``workdir`` and write it back with its outputs."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=600, startup_timeout=120,
                   resources={"metadata": {"path": str(workdir)}},
                   store_widget_state=True).execute()
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not _jvm_noise(o)]
    nbformat.write(nb, NOTEBOOKS / name)


def _jvm_noise(output: dict[str, object]) -> bool:
    """Spark's JVM start-up lines on the kernel's stderr: not what the notebook teaches.

    Nor pandas' deprecation notes from inside PySpark's own worker (its
    ``applyInPandasWithState`` concatenates empty frames).
    """
    text = str(output.get("text", ""))
    return output.get("name") == "stderr" and (any(
        marker in text for marker in ("log4j", "incubator modules", " WARN ", "setLogLevel"))
        or ("pyspark/worker.py" in text and "FutureWarning" in text))


def main(argv: list[str]) -> int:
    names = argv or sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(NOTEBOOKS, work, dirs_exist_ok=True)
        for name in names:
            print("executing", name, file=sys.stderr)
            store(name, work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
