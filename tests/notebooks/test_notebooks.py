"""Execute every notebook under notebooks/ on a fresh kernel; render one to HTML.

Notebooks are found when the tests are collected, so a notebook added to
notebooks/ is executed without touching this file. What a notebook shows is
checked by ``tests/notebooks/checks/<name>.checks`` (Python, not imported
by pytest), not by ``assert`` cells in the teaching flow: each ``# %% after
<cell id>`` section of it runs, on the same kernel, right after the
notebook's cell with that id (see :func:`with_checks`). Any cell error fails the test, except
in cells tagged ``raises-exception``, which must then raise (they show an
error on purpose). A notebook may declare, in its metadata::

    "streams": {"requires": ["pyspark"], "markers": ["spark"], "timeout": 120}

``requires``: modules without which the notebook is skipped (with the reason);
``markers``: pytest markers to select or deselect it (``-m "not spark"``);
``timeout``: seconds allowed per cell (default :data:`CELL_TIMEOUT`).
"""

from __future__ import annotations

import base64
import html
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CHECKS = Path(__file__).resolve().parent / "checks"

#: Seconds a cell may run: generous for a loaded 2-core CI machine, small
#: enough that a hung cell fails the run quickly.
CELL_TIMEOUT = 120

#: Executed notebooks, by file name: the HTML test reuses an execution.
_executed: dict[str, Any] = {}


def _notebook_params() -> list[Any]:
    params = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
        opts = meta.get("streams", {})
        marks = [pytest.mark.notebook]
        marks += [getattr(pytest.mark, m) for m in opts.get("markers", [])]
        params.append(pytest.param(path.name, marks=marks, id=path.stem))
    return params


def checks_of(name: str) -> list[tuple[str, str]]:
    """``(cell id, code)`` of each section of the notebook's checks file."""
    path = CHECKS / (Path(name).stem + ".checks")
    sections = re.split(r"^# %% after (\S+)\n", path.read_text(encoding="utf-8"), flags=re.M)
    return [(cid, code.strip()) for cid, code in zip(sections[1::2], sections[2::2], strict=True)]


def with_checks(nb: Any, name: str) -> Any:
    """The notebook with its checks inserted as cells tagged ``check``."""
    checks = checks_of(name)
    ids = [c.get("id") for c in nb.cells]
    missing = [cid for cid, _ in checks if cid not in ids]
    assert not missing, f"{name}: checks name cells it does not have: {missing}"
    for cid, code in reversed(checks):
        cell = nbformat.v4.new_code_cell(code, metadata={"tags": ["check"]})
        nb.cells.insert(ids.index(cid) + 1, cell)
    return nb


def execute(name: str, workdir: Path) -> Any:
    """Run notebook ``name`` (from the scratch copy) on a fresh kernel; cache it."""
    if name in _executed:
        return _executed[name]
    from nbclient import NotebookClient

    path = workdir / name
    nb = with_checks(nbformat.read(path, as_version=4), name)
    opts = nb.metadata.get("streams", {})
    missing = [m for m in opts.get("requires", []) if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)}")
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=opts.get("timeout", CELL_TIMEOUT),
        startup_timeout=120,
        resources={"metadata": {"path": str(workdir)}},
        store_widget_state=True,
    )
    client.execute()
    nbformat.write(nb, workdir / f"{path.stem}.executed.ipynb")
    _executed[name] = nb
    return nb


@pytest.mark.slow
@pytest.mark.parametrize("name", _notebook_params())
def test_notebook_runs(name: str, kernel_dir: Path, notebook_workdir: Path) -> None:
    source = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert checks_of(name), f"{name}: no checks in tests/notebooks/checks/ of what it shows"
    teaching = [c.source for c in source.cells if c.cell_type == "code"
                and re.search(r"^\s*assert ", c.source, re.M)]
    assert not teaching, f"{name}: assert cells belong in its checks file: {teaching[0]!r}"
    nb = execute(name, notebook_workdir)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        if "raises-exception" in cell.metadata.get("tags", []):
            assert errors, f"{name}: a cell tagged raises-exception did not raise:\n{cell.source}"
        else:
            assert not errors, f"{name}: {errors[0].ename}: {errors[0].evalue}"
        assert cell.get("execution_count"), f"{name}: a cell did not run:\n{cell.source}"


def _widget_views(nb: Any) -> list[tuple[str, dict[str, Any]]]:
    """(model id, output data) of every widget shown by the notebook."""
    views = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            view = data.get("application/vnd.jupyter.widget-view+json")
            if view:
                views.append((view["model_id"], data))
    return views


@pytest.mark.notebook
def test_quickstart_renders_to_html(kernel_dir: Path, notebook_workdir: Path,
                                    tmp_path: Path) -> None:
    """What a reader of the rendered quickstart sees: the graph and the live view."""
    from nbconvert import HTMLExporter

    nb = execute("01-quickstart.ipynb", notebook_workdir)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    (tmp_path / "01-quickstart.html").write_text(body, encoding="utf-8")

    # The graph picture: graphviz's SVG (nbconvert inlines it, or embeds it as a
    # base64 data URI), with the nodes' operators and names.
    svgs = re.findall(r"<svg.*?</svg>", body, flags=re.S)
    svgs += [base64.b64decode(b).decode("utf-8", "replace")
             for b in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', body)]
    graph = [html.unescape(s) for s in svgs if "class=\"graph\"" in s and "sliding_window" in s]
    assert graph, "no graphviz SVG of the pipeline in the HTML"
    assert "map(parse)" in graph[0] and "'readings'" in graph[0]

    # The live view: a widget view in the page, its final state saved with it.
    state_match = re.search(
        r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>',
        body, flags=re.S)
    assert state_match, "no widget state in the HTML: the live view would render empty"
    state = json.loads(state_match.group(1))["state"]
    views = _widget_views(nb)
    live = [(mid, data) for mid, data in views
            if "streams-live-view" in state.get(mid, {}).get("state", {}).get("value", "")]
    assert live, "no live view widget among the widgets shown"
    model_id, data = live[0]
    assert f'"model_id": "{model_id}"' in body or model_id in body
    # Its saved state is the final one: every element seen, the stream ended.
    value = state[model_id]["state"]["value"]
    assert "ended" in value or "live" in value
    assert re.search(r"\d+ elements", value)
    # And the text fallback for front ends without widgets.
    assert "element" in data["text/plain"]
