"""Pipelines from Spark streaming sources; exactly once across a killed driver."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streams import Stream

pytestmark = pytest.mark.spark

FILES, ROWS = 4, 5  # four micro-batches; the kill comes in the third


def write_input(directory: Path) -> list[str]:
    directory.mkdir()
    expected = []
    for f in range(FILES):
        ids = list(range(f * ROWS, (f + 1) * ROWS))
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                 "key": pa.array([f"k{i % 2}" for i in ids])}),
                       directory / f"part-{f:03d}.parquet")
        expected += [str(i * 10) for i in ids]
    return expected


def test_from_spark_runs_in_spark_and_delivers_to_python(spark: Any, tmp_path: Path) -> None:
    write_input(tmp_path / "in")
    df = (spark.readStream.schema("id long, key string").option("maxFilesPerTrigger", 2)
          .parquet(str(tmp_path / "in")))
    source = Stream.from_spark(df, checkpoint=str(tmp_path / "ckpt"))
    out = (source.filter(lambda r: r[0] % 3 == 0).scan(lambda a, r: a + r[0], start=0, key=1)
           .gather().sink_to_list())
    source.start()
    totals: dict[str, int] = {}
    for key, total in out:
        totals[key] = total
    n = FILES * ROWS
    assert totals == {"k0": sum(range(0, n, 6)), "k1": sum(range(3, n, 6))}


DRIVER = textwrap.dedent("""
    import sys
    import streams_spark
    from streams import Stream

    spark = streams_spark.default_session()
    inbox, checkpoint, out = sys.argv[1:4]
    df = (spark.readStream.schema("id long, key string").option("maxFilesPerTrigger", 1)
          .parquet(inbox))
    source = Stream.from_spark(df, checkpoint=checkpoint)
    node = source.map(lambda r: r[0] * 10).gather()
    node.sink(lambda x: print("DELIVERED", x, flush=True))
    node.map(str).sink_to_durable_textfile(out)
    source.start()
    print("DONE", flush=True)
""")


# JVMs start slowly on a loaded 2-core machine; no timing is asserted.
@pytest.mark.timeout(900)
@pytest.mark.slow
def test_killed_driver_restarts_exactly_once(tmp_path: Path) -> None:
    expected = write_input(tmp_path / "in")
    args = [sys.executable, "-c", DRIVER, str(tmp_path / "in"), str(tmp_path / "ckpt"),
            str(tmp_path / "out.txt")]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, start_new_session=True)
    assert first.stdout is not None
    seen = 0
    for line in first.stdout:
        if line.startswith("DELIVERED"):
            seen += 1
            if seen == 2 * ROWS + 2:  # in the middle of the third micro-batch
                break
    # Kill the driver and its JVM at once, mid-batch, as a crash would.
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    first.stdout.close()
    assert seen == 2 * ROWS + 2
    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=400)
    assert "DONE" in second.stdout, second.stderr[-3000:]
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert sorted(lines, key=int) == sorted(expected, key=int)
    assert len(lines) == len(set(lines)) == FILES * ROWS
