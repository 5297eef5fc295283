"""The quickstart notebook in real JupyterLab, driven by headless Chromium.

A JupyterLab server runs on loopback with a scratch copy of the notebooks;
Debian's ``chromium`` and ``chromium-driver`` open the quickstart through
selenium, run every cell, and the page is checked as a reader sees it: the
live views redrawn by the kernel after they were displayed (a sink's view
counting what it received), the graph drawn as SVG, a progress bar of unknown
total in elements/s, and no ``<Task pending ...>`` echoed by ``start()``. Every wait is on
a condition in the page (``WebDriverWait``), never a fixed delay.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT

pytest.importorskip("jupyterlab")
pytest.importorskip("selenium")

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.notebook,
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                       reason="needs Debian's chromium and chromium-driver "
                              "(apt-get install chromium chromium-driver)"),
]

TOKEN = "streams-browser-test"
#: Seconds a page condition may take on a loaded 2-core machine.
WAIT = float(os.environ.get("STREAMS_BROWSER_WAIT", 120))


@pytest.fixture(scope="module")
def lab(kernel_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A JupyterLab server on 127.0.0.1 over a scratch copy of the notebooks; yields its URL.

    The copies have their stored outputs and widget states removed: what the
    page shows must come from this run.
    """
    import nbformat

    notebook_workdir = tmp_path_factory.mktemp("lab-notebooks")
    shutil.copytree(ROOT / "notebooks", notebook_workdir, dirs_exist_ok=True)
    for path in notebook_workdir.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        nb.metadata.pop("widgets", None)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, path)
    home = tmp_path_factory.mktemp("jupyter-home")  # no user settings, no runtime files left
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_PATH": os.environ["JUPYTER_PATH"],
           "MPLBACKEND": "module://matplotlib_inline.backend_inline",
           "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces")}
    as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         "--ServerApp.port=0", f"--IdentityProvider.token={TOKEN}",
         f"--ServerApp.root_dir={notebook_workdir}", "--LabApp.expose_app_in_browser=True",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         *as_root],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        cwd=notebook_workdir)
    assert proc.stderr is not None
    url = None
    log = []
    # Readiness is the line the server logs with its address, not a delay.
    for line in proc.stderr:
        log.append(line)
        found = re.search(r"(http://127\.0\.0\.1:\d+)/lab", line)
        if found:
            url = found.group(1)
            break
    if url is None:
        proc.kill()
        raise RuntimeError("JupyterLab did not start:\n" + "".join(log))
    # Keep draining the log so the server never blocks on a full pipe.
    drain = subprocess.Popen(["cat"], stdin=proc.stderr, stdout=subprocess.DEVNULL)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        drain.wait(timeout=60)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, condition: Any, what: str) -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, WAIT, poll_frequency=0.2).until(condition)
    except TimeoutException:
        raise AssertionError(
            f"waited {WAIT} s for {what}; the page shows live views {live_views(driver)} "
            f"and widgets {driver.execute_script(JS_WIDGET_TEXTS)}") from None


def live_views(driver: Any) -> list[str]:
    return [e.text for e in driver.find_elements("css selector", ".streams-live-view")]


JS_KERNEL_IDLE = """
const app = window.jupyterapp;
if (!app || !app.shell) { return null; }
const panel = app.shell.currentWidget;
if (!panel || !panel.sessionContext || !panel.sessionContext.session) { return null; }
const kernel = panel.sessionContext.session.kernel;
return kernel ? kernel.status : null;
"""

JS_RUN_ALL = """
const done = arguments[arguments.length - 1];
window.jupyterapp.commands.execute('notebook:run-all-cells').then(
    () => done('ok'), (e) => done('error: ' + e));
"""

JS_SVG_OUTPUTS = """
return Array.from(document.querySelectorAll('.jp-RenderedSVG')).map((el) => {
    const img = el.querySelector('img');
    if (!img) { return el.innerHTML; }
    const src = img.getAttribute('src') || '';
    const data = src.slice(src.indexOf(',') + 1);
    return src.includes(';base64,') ? atob(data) : decodeURIComponent(data);
});
"""

# tqdm's notebook bar writes figure spaces (U+2007) for spaces.
JS_WIDGET_TEXTS = """
return Array.from(document.querySelectorAll('.jupyter-widgets.widget-html-content, '
    + '.widget-html-content')).map((el) => el.textContent.replace(/\u2007/g, ' ').trim());
"""

JS_SVG_DRAWN = """
return Array.from(document.querySelectorAll('.jp-RenderedSVG img, .jp-RenderedSVG svg'))
    .some((el) => el.getBoundingClientRect().width > 50
                  && (el.tagName !== 'IMG' || el.naturalWidth > 0));
"""

JS_CELLS_RUN = """
const panel = window.jupyterapp.shell.currentWidget;
const cells = panel.content.widgets.filter((c) => c.model.type === 'code');
return [cells.length, cells.filter((c) => c.model.executionCount).length];
"""


def test_the_quickstart_runs_in_jupyterlab_with_live_views_and_a_graph(
        lab: str, browser: Any) -> None:
    browser.set_script_timeout(WAIT)
    browser.get(f"{lab}/lab/tree/01-quickstart.ipynb?token={TOKEN}")
    wait_for(browser, lambda d: d.execute_script(JS_KERNEL_IDLE) == "idle",
             "the notebook's kernel to be idle")
    assert browser.execute_async_script(JS_RUN_ALL) == "ok"
    n_cells, _ = browser.execute_script(JS_CELLS_RUN)
    wait_for(browser, lambda d: d.execute_script(JS_CELLS_RUN)[1] == n_cells
             and d.execute_script(JS_KERNEL_IDLE) == "idle", "every cell to run")

    # The live views were displayed before their elements came, then redrawn by
    # the kernel through the widget: the final counts are in the page.
    wait_for(browser, lambda d: any("100 elements" in v and "ended" in v
                                    for v in live_views(d)),
             "the live view of `averages` to show 100 elements, ended")
    wait_for(browser, lambda d: any("1000" in v and "live" in v for v in live_views(d)),
             "the live view of the click count to show 1000")
    # A cell ending in .sink(...): the view counts what the sink received, from a
    # source that start() runs in the background on the notebook's loop.
    wait_for(browser, lambda d: any(v.startswith("sink(append)") and "1700 elements" in v
                                    for v in live_views(d)),
             "the sink's live view to count the 1,700 events it received")
    assert not any("no element yet" in v for v in live_views(browser))
    # The bar of an unknown total: count and elements/s, no "/?" nor time left.
    bar = wait_for(browser, lambda d: next(
        (t for t in d.execute_script(JS_WIDGET_TEXTS) if t.startswith("events: 1700")), None),
        "the progress bar to count the 1,700 events")
    assert "elements/s" in bar and "?" not in bar and "<" not in bar

    # The graph: graphviz's SVG drawn in the page (JupyterLab shows an SVG output
    # as an image), with the nodes' operators and names.
    svg = wait_for(browser, lambda d: next(
        (t for t in d.execute_script(JS_SVG_OUTPUTS) if "sliding_window" in t), None),
        "the pipeline's graph to render as SVG")
    assert "map(parse)" in svg and ("'readings'" in svg or "&#39;readings&#39;" in svg)
    assert browser.execute_script(JS_SVG_DRAWN), "the graph image has no size: not drawn"

    page = browser.find_element("css selector", "body").text
    assert "Task pending" not in page
    assert "ValueError" in page  # the cell that raises on purpose shows its error
