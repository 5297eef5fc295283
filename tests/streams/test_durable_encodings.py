"""sink_to_durable_textfile writes an encoding's byte-order mark once, at the start of the file.

Encoding each line alone wrote a mark before every line (``utf-16``: the
file read back as ``'a\\n\\ufeffb\\n...'``). A file written on from a restored
length (a second sink, a restart from a checkpoint) gets no mark either.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streams import Checkpointer, NodeError, Stream

MARKED = ["utf-16", "utf-8-sig", "utf-32"]


def write(path: Path, encoding: str, lines: list[str]) -> Stream[str]:
    """A source whose sink wrote ``lines`` to ``path`` (still open); the sink is its downstream."""
    source: Stream[str] = Stream()
    source.sink_to_durable_textfile(path, encoding=encoding, fsync=False)
    for line in lines:
        source.emit(line)
    return source


@pytest.mark.parametrize("encoding", MARKED)
def test_lines_read_back_with_the_encoding_are_exactly_those_written(
        tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "out.txt"
    write(path, encoding, ["a", "b", "é"]).close()
    assert path.read_text(encoding=encoding) == "a\nb\né\n"


@pytest.mark.parametrize("encoding", MARKED)
def test_a_second_sink_writing_on_from_the_first_ones_length_adds_no_mark(
        tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "out.txt"
    first = write(path, encoding, ["a", "b"])
    saved = first.downstreams[0].snapshot()
    first.close()
    source: Stream[str] = Stream()
    sink = source.sink_to_durable_textfile(path, encoding=encoding, fsync=False)
    sink.restore(saved)  # what a restart does: the file goes on at that length
    source.emit("c")
    source.close()
    assert path.read_text(encoding=encoding) == "a\nb\nc\n"
    # Rolled back to nothing, the file starts again with its mark.
    source = Stream()
    sink = source.sink_to_durable_textfile(path, encoding=encoding, fsync=False)
    sink.restore({"length": 0})
    source.emit("z")
    source.close()
    assert path.read_text(encoding=encoding) == "z\n"


@pytest.mark.parametrize("encoding", MARKED)
def test_a_pipeline_restarted_from_a_checkpoint_writes_on_without_a_mark(
        tmp_path: Path, encoding: str) -> None:
    out, ckpt = tmp_path / "out.txt", tmp_path / "ckpt"

    def run(items: list[str]) -> bool:
        source = Stream.from_iterable(items)
        source.sink_to_durable_textfile(out, encoding=encoding, fsync=False)
        checkpoints = Checkpointer(source, ckpt, every=1, fsync=False)
        source.start()
        checkpoints.wait()
        return checkpoints.restored

    assert not run(["a", "b"])
    assert run(["a", "b", "c", "d"])  # resumes after "b"
    assert out.read_text(encoding=encoding) == "a\nb\nc\nd\n"


def test_a_first_line_that_fails_to_encode_leaves_the_mark_to_the_next(tmp_path: Path) -> None:
    # utf-8-sig's encoder counts its mark written as soon as it is asked to
    # encode, even when that fails.
    path = tmp_path / "out.txt"
    source: Stream[str] = Stream()
    source.sink_to_durable_textfile(path, encoding="utf-8-sig", fsync=False)
    with pytest.raises(NodeError, match="surrogates not allowed"):
        source.emit("\udc80")
    source.emit("a")
    source.close()
    assert path.read_bytes() == b"\xef\xbb\xbfa\n"
