"""Stopping the servers and clusters tests start as subprocesses."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    """Terminate ``proc`` and wait for it; kill it if it does not end within ``timeout``."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hung process
        proc.kill()
        proc.wait(timeout=timeout)
