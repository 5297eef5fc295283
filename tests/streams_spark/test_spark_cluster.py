"""Pipelines on a real standalone Spark cluster whose executors lack ``streams``.

A Master and two 1-core Workers from the pyspark wheel (``spark-class``) run
on loopback, shared by the test session. The executors' Python is this
interpreter started without ``site`` (``-S``), site-packages put back on
its path: the ``.pth`` of the editable install is never read, so ``import
streams`` fails there. The driver runs in a child process (a process has one
SparkContext, and the test run's is the shared local one); it first checks
that its executors can import neither ``streams`` nor the user's module,
then runs pipelines that need both: the library ships itself and the
module's functions travel by value. Before them it reads a Redis stream
through the library's ``redis_streams`` data source, whose module travels by
value too (no pipeline has shipped the library yet).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark_cluster import SparkCluster

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _python_without_streams(directory: Path) -> str:
    """A wrapper running this interpreter where ``import streams`` fails."""
    site = sysconfig.get_paths()["purelib"]
    wrapper = directory / "python-without-streams"
    wrapper.write_text(
        "#!/bin/sh\n"
        "# No site: the editable install's .pth is not read; the packages stay.\n"
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" exec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    check = subprocess.run([str(wrapper), "-c", "import streams"], capture_output=True,
                           text=True, cwd=directory)
    assert check.returncode != 0 and "No module named 'streams'" in check.stderr
    return str(wrapper)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``(spark://127.0.0.1:PORT, executor python)``: a Master and two 1-core Workers."""
    home = tmp_path_factory.mktemp("spark-cluster")
    python = _python_without_streams(home)
    # Its daemons compile as the suite's other JVMs do (tests/conftest.py).
    cluster = SparkCluster(home, workers=2,
                           java_options=os.environ.get("SPARK_SUBMIT_OPTS", ""))
    try:
        yield cluster.url, python
    finally:
        cluster.stop()


#: The user's own modules, next to the driver script: not installed anywhere.
#: helpers imports rules, so rules must travel by value too.
HELPERS = textwrap.dedent("""
    import rules

    def square(x):
        return x * x

    def not_multiple_of_3(x):
        return rules.remainder(x, 3) != 0
""")
RULES = "def remainder(x, n):\n    return x % n\n"

DRIVER = textwrap.dedent("""
    import importlib.util, json, os, sys
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(sys.argv[1]).appName("streams-cluster-test")
             .config("spark.ui.enabled", "false")
             .config("spark.executor.memory", "512m")
             # The executors compile as the suite's other JVMs do (tests/conftest.py).
             .config("spark.executor.extraJavaOptions", os.environ.get("SPARK_SUBMIT_OPTS", ""))
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    # Before any pipeline: what the executors' Python can import on its own.
    lacks = sc.parallelize(range(2), 2).map(lambda _: [
        importlib.util.find_spec(m) is None for m in ("streams", "helpers", "rules")]).collect()

    import helpers
    import streams_spark
    from streams import Stream

    # The library's own data source, before any pipeline has shipped the
    # library: planned and read by Python processes that cannot import it.
    streams_spark.register_data_sources(spark)
    (spark.readStream.format("redis_streams").option("url", sys.argv[3])
     .option("stream", "events").load().selectExpr("fields['n'] AS n")
     .writeStream.format("memory").queryName("entries").trigger(availableNow=True)
     .start().awaitTermination(300))
    entries = [int(r.n) for r in spark.sql("SELECT n FROM entries").collect()]

    source = Stream()
    batch = (source.to_spark(session=spark, batch_size=60)
             .map(helpers.square).filter(helpers.not_multiple_of_3)
             .scan(lambda a, b: a + b, start=0).gather().sink_to_list())
    for i in range(120):
        source.emit(i)
    source.close()

    # Stream mode: the inbox and Spark's state at a URI every executor reads.
    source = Stream()
    keyed = (source.to_spark(session=spark, batch_size=4, checkpoint=sys.argv[2])
             .map(helpers.square).scan(lambda s, x: s + x, start=0, key=lambda x: x % 2)
             .gather().sink_to_list())
    for i in range(8):
        source.emit(i)
    source.close()

    # Stream mode with no checkpoint: no driver temp directory on a cluster.
    source = Stream()
    source.to_spark(session=spark, batch_size=1).scan(lambda s, x: s + x, start=0,
                                                      key=abs).gather().sink_to_list()
    try:
        source.emit(1)
        refused = None
    except ValueError as e:
        refused = str(e)

    executors = sc._jsc.sc().getExecutorMemoryStatus().size()
    print("RESULT " + json.dumps({"lacks": lacks, "batch": batch, "keyed": keyed,
                                  "refused": refused, "entries": entries,
                                  "executors": executors}))
    spark.stop()
""")


# JVMs start slowly on a loaded 2-core machine; the time is reported, not asserted.
@pytest.mark.timeout(900)
@pytest.mark.redis
@pytest.mark.slow
def test_pipelines_run_on_a_cluster_whose_executors_lack_streams(
        spark_cluster: tuple[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    import redis

    from tests.streams.conftest import REDIS_SERVER, RedisServer

    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    url, python = spark_cluster
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "rules.py").write_text(RULES)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=python,
               PYTHONPATH=str(ROOT))  # the driver imports this checkout
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    try:
        client = redis.Redis.from_url(server.url)
        for i in range(30):
            client.xadd("events", {"n": str(i)})
        client.close()
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", DRIVER, url, f"file://{tmp_path}/ckpt",
                               server.url], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=600)
    finally:
        server.stop()
    with capsys.disabled():  # reported, not asserted
        print(f"\n[cluster test] driver ran in {time.perf_counter() - started:.1f} s")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["lacks"] == [[True] * 3] * 2  # no module of these on executors
    expected, total = [], 0
    for i in range(120):
        if (i * i) % 3:
            total += i * i
            expected.append(total)
    assert result["batch"] == expected
    assert result["keyed"] == [[0, 0], [1, 1], [0, 4], [1, 10], [0, 20], [1, 35],
                               [0, 56], [1, 84]]
    assert "needs a directory every executor can read" in result["refused"]
    assert sorted(result["entries"]) == list(range(30))
    assert (tmp_path / "ckpt" / "inbox").is_dir() and not (tmp_path / "file:").exists()
    assert result["executors"] >= 3  # the driver and the two workers' executors
