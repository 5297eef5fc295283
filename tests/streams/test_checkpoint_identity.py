"""A checkpoint is refused where it would be applied to something else.

Another input file (its offsets mean nothing there), a stateful node whose
function changed (its state was built by the old one), a graph with no
source that ``every=`` or ``interval=`` could ever count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streams import Checkpointer, CheckpointError, Stream


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
