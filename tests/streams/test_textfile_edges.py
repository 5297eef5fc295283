"""from_textfile and from_stdin at the edges: a caller's file read past a header,
an in-memory file, a file truncated while followed, byte-order marks, long lines."""

from __future__ import annotations

import asyncio
import gc
import io
import logging
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams import Checkpointer, Stream, VirtualClock
from streams.sources import textfile


def read_to_end(source: Stream[Any], on_loop: bool) -> None:
    """Run ``source`` to its end: without a loop, or awaited on one."""
    if not on_loop:
        source.start()
        return

    async def main() -> None:
        await source.start()

    asyncio.run(main())


def read_checkpointed(path: Path, ckpt: Path) -> list[str]:
    """The lines ``from_textfile(path)`` reads, checkpointed in ``ckpt`` after each one."""
    source = Stream.from_textfile(str(path))
    out = source.sink_to_list()
    Checkpointer(source, ckpt, every=1, fsync=False)
    source.start()
    return out


def follow(source: Stream[Any], clock: VirtualClock, *writes: Callable[[], Any]) -> None:
    """Follow ``source`` on a loop: a poll, then each of ``writes`` and a poll; then stop."""

    async def main() -> None:
        task = source.start()
        await clock.advance_async(1.0)
        for write in writes:
            write()
            await clock.advance_async(1.0)
        source.stop()
        await clock.advance_async(1.0)
        await task

    asyncio.run(main())


