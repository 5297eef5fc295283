"""A checkpoint is refused where it would be applied to something else.

Another input file (its offsets mean nothing there), a stateful node whose
function changed (its state was built by the old one) or whose functions and
arguments given as parameters changed (a key, a time, ``functools.partial``'s
arguments), a graph with no source that ``every=`` or ``interval=`` could
ever count. Writer names in ``writers.json`` are reused by the same graph
over the same input only, and a checkpoint restored from its older slot,
the newer failing its checksum, says so.
"""

from __future__ import annotations

import json
import logging
import re
import struct
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import Any

import pytest

from streams import Checkpointer, CheckpointError, Stream
from streams._checkpoint_io import BLOCK, MAGIC, Job, Writer, read_record, write_file
from streams.snapshot import restore_graph, snapshot_graph


def add(s: int, x: int) -> int:
    return s + x


def add_second(s: int, x: tuple[int, int]) -> int:
    return s + x[1]


def mul(s: int, x: int) -> int:
    return s * x + 1


def run_file(path: Path, ckpt: Path, func=add) -> list[int]:  # type: ignore[no-untyped-def]
    return run_path(str(path), ckpt, func)


def test_a_checkpoint_over_one_file_is_refused_for_another(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("1\n2\n3\n")
    b.write_text("10\n20\n30\n40\n")
    assert run_file(a, tmp_path / "ckpt") == [1, 3, 6]
    with pytest.raises(CheckpointError, match=r"another input.*b\.txt.*a\.txt"):
        run_file(b, tmp_path / "ckpt")


def test_the_same_file_resumes(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("1\n2\n3\n")
    run_file(a, tmp_path / "ckpt")
    with a.open("a") as f:
        f.write("4\n")
    assert run_file(a, tmp_path / "ckpt") == [10]


def test_a_checkpoint_is_refused_when_the_scan_function_changed(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("1\n2\n3\n")
    run_file(a, tmp_path / "ckpt", add)
    with pytest.raises(CheckpointError, match=r"accumulate.*function changed.*add then.*mul now"):
        run_file(a, tmp_path / "ckpt", mul)


def test_a_changed_function_body_under_the_same_name_is_refused(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("1\n2\n3\n")
    run_file(a, tmp_path / "ckpt", lambda s, x: s + x)
    with pytest.raises(CheckpointError, match="function changed"):
        run_file(a, tmp_path / "ckpt", lambda s, x: s - x)


def test_the_same_lambda_built_again_resumes(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("1\n2\n")

    def build() -> list[int]:
        return run_file(a, tmp_path / "ckpt", lambda s, x: s + x)

    build()
    with a.open("a") as f:
        f.write("3\n")
    assert build() == [6]


def test_a_checkpointer_with_no_source_to_count_is_refused(tmp_path: Path) -> None:
    source = Stream()
    source.scan(add, start=0).sink_to_list()
    with pytest.raises(CheckpointError, match=r"no source.*manual=True"):
        Checkpointer(source, tmp_path, every=1)
    with pytest.raises(CheckpointError, match="no source"):
        Checkpointer(source, tmp_path, interval=1.0)
    Checkpointer(source, tmp_path, every=1, manual=True).save()  # the caller drives it


def run_path(path: Path | str, ckpt: Path, func: Any = add) -> list[int]:
    source = Stream.from_textfile(path)
    out = source.map(int).scan(func, start=0).sink_to_list()
    Checkpointer(source, ckpt, every=2, fsync=False)
    source.start()
    return out


def test_a_checkpoint_over_one_path_object_is_refused_for_another(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("1\n2\n3\n")
    b.write_text("10\n20\n30\n40\n")
    run_path(a, tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=r"another input.*b\.txt.*a\.txt"):
        run_path(b, tmp_path / "ckpt")


def test_a_file_named_by_text_then_by_path_resumes(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("1\n2\n")
    run_path(str(a), tmp_path / "ckpt")
    with a.open("a") as f:
        f.write("3\n")
    assert run_path(a, tmp_path / "ckpt") == [6]


def _restored(tmp_path: Path, build: Any, first: Any, second: Any) -> list[Any]:
    """Emit into ``build(first)``, checkpoint, then build ``build(second)`` from it."""
    source, _ = build(first)
    source.emit(1)
    Checkpointer(source, tmp_path, manual=True, fsync=False).save_sync()
    source, out = build(second)
    Checkpointer(source, tmp_path, manual=True, fsync=False)
    return out


@pytest.mark.parametrize(("build", "first", "second", "changed"), [
    (lambda size: _one(lambda s: s.timed_window(size, time=float)), 10, 3,
     "interval 10.0 then, 3.0 now"),
    (lambda n: _one(lambda s: s.partition(n)), 3, 5, "n 3 then, 5 now"),
    (lambda k: _one(lambda s: s.map(lambda x: (x, x)).scan(add_second, start=0, key=k)), 0, 1,
     "key 0 then, 1 now"),
])
def test_a_stateful_node_under_other_parameters_is_refused(
        tmp_path: Path, build: Any, first: Any, second: Any, changed: str) -> None:
    with pytest.raises(CheckpointError, match=f"parameters changed.*{changed}"):
        _restored(tmp_path, build, first, second)


def test_parameters_the_state_does_not_depend_on_may_change(tmp_path: Path) -> None:
    out = _restored(tmp_path, lambda t: _one(lambda s: s.partition(2, timeout=t)), 1.0, 5.0)
    assert out == []  # restored, with its open group


def test_a_zip_fed_the_other_way_round_is_refused(tmp_path: Path) -> None:
    def build(swap: bool) -> tuple[Stream[Any], list[Any]]:
        a, c = Stream(stream_name="a"), Stream(stream_name="c")
        return a, (c.zip(a) if swap else a.zip(c)).sink_to_list()

    with pytest.raises(CheckpointError, match="upstreams"):
        _restored(tmp_path, build, False, True)


def _one(chain: Any) -> tuple[Stream[Any], list[Any]]:
    source = Stream()
    return source, chain(source).sink_to_list()


@pytest.mark.parametrize("port", [-1, 65536, 70000, 99999, "abc", 80.0, True])
def test_ports_out_of_range_are_refused(port: object) -> None:
    with pytest.raises(ValueError, match=r"from_tcp\(\): port must be an int from 0 to 65535"):
        Stream.from_tcp(port)
    with pytest.raises(ValueError, match=r"from_http_server\(\): port must be"):
        Stream.from_http_server(port)


@pytest.mark.parametrize("items", [{"a", "b"}, frozenset({1, 2})])
def test_a_set_source_is_refused_a_checkpoint(tmp_path: Path, items: Any) -> None:
    source = Stream.from_iterable(items)
    source.sink_to_list()
    with pytest.raises(CheckpointError, match=r"from_iterable.*set has no order.*sorted"):
        Checkpointer(source, tmp_path, every=1)
    sorted_source = Stream.from_iterable(sorted(items))
    sorted_source.sink_to_list()
    Checkpointer(sorted_source, tmp_path, every=1)


def test_a_refused_graph_leaves_no_source_attached(tmp_path: Path) -> None:
    listed, unordered = Stream.from_iterable([1, 2]), Stream.from_iterable({"a", "b"})
    listed.union(unordered).sink_to_list()
    with pytest.raises(CheckpointError, match="set has no order"):
        Checkpointer(listed, tmp_path, every=1)
    assert listed._checkpointer is None  # type: ignore[attr-defined]



# -- functions given as parameters, and the arguments bound to functions ----------


def weighted(s: int, x: int, factor: int) -> int:
    return s + x * factor


def tagged(s: int, x: int, tag: Any = None, scale: int = 1) -> int:
    return s + x * scale


def _snapshot_then_restore(first: Any, second: Any, feed: Any = (1, 2, 3),
                           then: Any = ()) -> list[Any]:
    """Feed ``feed`` to ``first(source)``'s graph, snapshot it, restore the snapshot into
    ``second(source)``'s and feed it ``then``: the new graph's output."""
    source = Stream()
    first(source).sink_to_list()
    for x in feed:
        source.emit(x)
    snap = snapshot_graph(source)
    source = Stream()
    out: list[Any] = second(source).sink_to_list()
    restore_graph(source, snap)
    for x in then:
        source.emit(x)
    return out


def _scan(**params: Any) -> Any:
    return lambda s: s.scan(weighted, start=0, **params)


@pytest.mark.parametrize(("first", "second", "changed"), [
    (_scan(factor=1, key=lambda x: x % 2), _scan(factor=1, key=lambda x: x % 3),
     r"accumulate\(weighted\)'s parameters changed \(key: .*<lambda>, its code changed"),
    (_scan(factor=1), _scan(factor=100),
     r"parameters changed \(kwargs \{'factor': 1\} then, \{'factor': 100\} now"),
    (lambda s: s.scan(partial(weighted, factor=1), start=0),
     lambda s: s.scan(partial(weighted, factor=100), start=0),
     r"function changed \(.*weighted bound to .*'factor': 1.* then, to .*'factor': 100.* now"),
    (lambda s: s.scan(partial(weighted, 1), start=0),
     lambda s: s.scan(partial(weighted, 2), start=0), r"function changed.*\(1,\).*\(2,\)"),
    (_scan(factor=1, key=lambda x, n=2: x % n), _scan(factor=1, key=lambda x, n=3: x % n),
     r"key: .*defaults=\(2,\) then, to defaults=\(3,\) now"),
    (_scan(factor=1, key=itemgetter(0)), _scan(factor=1, key=itemgetter(1)),
     r"key: operator.itemgetter bound to operator.itemgetter\(0\) then"),
    (_scan(factor=1, key=abs), _scan(factor=1, key=round),
     r"key: builtins.abs then, builtins.round now"),
    (_scan(factor=1, key=0, ttl=5, time=lambda x: x),
     _scan(factor=1, key=0, ttl=5, time=lambda x: x * 1000), r"time: .*its code changed"),
    (lambda s: s.timed_window(4, time=lambda x: x),
     lambda s: s.timed_window(4, time=lambda x: x * 10), r"timed_window.*time: "),
    (lambda s: s.session_window(5, time=float, key=lambda x: x % 2),
     lambda s: s.session_window(5, time=float, key=lambda x: x % 3), r"session_window.*key: "),
    (lambda s: s.stateful_map(lambda st, x: (st + x, [st + x]), start=0, key=lambda x: x % 2),
     lambda s: s.stateful_map(lambda st, x: (st + x, [st + x]), start=0, key=lambda x: -x),
     r"stateful_map.*key: "),
    (lambda s: s.lookup(s.filter(lambda x: x > 1), key=lambda x: x, default=None),
     lambda s: s.lookup(s.filter(lambda x: x > 1), key=lambda x: -x, default=None),
     r"lookup.*key: "),
    (lambda s: s.filter(lambda x: x % 2).join(s.filter(lambda x: x % 2 == 0),
                                                key=lambda x: x % 3, within=5, time=float),
     lambda s: s.filter(lambda x: x % 2).join(s.filter(lambda x: x % 2 == 0),
                                                key=lambda x: x % 4, within=5, time=float),
     r"join.*key: "),
])
def test_a_changed_function_parameter_or_bound_argument_is_refused(
        first: Any, second: Any, changed: str) -> None:
    with pytest.raises(CheckpointError, match=changed):
        _snapshot_then_restore(first, second, feed=())


def test_a_scan_whose_key_lambda_changed_is_refused_its_checkpoint(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("".join(f"{i}\n" for i in range(10)))

    def run(key: Any, stop_after: int | None = None) -> list[Any]:
        source = Stream.from_textfile(a)
        numbers = source.map(int)
        out = numbers.scan(add, start=0, key=key).sink_to_list()
        numbers.sink(lambda x: source.stop() if x == stop_after else None)
        Checkpointer(source, tmp_path / "ckpt", every=1, fsync=False)
        source.start()
        return out

    run(lambda x: x % 2, stop_after=5)
    with pytest.raises(CheckpointError, match=r"accumulate\(add\)'s parameters changed \(key: "
                                              r".*<lambda>, its code changed\).*remove the "
                                              r"directory .*ckpt, both its checkpoint and its "
                                              r"writers\.json"):
        run(lambda x: x % 3)
    assert run(lambda x: x % 2) == [(0, 12), (1, 16), (0, 20), (1, 25)]  # the same key resumes


@pytest.mark.parametrize(("build", "feed", "then", "expected"), [
    (_scan(factor=1, key=lambda x: x % 2), [1, 2, 3], [5], [(1, 9)]),
    (lambda s: s.scan(partial(add_second), start=0, key=itemgetter(0)),
     [("a", 1), ("b", 2), ("a", 3)], [("a", 5)], [("a", 9)]),
    (_scan(factor=10, key=lambda x, n=2: x % n, ttl=5, time=float), [1, 2, 3], [5], [(1, 90)]),
    (lambda s: s.scan(partial(tagged, scale=2), start=0, key=str, tag=(1, "a", None)),
     [1, 1], [1], [("1", 6)]),
])
def test_an_unchanged_graph_with_functions_and_bound_arguments_resumes(
        build: Any, feed: Any, then: Any, expected: Any) -> None:
    assert _snapshot_then_restore(build, build, feed, then) == expected


def test_values_the_function_changes_as_it_runs_do_not_refuse_a_restore() -> None:
    # Its start (the state, grown in place), a dict in its closure, a mutable
    # default and a mutable keyword argument: what they hold at the snapshot
    # is not what a new graph's hold, and no restore must fail for that.
    def build(source: Stream[Any]) -> Any:
        cache: dict[int, int] = {}

        def total(s: list[int], x: int, seen: list[int] = [],  # noqa: B006
                  log: Any = None, ref: Any = None) -> list[int]:
            cache[x] = x
            seen.append(x)
            log.append(x)
            s.append(x)
            return s

        return source.scan(total, start=[], log=[], ref=object())

    assert _snapshot_then_restore(build, build, [1, 2], [3]) == [[1, 2, 3]]


def test_a_mutable_default_filled_as_it_runs_does_not_refuse_a_checkpoint(
        tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("1\n2\n")

    def seen_once(s: int, x: int, seen: set[int] = set()) -> int:  # noqa: B006
        seen.add(x)
        return s + x

    assert run_path(a, tmp_path / "ckpt", seen_once) == [1, 3]
    with a.open("a") as f:
        f.write("3\n")
    assert run_path(a, tmp_path / "ckpt", seen_once) == [6]


def _as_the_release_before_wrote_it(directory: Path) -> None:
    """Rewrite the checkpoint in ``directory`` as the release before this one recorded
    its identity: functions given as parameters by name only, no bound arguments."""
    sequence, record = read_record(directory)  # type: ignore[misc]
    end = record.index(b"\n")
    header = json.loads(record[:end])
    for entry in header["nodes"]:
        entry.get("function", {}).pop("bound", None)
        params = entry.get("params", {})
        params.pop("kwargs", None)
        for name, value in params.items():
            if isinstance(value, dict):
                params[name] = value["name"]
    write_file(directory, sequence, json.dumps(header).encode() + b"\n" + record[end + 1:],
               False, None)


def test_a_checkpoint_of_the_release_before_resumes_the_unchanged_graph(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("1\n2\n3\n")

    def run(key: Any) -> list[Any]:
        source = Stream.from_textfile(a)
        out = source.map(int).scan(partial(weighted, factor=10), start=0, key=key).sink_to_list()
        Checkpointer(source, tmp_path / "ckpt", every=1, fsync=False)
        source.start()
        return out

    run(lambda x: x % 2)
    _as_the_release_before_wrote_it(tmp_path / "ckpt")
    with a.open("a") as f:
        f.write("5\n")
    assert run(lambda x: x % 2) == [(1, 90)]
    _as_the_release_before_wrote_it(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=r"key .*<lambda> then, builtins.abs now"):
        run(abs)  # what it did record (the name) is still compared


# -- writers.json: the writer names of a start without a checkpoint ---------------


def _writer_of(path: Path, ckpt: Path, func: Any = add, restore: bool = True) -> str:
    """The writer name a Checkpointer gives a sink_to_redis (nothing is written)."""
    source = Stream.from_textfile(path)
    sink = source.map(int).scan(func, start=0).map(str).sink_to_redis(
        "out", url="redis://127.0.0.1:1/0")
    Checkpointer(source, ckpt, every=1, fsync=False, restore=restore).detach()
    return sink.writer  # type: ignore[attr-defined, no-any-return]


def test_writer_names_are_reused_by_the_same_graph_over_the_same_input_only(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, b, ckpt = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "ckpt"
    a.write_text("1\n")
    b.write_text("1\n")
    first = _writer_of(a, ckpt)
    # A crash before the first checkpoint: the same graph restarts under the same
    # name, so the server skips what that run wrote.
    assert _writer_of(a, ckpt) == first
    with caplog.at_level(logging.WARNING, logger="streams"):
        changed = _writer_of(a, ckpt, mul)  # the old run's writes are not this one's
    assert changed != first
    assert re.search(r"writers\.json is not reused: it was written by another pipeline.*"
                     r"accumulate\(mul\)'s function changed.*draws new writer names",
                     caplog.text)
    assert _writer_of(a, ckpt, mul) == changed  # recorded for the changed graph now
    assert _writer_of(b, ckpt, mul) not in (first, changed)  # another input
    assert _writer_of(b, ckpt, mul, restore=False) not in (first, changed)


def test_writer_names_recorded_without_an_identity_are_not_reused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, ckpt = tmp_path / "a.txt", tmp_path / "ckpt"
    a.write_text("1\n")
    ckpt.mkdir()
    (ckpt / "writers.json").write_text(json.dumps(["0123abcd"]))  # the release before's form
    with caplog.at_level(logging.WARNING, logger="streams"):
        assert _writer_of(a, ckpt) != "0123abcd"
    assert "records no identity" in caplog.text
    (ckpt / "writers.json").write_text("{not json")
    assert _writer_of(a, ckpt) != "0123abcd"


# -- a slot that fails its checksum ---------------------------------------------


def _slots(directory: Path, records: int) -> Path:
    writer = Writer(directory, fsync=False, durable=-1)
    for sequence in range(records):
        writer.write_now(Job(sequence, b"record %d" % sequence, fds=[], confirms=[]))
    return directory / "checkpoint"


def _damage_record(path: Path, slot: int) -> None:
    data = bytearray(path.read_bytes())
    slot_size = json.loads(data[len(MAGIC):data.index(b"\n", len(MAGIC))])["slot_size"]
    offset = BLOCK + slot * slot_size
    length = struct.unpack_from("<8sQQ", data, offset)[2]
    data[offset + 56 + length - 1] ^= 0xFF  # the record's last byte, after its 56-byte header
    path.write_bytes(bytes(data))


def test_a_damaged_newest_slot_restores_the_older_one_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _slots(tmp_path, 3)  # checkpoints 0 and 2 in slot 0, 1 in slot 1
    with caplog.at_level(logging.WARNING, logger="streams"):
        assert read_record(tmp_path) == (2, b"record 2")
        assert not caplog.records  # two whole slots: nothing to say
        _damage_record(path, 0)
        assert read_record(tmp_path) == (1, b"record 1")
    assert len(caplog.records) == 1
    assert re.search(rf"{re.escape(str(path))}: slot 0 \(its header says checkpoint 2\) fails "
                     r"its checksum; checkpoint 1, in slot 1, is restored instead\. A write cut "
                     r"short by a crash .* nothing is lost; but if the file was damaged .* "
                     r"after checkpoint 1 .* may be lost", caplog.text)


def test_a_file_with_one_slot_written_restores_without_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _slots(tmp_path, 1)
    with caplog.at_level(logging.WARNING, logger="streams"):
        assert read_record(tmp_path) == (0, b"record 0")
    assert not caplog.records


def test_a_pipeline_restored_from_the_older_slot_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a = tmp_path / "a.txt"
    a.write_text("1\n2\n3\n4\n5\n")
    run_path(a, tmp_path / "ckpt")  # checkpoints 0 to 2: after 2 and 4 lines, and at the end
    path = tmp_path / "ckpt" / "checkpoint"
    newest = max((0, 1), key=lambda slot: _slot_sequence(path, slot))
    _damage_record(path, newest)
    with caplog.at_level(logging.WARNING, logger="streams"):
        source = Stream.from_textfile(a)
        out = source.map(int).scan(add, start=0).sink_to_list()
        checkpointer = Checkpointer(source, tmp_path / "ckpt", every=2, fsync=False)
        source.start()
    assert checkpointer.restored and out == [15]  # the fifth line again, after checkpoint 1
    assert f"{path}: slot {newest}" in caplog.text and "may be lost" in caplog.text


def _slot_sequence(path: Path, slot: int) -> int:
    data = path.read_bytes()
    slot_size = json.loads(data[len(MAGIC):data.index(b"\n", len(MAGIC))])["slot_size"]
    return int(struct.unpack_from("<8sQ", data, BLOCK + slot * slot_size)[1])
