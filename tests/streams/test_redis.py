"""The Redis Streams connector against a real redis-server."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from streams import Checkpointer, NodeError, Stream
from streams.state import CheckpointError

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.redis


def fill(r: Any, key: str, n: int, start: int = 0) -> list[str]:
    pipe = r.pipeline(transaction=False)
    for i in range(start, start + n):
        pipe.xadd(key, {"n": i})
    return pipe.execute()  # type: ignore[no-any-return]


def values(r: Any, key: str, field: str = "n") -> list[Any]:
    return [fields[field] for _, fields in r.xrange(key)]


# ----------------------------------------------------------------------
# sink_to_redis


@pytest.mark.parametrize("method", ["script", "pipeline"])
def test_sink_writes_batches_and_the_rest_at_close(r: Any, redis_url: str, method: str) -> None:
    source = Stream()
    source.sink_to_redis("out", url=redis_url, batch=3, method=method)
    for i in range(4):
        source.emit({"n": i, "sq": i * i})
    assert values(r, "out") == ["0", "1", "2"]  # one full batch so far
    source.emit("plain")
    source.emit(b"bytes")
    source.close()
    entries = [fields for _, fields in r.xrange("out")]
    assert entries == [{"n": "0", "sq": "0"}, {"n": "1", "sq": "1"}, {"n": "2", "sq": "4"},
                       {"n": "3", "sq": "9"}, {"data": "plain"}, {"data": "bytes"}]


@pytest.mark.parametrize("method", ["script", "pipeline"])
def test_sink_trims_with_maxlen(r: Any, redis_url: str, method: str) -> None:
    source = Stream.from_iterable({"n": i} for i in range(50))
    source.sink_to_redis("out", url=redis_url, maxlen=10, approximate=False, batch=7,
                         method=method)
    source.start()
    assert values(r, "out") == [str(i) for i in range(40, 50)]


def test_sink_with_mixed_fields_in_one_batch(r: Any, redis_url: str) -> None:
    source = Stream.from_iterable([{"a": 1}, {"a": 2, "b": 3}, {"b": 4}, 5])
    source.sink_to_redis("out", url=redis_url, field="v")
    source.start()
    assert [f for _, f in r.xrange("out")] == [
        {"a": "1"}, {"a": "2", "b": "3"}, {"b": "4"}, {"v": "5"}]


def test_sink_error_names_the_node_and_the_element(redis_url: str) -> None:
    source = Stream()
    source.sink_to_redis("out", url=redis_url, stream_name="results")
    source.emit({"ok": 1})
    source.emit({"bad": [1, 2]})
    with pytest.raises(NodeError, match=r"sink_to_redis.*'results'.*\[1, 2\]"):
        source.close()


def emit_then_close(source: Stream[Any], items: list[Any]) -> None:
    """Emit ``items`` into ``source`` and close it: awaited on a loop if it is asynchronous."""
    async def run() -> None:
        for x in items:
            await source.emit(x)
        await source.aclose()

    if source.asynchronous:
        asyncio.run(run())
    else:
        for x in items:
            source.emit(x)
        source.close()


@pytest.mark.parametrize("method", ["script", "pipeline"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_element_redis_cannot_store_fails_alone(r: Any, redis_url: str, method: str,
                                                   asynchronous: bool) -> None:
    # The batch it came in is written without it; it goes to the policy.
    items = [1, {"a": 2}, None, {"b": [3]}, True, 6.5, "x"]
    source = Stream(asynchronous=asynchronous)
    sink = source.sink_to_redis("out", url=redis_url, batch=100, method=method)
    errors = sink.on_error("route").errors.map(lambda e: e.element).sink_to_list()
    emit_then_close(source, items)
    assert errors == [None, {"b": [3]}, True]
    assert [f for _, f in r.xrange("out")] == [
        {"data": "1"}, {"a": "2"}, {"data": "6.5"}, {"data": "x"}]


def test_sink_bad_arguments() -> None:
    with pytest.raises(ValueError, match="batch must be an int >= 1"):
        Stream().sink_to_redis("s", batch=0)
    with pytest.raises(ValueError, match="maxlen must be an int >= 1"):
        Stream().sink_to_redis("s", maxlen=0)
    with pytest.raises(ValueError, match="method must be"):
        Stream().sink_to_redis("s", method="lua")


# ----------------------------------------------------------------------
# from_redis without a group: XREAD, replayable by id


def test_read_whole_stream_in_order_then_close(r: Any, redis_url: str) -> None:
    fill(r, "in", 25)
    source = Stream.from_redis("in", url=redis_url, count=4)
    out = source.map(lambda f: int(f["n"])).sink_to_list()
    closed = source.partition(1000).sink_to_list()  # flushed at close
    source.start()
    assert out == list(range(25))
    assert len(closed) == 1 and len(closed[0]) == 25


@pytest.mark.parametrize("group", [None, "g"])
def test_start_again_after_a_failing_element_goes_on_from_it(r: Any, redis_url: str,
                                                             group: str | None) -> None:
    # The entries of the batch before the failing one went through: a new
    # start() does not replay them.
    fill(r, "in", 5)
    failed: list[str] = []

    def once(fields: dict[str, Any]) -> str:
        if fields["n"] == "3" and not failed:
            failed.append("3")
            raise RuntimeError("once")
        return fields["n"]  # type: ignore[no-any-return]

    source = Stream.from_redis("in", url=redis_url, **({"group": group, "consumer": "c"}
                                                       if group else {}))
    out = source.map(once).sink_to_list()
    with pytest.raises(NodeError, match="once"):
        source.start()
    source.start()
    assert out == ["0", "1", "2", "3", "4"]


def test_start_from_an_id_and_from_a_time(r: Any, redis_url: str) -> None:
    ids = [r.xadd("in", {"n": i}, id=f"{1000 * (i + 1)}-0") for i in range(5)]
    source = Stream.from_redis("in", url=redis_url, start=ids[1], with_id=True)
    out = source.sink_to_list()
    source.start()
    assert out == [(ids[i], {"n": str(i)}) for i in range(2, 5)]

    at = dt.datetime.fromtimestamp(3.0, tz=dt.UTC)  # 3000 ms: entry 2 and later
    source = Stream.from_redis("in", url=redis_url, start=at)
    out = source.map(lambda f: f["n"]).sink_to_list()
    source.start()
    assert out == ["2", "3", "4"]


def test_checkpoint_resumes_an_xread_after_the_last_id(r: Any, redis_url: str,
                                                        tmp_path: Path) -> None:
    fill(r, "in", 5)

    def run() -> list[Any]:
        source = Stream.from_redis("in", url=redis_url, count=2)
        out = source.map(lambda f: int(f["n"])).scan(lambda a, b: a + b).sink_to_list()
        Checkpointer(source, tmp_path, every=1, fsync=False)
        source.start()
        return out

    assert run() == [0, 1, 3, 6, 10]
    fill(r, "in", 2, start=5)
    assert run() == [15, 21]


def test_a_checkpoint_over_the_stream_of_another_database_is_refused(
        r: Any, redis_url: str, tmp_path: Path) -> None:
    # The same name in another database is another stream: the checkpoint's
    # offset would skip its first entries, and acknowledge ids of the other.
    def url(db: int) -> str:
        return f"{redis_url.rsplit('/', 1)[0]}/{db}"

    other = redis.Redis.from_url(url(1))
    fill(r, "events", 3)
    fill(other, "events", 3, start=10)
    other.close()

    def run(db: int) -> list[Any]:
        source = Stream.from_redis("events", group="g", consumer="c", url=url(db))
        out = source.map(lambda f: int(f["n"])).sink_to_list()
        Checkpointer(source, tmp_path, every=1, fsync=False)
        source.start()
        return out

    assert run(0) == [0, 1, 2]
    with pytest.raises(CheckpointError,
                       match=r"reads {.*'db': 1}, the checkpoint's read {.*'db': 0}"):
        run(1)
    fill(r, "events", 1, start=3)
    assert run(0) == [3]


# ----------------------------------------------------------------------
# from_redis with a consumer group


def test_group_reads_and_acknowledges_everything(r: Any, redis_url: str) -> None:
    fill(r, "in", 30)
    source = Stream.from_redis("in", group="g", consumer="c1", url=redis_url, count=7)
    out = source.map(lambda f: int(f["n"])).sink_to_list()
    source.start()
    assert out == list(range(30))
    assert r.xpending("in", "g")["pending"] == 0
    # A second run of the group sees nothing new.
    source = Stream.from_redis("in", group="g", consumer="c1", url=redis_url)
    assert source.sink_to_list() == [] and source.start() is None


def test_at_least_once_without_checkpoint(r: Any, redis_url: str) -> None:
    fill(r, "in", 10)
    seen: list[int] = []

    def crash_at_7(x: int) -> None:
        if x == 7 and 7 not in seen:
            seen.append(x)
            raise RuntimeError("crash")
        seen.append(x)

    source = Stream.from_redis("in", group="g", consumer="c1", url=redis_url, count=4)
    source.map(lambda f: int(f["n"])).sink(crash_at_7)
    with pytest.raises(NodeError, match="crash"):
        source.start()
    # Batches [0..3], [4..7], [8, 9]: the first was acknowledged; the second
    # failed; the third, requested while the second was processed, is pending too.
    assert r.xpending("in", "g")["pending"] == 6
    source = Stream.from_redis("in", group="g", consumer="c1", url=redis_url, count=4)
    source.map(lambda f: int(f["n"])).sink(crash_at_7)
    source.start()
    assert seen == [0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7, 8, 9]
    assert r.xpending("in", "g")["pending"] == 0


def test_ack_waits_for_async_downstream_work(r: Any, redis_url: str) -> None:
    fill(r, "in", 6)
    pending_seen: list[int] = []

    async def slow_sink(x: Any) -> None:
        await asyncio.sleep(0)
        pending_seen.append(r.xpending("in", "g")["pending"])

    async def main() -> None:
        source = Stream.from_redis("in", group="g", consumer="c1", url=redis_url, count=3,
                                   asynchronous=True)
        source.sink(slow_sink)
        source.sink(lambda x: source.stop() if x["n"] == "5" else None)
        await source.start()

    asyncio.run(main())
    # While element k of a batch of 3 runs, its whole batch is still pending.
    assert pending_seen == [3, 3, 3, 3, 3, 3]
    assert r.xpending("in", "g")["pending"] == 0


def test_claims_entries_of_a_dead_consumer(r: Any, redis_url: str) -> None:
    fill(r, "in", 5)
    r.xgroup_create("in", "g", id="0")
    r.xreadgroup("g", "dead", {"in": ">"}, count=3)  # took 3 and died
    source = Stream.from_redis("in", group="g", consumer="alive", url=redis_url,
                               claim_idle=0.0)
    out = source.map(lambda f: int(f["n"])).sink_to_list()
    source.start()
    assert sorted(out) == [0, 1, 2, 3, 4]
    assert r.xpending("in", "g")["pending"] == 0
    without = Stream.from_redis("in", group="g2", consumer="x", url=redis_url)
    assert without.claim_idle is None


def test_async_pipeline_from_redis_to_redis(r: Any, redis_url: str) -> None:
    fill(r, "in", 40)

    async def main() -> None:
        source = Stream.from_redis("in", group="g", consumer="c", url=redis_url, count=8,
                                   block=0.05, asynchronous=True)
        doubled = source.map(lambda f: {"n": int(f["n"]) * 2})
        doubled.sink_to_redis("out", url=redis_url, batch=5)
        doubled.sink(lambda f: source.stop() if f["n"] == 78 else None)
        await source.start()

    asyncio.run(main())
    assert values(r, "out") == [str(2 * i) for i in range(40)]
    assert r.xpending("in", "g")["pending"] == 0


def test_group_with_checkpoint_acks_only_what_a_checkpoint_covers(
        r: Any, redis_url: str, tmp_path: Path) -> None:
    ids = fill(r, "in", 10)
    source = Stream.from_redis("in", group="g", consumer="c", url=redis_url, count=4)
    out = source.map(lambda f: int(f["n"])).scan(lambda a, b: a + b).sink_to_list()
    # Written in the pipeline's thread, so each is on disk as soon as taken.
    cp = Checkpointer(source, tmp_path, every=3, fsync=False, background=False)
    acked_at_checkpoint: list[int] = []
    original = cp._take

    def spy(*args: Any) -> None:
        # Of the entries processed so far, those no longer pending: one
        # command, so the batch the source has already asked for (read
        # ahead) is not counted, whether or not the server has sent it yet.
        done = len(out)
        pending = r.xpending_range("in", "g", min="-", max=ids[done - 1], count=len(ids))
        acked_at_checkpoint.append(done - len(pending))
        original(*args)

    cp._take = spy  # type: ignore[method-assign]
    source.start()
    assert r.xpending("in", "g")["pending"] == 0
    # every=3 is honoured at batch ends (batches of 4): checkpoints after 4 and
    # 8 elements and at close, covering 4, 8 and 10 entries.
    assert len(acked_at_checkpoint) == 3
    covered_before = [0, 4, 8]
    # Never early: as a checkpoint is taken, no entry is acknowledged that an
    # earlier checkpoint does not cover. The second one's count is 0 or 4:
    # the acknowledgement of the first batch travels with the read sent
    # ahead, and the server may not have handled it yet.
    assert all(a <= c for a, c in zip(acked_at_checkpoint, covered_before, strict=True))
    # Not late either: by the last checkpoint, every entry the earlier ones
    # cover is acknowledged (the read that carried those acknowledgements
    # has been answered), before the source's final acknowledgement.
    assert acked_at_checkpoint[-1] == covered_before[-1]


def test_source_bad_arguments(redis_url: str) -> None:
    with pytest.raises(ValueError, match="both group= and consumer="):
        Stream.from_redis("s", group="g")
    with pytest.raises(ValueError, match="count must be an int >= 1"):
        Stream.from_redis("s", count=0)
    with pytest.raises(TypeError, match="start must be"):
        Stream.from_redis("s", start=[1])
    source = Stream.from_redis("s", client=redis.asyncio.Redis.from_url(redis_url))
    with pytest.raises(TypeError, match="runs without a loop"):
        source.start()


def test_a_given_client_is_not_changed(r: Any, redis_url: str) -> None:
    fill(r, "in", 2)
    source = Stream.from_redis("in", client=r)
    out = source.sink_to_list()
    source.start()
    assert out == [{"n": "0"}, {"n": "1"}]
    assert r.xread({"in": "0"}, count=1)[0][1][0][1] == {"n": "0"}  # still parsed


def test_async_group_with_checkpoint_resumes_exactly(r: Any, redis_url: str,
                                                     tmp_path: Path) -> None:
    fill(r, "in", 20)

    async def run(stop_at: int) -> list[Any]:
        source = Stream.from_redis("in", group="g", consumer="c", url=redis_url, count=3,
                                   block=0.05, asynchronous=True)
        totals = source.map(lambda f: int(f["n"])).scan(lambda a, b: a + b, start=0)
        out = totals.sink_to_list()

        async def slow(x: int) -> None:
            await asyncio.sleep(0)
            if x >= stop_at:
                source.stop()

        totals.sink(slow)
        Checkpointer(source, tmp_path, every=2, fsync=False)
        await source.start()
        return out

    first = asyncio.run(run(stop_at=sum(range(8))))  # stops within the third batch
    second = asyncio.run(run(stop_at=sum(range(20))))
    # The second run starts from the last checkpoint (taken at a batch end):
    # it repeats what the first did after that checkpoint, with the same
    # totals (its state was restored), and goes on to the end.
    everything = [sum(range(i + 1)) for i in range(20)]
    assert first == everything[:len(first)]
    assert second == everything[len(everything) - len(second):]
    assert len(first) + len(second) >= 20
    assert r.xpending("in", "g")["pending"] == 0


def test_sink_reloads_its_script_after_a_server_flush(r: Any, redis_url: str) -> None:
    source = Stream()
    source.sink_to_redis("out", url=redis_url, batch=2)
    source.emit({"n": 1})
    source.emit({"n": 2})
    r.script_flush()  # a restarted server has no scripts
    source.emit({"n": 3})
    source.emit({"n": 4})
    assert values(r, "out") == ["1", "2", "3", "4"]


def acknowledged(r: Any, key: str, group: str) -> int:
    """How many entries ``group`` read from ``key`` and acknowledged, at one moment."""
    pipe = r.pipeline(transaction=True)  # both counts from the same moment
    pipe.xinfo_groups(key)
    pipe.xpending(key, group)
    groups, pending = pipe.execute()
    (info,) = [g for g in groups if g["name"] == group]
    return int(info["entries-read"]) - int(pending["pending"])


def test_acks_never_precede_the_checkpoint_on_disk(r: Any, redis_url: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer is held on checkpoint 0 until element 30, then let through
    to the newest checkpoint before the pipeline goes on: every element sees
    no more acknowledged than the checkpoints written and synced cover, and
    the first read after they are on disk acknowledges all they cover."""
    import pickle
    import threading

    from streams import _checkpoint_io

    ids = fill(r, "in", 40)
    real = _checkpoint_io.write_file
    entered, gate = threading.Event(), threading.Event()
    written: list[int] = []
    on_disk = [0]  # how many entries the newest checkpoint written and synced covers

    def gated(directory: Path, sequence: int, data: bytes, *args: Any) -> Any:
        entered.set()
        assert gate.wait(timeout=60), "the test never opened the gate"
        path = real(directory, sequence, data, *args)  # returns once synced (fsync=True)
        offset = pickle.loads(data.split(b"\n", 1)[1])[0]["offset"]
        on_disk[0] = ids.index(offset) + 1
        written.append(sequence)
        return path

    monkeypatch.setattr(_checkpoint_io, "write_file", gated)
    source = Stream.from_redis("in", group="g", consumer="c", url=redis_url, count=4)
    numbers = source.map(lambda f: int(f["n"]))
    numbers.map(lambda n: {"n": n}).sink_to_redis("out", url=redis_url, batch=3)
    # A checkpoint at each batch end (k: after elements 4k..4k+3), handed to
    # the writer two reads later, once the sink's writes it covers are confirmed.
    cp = Checkpointer(source, tmp_path, every=4, fsync=True, background=True)

    def check(n: int) -> None:
        # Acks are sent by this thread only, with its reads between batches:
        # stable while it runs.
        acked = acknowledged(r, "in", "g")
        assert acked <= on_disk[0], (n, acked, on_disk[0])
        if n == 9:
            # Checkpoint 0 went to the writer before elements 8..11, and is
            # held there until 30.
            assert entered.wait(timeout=60)
        if n == 30:
            assert acked == 0  # nothing is on disk yet, so nothing is acknowledged
            gate.set()
            # Checkpoints 1..5 reached the writer while 0 was held, each
            # replacing the one before; wait() hands over 6, which replaces
            # 5, and returns once 0 and 6 are on disk. The test decides when
            # they get there, not the scheduler of the writer thread.
            cp.wait()
            assert on_disk[0] == 28 and written == [0, 6]
        if n == 36:
            # The read sent before elements 32..35 carried the acks of what
            # 6 covers; its reply, read before 36, says the server has them.
            # (Before that reply the server may not have read them yet: it
            # need not serve two connections in the order they were sent.)
            assert acked >= 28

    numbers.sink(check)
    source.start()
    assert values(r, "out") == [str(i) for i in range(40)]
    assert r.xpending("in", "g")["pending"] == 0
    assert written[:2] == [0, 6] and written == sorted(set(written)) and cp.superseded >= 5
    assert cp.durable == written[-1] == cp.sequence - 1


