"""Starting and stopping the servers and clusters tests run as subprocesses."""

from __future__ import annotations

import socket
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


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

