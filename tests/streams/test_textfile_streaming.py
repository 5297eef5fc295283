"""from_textfile reads files incrementally, closes them, and follows only when asked."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import warnings
from pathlib import Path

import pytest

from streams import Stream, VirtualClock


def count_lines(source: Stream[str]) -> list[int]:
    n = [0]

    def count(_: str) -> None:
        n[0] += 1

    source.sink(count)
    return n


def test_memory_stays_bounded_on_a_large_file(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    line = "x" * 99 + "\n"
    path.write_text(line * 80_000)  # 8 MB
    source = Stream.from_textfile(str(path))
    n = count_lines(source)
    tracemalloc.start()
    try:
        source.start()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n[0] == 80_000
    assert source.offset == 8_000_000
    assert peak < 1_000_000, f"{peak} bytes held while reading an 8 MB file"


@pytest.mark.parametrize("delimiter", [";", "--"])
def test_custom_delimiters_across_read_chunks(tmp_path: Path, delimiter: str) -> None:
    path = tmp_path / "in.txt"
    words = [f"w{i}" * (i % 7 + 1) for i in range(30_000)]  # several 64 KiB chunks
    path.write_text(delimiter.join(words))
    source = Stream.from_textfile(str(path), delimiter=delimiter)
    out = source.sink_to_list()
    source.start()
    assert out == [w + delimiter for w in words[:-1]] + [words[-1]]


def test_a_synchronous_run_closes_its_file(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\nb\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        source = Stream.from_textfile(str(path))
        out = source.sink_to_list()
        source.start()
        del source
        gc.collect()
    assert out == ["a\n", "b\n"]
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_stopped_synchronous_run_closes_its_file_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\nb\nc\n")
    source = Stream.from_textfile(str(path))
    out = source.sink_to_list()
    source.filter(lambda x: x == "b\n").sink(lambda x: source.stop())
    source.start()
    assert out == ["a\n", "b\n"]
    assert source._fp is None
    source.start()
    assert out == ["a\n", "b\n", "c\n"]


def test_a_file_object_given_is_read_and_left_open(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\nb")
    with path.open() as f:
        source = Stream.from_textfile(f)
        out = source.sink_to_list()
        source.start()
        assert not f.closed
    assert out == ["a\n", "b"]


def test_follow_false_on_a_loop_reads_once_and_flushes(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("".join(f"{i}\n" for i in range(2000)) + "last")
    source = Stream.from_textfile(str(path), follow=False)
    parts = source.partition(300).sink_to_list()

    async def main() -> None:
        await source.start()  # returns: the file is read and the stream closed

    asyncio.run(main())
    assert [len(p) for p in parts] == [300] * 6 + [201]
    assert parts[-1][-1] == "last"
    assert source._fp is None


def test_follow_true_needs_a_loop(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\n")
    source = Stream.from_textfile(str(path), follow=True)
    with pytest.raises(RuntimeError, match=r"from_textfile.*follow=True.*follow=False"):
        source.start()


def test_following_closes_the_file_when_stopped(tmp_path: Path, clock: VirtualClock) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\n")
    source = Stream.from_textfile(str(path), follow=True, poll_interval=1.0)
    out = source.sink_to_list()

    async def main() -> None:
        task = source.start()
        await clock.advance_async(1.0)
        assert source._fp is not None
        source.stop()
        await clock.advance_async(1.0)
        await task

    asyncio.run(main())
    assert out == ["a\n"]
    assert source._fp is None


@pytest.mark.parametrize("bad", [123, None, 1.5])
def test_bad_file_argument_is_refused_when_built(bad: object) -> None:
    with pytest.raises(TypeError, match=r"from_textfile\(\): f must be a path"):
        Stream.from_textfile(bad)
    with pytest.raises(TypeError, match="follow must be"):
        Stream.from_textfile("x.txt", follow="yes")  # type: ignore[arg-type]
