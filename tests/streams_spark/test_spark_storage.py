"""Checkpoints and inboxes at Hadoop paths: ``file://`` URIs and plain paths mean
what they mean to Spark, never a local folder named ``file:``."""

from __future__ import annotations

import os
from operator import add
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streams_spark  # noqa: F401
from streams import Stream
from streams_spark.storage import location

pytestmark = pytest.mark.spark


def keyed_totals(items: list[tuple[str, int]], checkpoint: str) -> list[Any]:
    """A stream-mode segment (keyed scan: Spark state, an inbox of Parquet files)."""
    source = Stream()
    out = (source.to_spark(batch_size=3, checkpoint=checkpoint)
           .scan(lambda s, kv: s + kv[1], start=0, key=0).gather().sink_to_list())
    for kv in items:
        source.emit(kv)
    source.close()
    return out


def running_total(items: list[int], checkpoint: str) -> list[Any]:
    """A batch-mode segment whose state is saved after each micro-batch."""
    source = Stream()
    out = (source.to_spark(batch_size=2, checkpoint=checkpoint).scan(add, start=0)
           .gather().sink_to_list())
    for x in items:
        source.emit(x)
    source.close()
    return out


@pytest.mark.parametrize("form", ["uri", "relative"])
def test_stream_mode_checkpoint_and_inbox_at_a_uri_or_plain_path(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    monkeypatch.chdir(tmp_path)
    ckpt = f"file://{tmp_path}/ckpt" if form == "uri" else "ckpt"
    items = [("a", 1), ("b", 2), ("a", 3), ("b", 4)]
    assert keyed_totals(items, ckpt) == [("a", 1), ("b", 2), ("a", 4), ("b", 6)]
    assert not (tmp_path / "file:").exists()
    inbox = sorted(os.listdir(tmp_path / "ckpt" / "inbox"))
    assert [n for n in inbox if not n.startswith(".")] == [
        "batch-000000000000.parquet", "batch-000000000001.parquet"]
    assert (tmp_path / "ckpt" / "query" / "offsets").is_dir()  # Spark's own checkpoint
    # A restart at the same location resumes Spark's keyed state.
    assert keyed_totals([("a", 10)], ckpt) == [("a", 14)]


@pytest.mark.parametrize("form", ["uri", "relative"])
def test_batch_mode_state_at_a_uri_or_plain_path_resumes(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    monkeypatch.chdir(tmp_path)
    ckpt = f"file://{tmp_path}/state" if form == "uri" else "state"
    assert running_total([1, 2, 3, 4], ckpt) == [1, 3, 6, 10]
    assert not (tmp_path / "file:").exists()
    assert running_total([5], ckpt) == [15]


def test_from_spark_delivered_batch_at_a_uri(spark: Any, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spark.range(4).write.parquet(str(tmp_path / "in"))
    df = spark.readStream.schema("id long").parquet(f"file://{tmp_path}/in")
    source = Stream.from_spark(df, checkpoint=f"file://{tmp_path}/ckpt")
    out = source.map(lambda x: x + 1).gather().sink_to_list()
    source.start()
    assert sorted(out) == [1, 2, 3, 4]
    assert not (tmp_path / "file:").exists()
    assert os.listdir(tmp_path / "ckpt" / "delivered") == ["state-000000000000.pickle"]


def test_scratch_directory_of_a_local_master_is_removed_at_close(spark: Any) -> None:
    source = Stream()
    entry = source.to_spark()
    entry.scan(add, start=0, key=lambda x: x % 2).gather().sink_to_list()
    source.emit(1)
    runner = entry._start()
    where = runner._scratch
    assert where is not None and where.local is not None and os.path.isdir(where.local)
    source.close()
    assert not os.path.exists(where.local)


@settings(max_examples=5, deadline=None)
@given(states=st.lists(st.binary(max_size=2000), min_size=1, max_size=4))
def test_states_written_through_hadoop_read_back_newest(
        spark: Any, tmp_path_factory: pytest.TempPathFactory, states: list[bytes]) -> None:
    """Property: through Hadoop's FileSystem (as for hdfs:// or s3a://), the
    newest state saved is the one read, and one state file is left."""
    d = tmp_path_factory.mktemp("hadoop")
    where = location(f"file://{d}/ckpt", spark, hadoop=True)
    assert where.local is None  # the JVM gateway path, not the os calls
    assert where.load_state() is None
    for data in states:
        where.save_state(data)
    assert where.load_state() == states[-1]
    # Hadoop's local FileSystem adds hidden .crc files; no temporary is left.
    visible = [n for n in os.listdir(d / "ckpt") if not n.startswith(".")]
    assert visible == [f"state-{len(states) - 1:012d}.pickle"]
    assert not any(n.endswith(".tmp") for n in os.listdir(d / "ckpt"))


def test_inbox_written_through_hadoop_is_read_by_the_query(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = location(f"file://{tmp_path}/inbox", spark, hadoop=True)
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": [1, 2, 3]}), sink)
    where.write_atomic("part.parquet", sink.getvalue().to_pybytes())
    assert where.names() == ["part.parquet"]  # Hadoop lists no .crc files
    assert sorted(r.x for r in spark.read.parquet(where.uri).collect()) == [1, 2, 3]
