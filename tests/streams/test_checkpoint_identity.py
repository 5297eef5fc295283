"""A checkpoint is refused where it would be applied to something else.

Another input file (its offsets mean nothing there), a stateful node whose
function changed (its state was built by the old one), a graph with no
source that ``every=`` or ``interval=`` could ever count.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streams import Checkpointer, CheckpointError, Stream


def add(s: int, x: int) -> int:
    return s + x


def mul(s: int, x: int) -> int:
    return s * x + 1


def run_file(path: Path, ckpt: Path, func=add) -> list[int]:  # type: ignore[no-untyped-def]
    source = Stream.from_textfile(str(path))
    out = source.map(int).scan(func, start=0).sink_to_list()
    Checkpointer(source, ckpt, every=2, fsync=False)
    source.start()
    return out


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


@pytest.mark.parametrize("port", [-1, 65536, 70000, 99999, "abc", 80.0, True])
def test_ports_out_of_range_are_refused(port: object) -> None:
    with pytest.raises(ValueError, match=r"from_tcp\(\): port must be an int from 0 to 65535"):
        Stream.from_tcp(port)
    with pytest.raises(ValueError, match=r"from_http_server\(\): port must be"):
        Stream.from_http_server(port)
