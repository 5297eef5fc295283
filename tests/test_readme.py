"""The README's example runs and prints what it says; its commands are the real ones."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_python_example_prints_what_its_comment_says() -> None:
    block = re.search(r"```python\n(.*?)```", README, re.S)
    assert block
    code = block.group(1)
    expected = re.search(r"print\(out\)\s+# (.*)", code)
    assert expected
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md", "exec"), {})
    assert buf.getvalue().strip() == expected.group(1).strip()


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "test-command" in ci
    assert "<!-- test-command -->" in README and "python -m pytest" in README


def test_demo_command_runs() -> None:
    assert "python -m streams" in README
    proc = subprocess.run([sys.executable, "-m", "streams", "--seconds", "1", "--rate", "300"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "second  1:" in proc.stdout and "page views in 1 s" in proc.stdout
    assert "views/s" in proc.stderr  # the progress bar
