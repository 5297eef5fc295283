"""A pipeline on a real standalone Spark cluster started on loopback.

The Master and one Worker come from the pyspark wheel (``spark-class``).
The driver runs in a child process: a process has one SparkContext, and
the test run's is the shared local one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pyspark
import pytest

pytestmark = pytest.mark.spark

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


def _start(args: list[str], env: dict[str, str], text: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(SPARK_CLASS), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    _wait_for(proc, proc.stdout, text)
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT``: one Master and one 1-core Worker, torn down after."""
    port = _free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_NO_DAEMONIZE="1")
    master = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(port), "--webui-port", str(_free_port())],
                    env, "I have been elected leader")
    url = f"spark://127.0.0.1:{port}"
    try:
        work = tmp_path_factory.mktemp("spark-worker")
        worker = _start(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                         "--cores", "1", "--memory", "1g", "--webui-port",
                         str(_free_port()), "--work-dir", str(work)],
                        env, "Successfully registered with master")
        try:
            yield url
        finally:
            _stop(worker)
    finally:
        _stop(master)


DRIVER = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    import streams_spark
    from streams import Stream

    spark = (SparkSession.builder.master(sys.argv[1]).appName("streams-cluster-test")
             .config("spark.ui.enabled", "false")
             .config("spark.executor.memory", "512m")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    source = Stream()
    out = (source.to_spark(session=spark, batch_size=60)
           .map(lambda x: x * x).filter(lambda x: x % 3 != 0)
           .scan(lambda a, b: a + b, start=0).gather().sink_to_list())
    for i in range(120):
        source.emit(i)
    source.close()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    print("RESULT " + json.dumps({"out": out, "executors": executors}))
    spark.stop()
""")


# JVMs start slowly on a loaded 2-core machine; no timing is asserted.
@pytest.mark.timeout(900)
def test_pipeline_runs_on_a_standalone_cluster(cluster: str, tmp_path: Path) -> None:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, "-c", DRIVER, cluster], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=400)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    expected, total = [], 0
    for i in range(120):
        if (i * i) % 3:
            total += i * i
            expected.append(total)
    assert result["out"] == expected
    assert result["executors"] >= 2  # the driver and the worker's executor
