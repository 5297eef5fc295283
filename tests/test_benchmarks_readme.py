"""benchmarks/README.md leads with one table of current figures naming every benchmark."""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_the_readme_leads_with_current_figures_for_every_benchmark() -> None:
    text = (BENCHMARKS / "README.md").read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections[:2] == ["Current figures", "History"]
    current = text.split("## Current figures", 1)[1].split("## History", 1)[0]
    header = "| benchmark (command) | date (UTC) | workload | streams | peer | streams vs peer |"
    assert header in current
    rows = [line for line in current.splitlines() if line.startswith("| `")]
    named = {re.match(r"\| `([\w/]+\.py)", row).group(1) for row in rows}  # type: ignore[union-attr]
    # The scripts: each top-level one, and the run.py of a suite in a folder
    # (benchmarks/nexmark/run.py; its other modules are its parts).
    scripts = ({p.name for p in BENCHMARKS.glob("*.py")}
               | {f"{p.parent.name}/run.py" for p in BENCHMARKS.glob("*/run.py")})
    assert named == scripts
    for row in rows:
        assert re.search(r"\| 2026-\d\d-\d\d", row), row  # every figure is dated
    assert "Machine:" in current


def test_the_benchmarks_speak_of_the_project_only() -> None:
    text = (BENCHMARKS / "README.md").read_text().lower()
    for word in ("engineer", "this session", "second session", "third session", "(lead)"):
        assert word not in text