def test_a_write_confirmed_late_still_holds_back_the_acks(r: Any, redis_url: str) -> None:
    # Without a loop the sink's reply is read a round later; a failed write
    # must still be reported, naming the node, and its entries stay pending.
    fill(r, "in", 12)
    r.set("out", "not a stream")  # every XADD to it fails (WRONGTYPE)
    source = Stream.from_redis("in", group="g", consumer="c", url=redis_url, count=4)
    written: list[int] = []
    numbers = source.map(lambda f: int(f["n"]))
    numbers.map(lambda n: {"n": n}).sink_to_redis("out", url=redis_url, batch=4,
                                                    stream_name="results")
    numbers.sink(written.append)
    with pytest.raises(NodeError, match=r"sink_to_redis.*'results'.*WRONGTYPE"):
        source.start()
    assert written[:4] == [0, 1, 2, 3]  # the next batch ran before the reply was read
    delivered = r.xinfo_groups("in")[0]["entries-read"]
    assert r.xpending("in", "g")["pending"] == delivered >= 4  # nothing acknowledged
    # The sink is not left waiting for replies: a new run writes once "out" is fixed.
    r.delete("out")
    source = Stream.from_redis("in", group="g", consumer="c", url=redis_url, count=4)
    source.map(lambda f: {"n": int(f["n"])}).sink_to_redis("out", url=redis_url, batch=4)
    source.start()
    assert values(r, "out") == [str(i) for i in range(12)]
    assert r.xpending("in", "g")["pending"] == 0


def test_saved_ids_restore_from_chunks_and_from_single_ids() -> None:
    source = Stream.from_redis("in", group="g", consumer="c")
    source.processed = ["1-0", "1-1"]
    source._checkpoint_taken(0)  # covered by checkpoint 0, not yet on disk
    source.processed = ["2-0"]
    saved = source.snapshot()
    assert saved["processed"] == ["1-0\n1-1", "2-0"]  # one string per batch
    source = Stream.from_redis("in", group="g", consumer="c")
    source.restore(saved)
    assert source.processed == ["1-0", "1-1", "2-0"]
    # A checkpoint written with one id an entry reads the same.
    source.restore({"offset": b"2-0", "processed": [b"1-0", b"2-0"], "_acks": []})
    assert source.processed == [b"1-0", b"2-0"]