def test_a_text_file_read_past_its_header_gives_the_lines_after_it(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,name\n" + "".join(f"{i},n{i}\n" for i in range(5)))
    with path.open() as f:
        header = f.readline()  # the text file reads ahead, past the lines after it
        source = Stream.from_textfile(f)
        out = source.map(str.strip).sink_to_list()
        source.start()
        assert not f.closed
    assert header == "id,name\n"
    assert out == [f"{i},n{i}" for i in range(5)]
    assert source.offset == path.stat().st_size  # a position in the file, as checkpoints keep


def test_a_stopped_run_over_a_callers_file_leaves_it_open_and_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("header\nl0\nl1\nl2\nl3\n")
    with path.open("rb") as f:
        f.readline()
        source = Stream.from_textfile(f)
        out = source.map(str.strip).sink_to_list()
        source.filter(lambda x: x == "l1\n").sink(lambda x: source.stop())
        source.start()
        assert out == ["l0", "l1"] and not f.closed
        source.start()
    assert out == ["l0", "l1", "l2", "l3"]


def test_a_stopped_run_on_a_loop_goes_on_where_it_stopped_in_a_callers_file(
        tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("header\nl0\nl1\nl2\nl3\n")
    with path.open("rb") as f:
        f.readline()
        source = Stream.from_textfile(f, follow=False)
        out = source.map(str.strip).sink_to_list()
        source.filter(lambda x: x == "l1\n").sink(lambda x: source.stop())

        async def main() -> None:
            await source.start()
            await source.start()

        asyncio.run(main())
    assert out == ["l0", "l1", "l2", "l3"]


def test_a_checkpoint_over_a_callers_file_resumes_at_its_position(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("header\n1\n2\n")

    def run() -> list[int]:
        with path.open() as f:
            f.readline()
            source = Stream.from_textfile(f)
            totals = source.map(int).scan(lambda s, x: s + x, start=0).sink_to_list()
            Checkpointer(source, tmp_path / "ckpt", every=1, fsync=False)
            source.start()
        return totals

    assert run() == [1, 3]
    with path.open("a") as f:
        f.write("4\n")
    assert run() == [7]


@pytest.mark.parametrize("follow", [False, None])
def test_an_in_memory_text_file_is_read(follow: bool | None) -> None:
    source = Stream.from_textfile(io.StringIO("a\nbé\nc"), follow=follow)
    out = source.sink_to_list()
    read_to_end(source, on_loop=follow is False)
    assert out == ["a\n", "bé\n", "c"]
    assert source.offset == 6  # characters, where a StringIO seeks


def test_standard_input_read_past_its_header_gives_the_lines_after_it(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id\n" + "".join(f"{i}\n" for i in range(5)))
    script = ("import sys\nfrom streams import Stream\nheader = sys.stdin.readline()\n"
              "source = Stream.from_stdin(format='text')\nout = source.sink_to_list()\n"
              "source.start()\nprint(repr(header), out)\n")
    with path.open("rb") as stdin:
        done = subprocess.run([sys.executable, "-c", script], stdin=stdin, capture_output=True,
                              text=True, timeout=60, check=True)
    assert done.stdout.strip() == "'id\\n' ['0', '1', '2', '3', '4']"


def test_a_followed_file_truncated_is_read_again_from_its_start(
        tmp_path: Path, clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "app.log"
    path.write_text("old1\nold2\nold3\n")
    source = Stream.from_textfile(str(path), follow=True, poll_interval=1.0)
    out = source.map(str.strip).sink_to_list()

    def append() -> None:
        with path.open("a") as f:
            f.write("new2\nnew3\nnew4\n")

    with caplog.at_level(logging.WARNING, logger="streams"):
        # Truncated, then written again, as a rotated log.
        follow(source, clock, lambda: path.write_text("new1\n"), append)
    assert out == ["old1", "old2", "old3", "new1", "new2", "new3", "new4"]
    assert "was truncated" in caplog.text and "app.log" in caplog.text


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "loop"])
def test_a_byte_order_mark_is_taken_off_the_file_not_off_each_line(
        tmp_path: Path, sync: bool) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\n\ufeffb\nc\n", encoding="utf-8-sig")
    source = Stream.from_textfile(str(path), encoding="utf-8-sig",
                                   follow=None if sync else False)
    out = source.sink_to_list()
    read_to_end(source, on_loop=not sync)
    with path.open(encoding="utf-8-sig") as f:
        assert out == f.readlines() == ["a\n", "\ufeffb\n", "c\n"]


_TEXT = st.text(alphabet="ab;\né", max_size=300)


@settings(max_examples=60, deadline=None)
@given(text=_TEXT, delimiter=st.sampled_from([";", ";;", "ab", "\n", "é;"]),
       chunk=st.integers(1, 9), sync=st.booleans())
def test_lines_across_chunks_are_those_of_the_whole_text(
        tmp_path_factory: pytest.TempPathFactory, text: str, delimiter: str, chunk: int,
        sync: bool) -> None:
    path = tmp_path_factory.mktemp("chunks") / "in.txt"
    path.write_text(text, encoding="utf-8")
    parts = text.split(delimiter)
    expected = [p + delimiter for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(textfile, "_CHUNK", chunk)  # a line, and a delimiter, over many reads
        source = Stream.from_textfile(str(path), delimiter=delimiter, follow=False)
        out = source.sink_to_list()
        read_to_end(source, on_loop=not sync)
    assert out == expected
    assert source.offset == len(text.encode())


@pytest.mark.parametrize("then", ["replaced", "truncated", "appended"])
def test_a_checkpoint_is_refused_for_another_file_at_its_path(tmp_path: Path, then: str) -> None:
    from streams import CheckpointError

    path = tmp_path / "events.log"
    path.write_text("".join(f"day1-event{i}\n" for i in range(4)))

    def run() -> list[str]:
        return [line.strip() for line in read_checkpointed(path, tmp_path / "ckpt")]

    run()
    if then == "replaced":  # rotated: a new file, as long, at the same path
        path.rename(tmp_path / "events.log.1")
        path.write_text("".join(f"d2-e{i}\n" for i in range(8)))
    elif then == "truncated":
        path.write_text("day1-event0\n")
    else:
        with path.open("a") as f:
            f.write("day1-event4\n")
    if then == "appended":
        assert run() == ["day1-event4"]
        return
    why = "differ" if then == "replaced" else "fewer than the checkpoint's 48 bytes"
    with pytest.raises(CheckpointError, match=f"not the one the checkpoint was taken over.*{why}"):
        run()


def test_a_checkpoint_taken_before_the_bytes_before_its_offset_were_kept_restores(
        tmp_path: Path) -> None:
    from streams.snapshot import restore_graph, snapshot_graph

    path = tmp_path / "in.txt"
    path.write_text("a\nb\n")
    source = Stream.from_textfile(str(path))
    source.sink_to_list()
    source.start()
    snap = snapshot_graph(source)
    older = type(snap)(tuple({**e, "state": ["offset"]} if e["operator"] == "from_textfile"
                             else e for e in snap.nodes),
                       ({"offset": 2}, *snap.states[1:]))
    again = Stream.from_textfile(str(path))
    out = again.sink_to_list()
    restore_graph(again, older)
    again.start()
    assert out == ["b\n"]


def test_a_run_over_a_callers_text_file_stopped_and_started_again_reads_each_line_once(
        tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    lines = [f"é{i}\n" for i in range(20_000)]  # past the text file's read-ahead
    path.write_text("héader\n" + "".join(lines), encoding="utf-8")
    with path.open(encoding="utf-8") as f:
        f.readline()
        source = Stream.from_textfile(f, follow=False)
        out = source.sink_to_list()
        source.filter(lambda x: x == "é2\n").sink(lambda x: source.stop())
        source.start()
        assert out == lines[:3]
        source.start()  # the text file's own position means nothing now: this source's does
    assert out == lines


def test_a_text_file_read_by_iteration_is_refused_saying_how_to_read_a_header(
        tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id\n1\n2\n")
    with path.open() as f:
        next(f)  # after which the text file cannot tell where it stands
        source = Stream.from_textfile(f)
        source.sink_to_list()
        with pytest.raises(ValueError, match=r"read by iteration.*f\.readline\(\)"):
            source.start()


def test_a_byte_order_mark_is_taken_off_at_a_restored_start_too(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("h\n1\n", encoding="utf-8-sig")
    source = Stream.from_textfile(str(path), encoding="utf-8-sig")
    out = source.sink_to_list()
    source.restore({"offset": 0})
    source.start()
    assert out == ["h\n", "1\n"]


def test_from_stdin_offsets_are_file_positions_as_a_restore_seeks_them(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("header\n1\n2\n3\n")
    with path.open() as f:
        f.readline()
        source = Stream.from_stdin(file=f)
        first = source.sink_to_list()
        source.start()
    assert first == [1, 2, 3] and source.offset == path.stat().st_size
    with path.open() as f:  # a checkpoint taken after the element 1, restored
        f.readline()
        again = Stream.from_stdin(file=f)
        out = again.sink_to_list()
        again.restore({"offset": len("header\n1\n")})
        again.start()
    assert out == [2, 3]


def test_a_compressed_file_followed_is_not_taken_for_a_truncated_one(
        tmp_path: Path, clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    import gzip

    path = tmp_path / "in.gz"
    with gzip.open(path, "wt") as f:  # its tell() counts its data, past the file's size
        f.write("".join(f"line {i} {'x' * 50}\n" for i in range(200)))
    with gzip.open(path) as f:
        source = Stream.from_textfile(f, follow=True, poll_interval=1.0)
        out = source.sink_to_list()
        with caplog.at_level(logging.WARNING, logger="streams"):
            follow(source, clock, lambda: None, lambda: None)  # ends of file, polled again
    assert len(out) == 200 and "truncated" not in caplog.text


@pytest.mark.timeout(60)
def test_a_named_pipe_with_a_checkpoint_ends_without_opening_it_again(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "lines.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen([sys.executable, "-c", f"open({str(fifo)!r}, 'w').write('a\\nb\\n')"])
    try:
        source = Stream.from_textfile(str(fifo))
        out = source.sink_to_list()
        Checkpointer(source, tmp_path / "ckpt", every=1, fsync=False)
        source.start()  # the last checkpoint, at the end, opened the FIFO again and blocked
    finally:
        writer.wait(timeout=30)
    assert out == ["a\n", "b\n"]


def test_a_checkpoint_restored_while_its_file_is_missing_is_refused_when_it_starts(
        tmp_path: Path) -> None:
    from streams import CheckpointError

    path = tmp_path / "in.txt"
    path.write_text("a\nb\n")
    assert read_checkpointed(path, tmp_path / "ckpt") == ["a\n", "b\n"]
    path.unlink()
    again = Stream.from_textfile(str(path))
    again.sink_to_list()
    Checkpointer(again, tmp_path / "ckpt", every=1, fsync=False)  # restored: no file to look at
    path.write_text("Q\nR\nS\nT\n")  # another file, at the path
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for _ in range(2):  # and again: the checkpoint's bytes still stand
            with pytest.raises(CheckpointError,
                               match="bytes before the checkpoint's offset 4 differ"):
                again.start()
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []  # closed


def test_a_followed_file_empty_when_opened_loses_its_byte_order_mark(
        tmp_path: Path, clock: VirtualClock) -> None:
    path = tmp_path / "app.log"
    path.write_text("")
    source = Stream.from_textfile(str(path), encoding="utf-8-sig", follow=True,
                                  poll_interval=1.0)
    out = source.sink_to_list()

    def write() -> None:
        with path.open("a", encoding="utf-8-sig") as f:  # the mark comes with the first write
            f.write("first\nsecond\n")

    follow(source, clock, write)
    assert out == ["first\n", "second\n"]


def streamz_from_end(given: Callable[[], Any], append: Callable[[], Any]) -> list[str]:
    """The lines of streamz's ``from_textfile(given(), from_end=True)``, then ``append()``.

    Its first poll emits what the file holds past where the source stood.
    """
    import streamz

    async def main() -> list[str]:
        source = streamz.Stream.from_textfile(given(), from_end=True, asynchronous=True)
        out = source.sink_to_list()
        append()
        await source._run()  # one poll, no wait: the file holds lines
        source.file.close()
        return out

    return asyncio.run(main())


@pytest.mark.parametrize("on_loop", [False, True], ids=["sync", "loop"])
@pytest.mark.parametrize("kind", ["path", "file"])
def test_from_end_reads_the_lines_appended_before_start_as_streamz(
        tmp_path: Path, kind: str, on_loop: bool) -> None:
    # streamz seeks to the end when the source is built: a line appended
    # between building the graph and start() is read, not skipped.
    path = tmp_path / "app.log"

    def given() -> Any:
        path.write_text("old\n")
        return str(path) if kind == "path" else open(path)

    def append() -> None:
        with path.open("a") as f:
            f.write("new\n")

    theirs = streamz_from_end(given, append)
    source = Stream.from_textfile(given(), from_end=True, follow=False)
    out = source.sink_to_list()
    append()
    read_to_end(source, on_loop)
    if kind == "file":
        source.file.close()
    assert out == theirs == ["new\n"]


@pytest.mark.parametrize("change", ["created", "replaced", "truncated"])
def test_from_end_starts_at_the_end_at_start_where_the_file_built_over_is_not_there(
        tmp_path: Path, clock: VirtualClock, change: str) -> None:
    # No file when built (streamz raises then), another file at the path, or
    # fewer bytes than when built: the end recorded then is not this file's;
    # the source starts at the end the file has at start().
    import os

    path = tmp_path / "app.log"
    if change != "created":
        path.write_text("old1\nold2\n")
    source = Stream.from_textfile(str(path), from_end=True, poll_interval=1.0)
    out = source.sink_to_list()
    if change == "replaced":  # a rotated log: a new file, longer than the old one
        (tmp_path / "next.log").write_text("rotated1\nrotated2\nrotated3\n")
        os.replace(tmp_path / "next.log", path)
    else:
        path.write_text("x\n")

    def append() -> None:
        with path.open("a") as f:
            f.write("after\n")

    follow(source, clock, append)
    assert out == ["after\n"]
