"""A standalone Spark cluster on loopback: a Master and 1-core Workers from the pyspark wheel.

Used by the cluster test (``tests/streams_spark/test_spark_cluster.py``)
and by ``benchmarks/spark_resident.py --cluster``. Readiness is the line
each daemon logs once it is up (elected leader, registered with the
master), not a delay to guess.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import IO

import pyspark

from tests.processes import stop_process

__all__ = ["SparkCluster"]

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(proc: subprocess.Popen[str], out: IO[str], text: str) -> None:
    """Read the daemon's log until ``text`` appears (it fails if the process dies)."""
    for line in iter(out.readline, ""):
        if text in line:
            return
    raise RuntimeError(f"{proc.args!r} exited ({proc.wait()}) before logging {text!r}")


def _launch(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([str(SPARK_CLASS), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _ready(proc: subprocess.Popen[str], text: str) -> None:
    assert proc.stdout is not None
    _wait_for(proc, proc.stdout, text)


def _stop(proc: subprocess.Popen[str]) -> None:
    stop_process(proc, timeout=60)
    if proc.stdout is not None:
        proc.stdout.close()


class SparkCluster:
    """A Master and ``workers`` Workers of one core each, stopped by :meth:`stop`.

    Parameters
    ----------
    home : Path
        A folder for the workers' work directories.
    workers : int
        How many Workers.
    memory : str
        Each Worker's memory for executors.
    java_options : str
        The Master's and Workers' own JVM options (``SPARK_DAEMON_JAVA_OPTS``).
    """

    def __init__(self, home: Path, workers: int = 2, memory: str = "1g",
                 java_options: str = "") -> None:
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1",
                   SPARK_DAEMON_JAVA_OPTS=java_options)
        self.url = f"spark://127.0.0.1:{port}"
        self.master = _launch(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(_free_port())], env)
        self.workers: list[subprocess.Popen[str]] = []
        try:
            _ready(self.master, "I have been elected leader")
            # The Workers start together, once the Master is up (a Worker that
            # finds none waits 5-15 s before it tries again).
            for i in range(workers):
                self.workers.append(_launch(
                    ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                     "--cores", "1", "--memory", memory, "--webui-port", str(_free_port()),
                     "--work-dir", str(home / f"worker-{i}")], env))
            for w in self.workers:
                _ready(w, "Successfully registered with master")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the Workers, then the Master."""
        for w in self.workers:
            _stop(w)
        self.workers = []
        _stop(self.master)
