"""stdin and stdout: JSON lines through real Unix pipes between real processes."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from streams import NodeError, Stream

PRODUCER = """
from streams import Stream
source = Stream.from_iterable([{"n": i, "word": w} for i, w in enumerate(["a", "bé", "c"])])
source.sink_to_stdout()
source.start()
"""

DOUBLER = """
from streams import Stream
source = Stream.from_stdin()
source.map(lambda d: {**d, "n": d["n"] * 2}).sink_to_stdout()
source.start()
"""

ASYNC_UPPER = """
import asyncio
from streams import Stream

async def main():
    source = Stream.from_stdin(format="text", asynchronous=True)
    source.map(str.upper).sink_to_stdout(format="text", flush=True)
    await source.start()

asyncio.run(main())
"""


def run_python(code: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], input=stdin,
                          capture_output=True, timeout=60, check=True)


def test_pipelines_compose_with_a_unix_pipe() -> None:
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER], stdout=subprocess.PIPE)
    consumer = subprocess.Popen([sys.executable, "-c", DOUBLER], stdin=producer.stdout,
                                stdout=subprocess.PIPE)
    assert producer.stdout is not None
    producer.stdout.close()  # the consumer holds the only read end now
    out, _ = consumer.communicate(timeout=60)
    assert producer.wait(timeout=60) == 0 and consumer.returncode == 0
    assert [json.loads(line) for line in out.splitlines()] == [
        {"n": 0, "word": "a"}, {"n": 2, "word": "bé"}, {"n": 4, "word": "c"}]


def test_async_reading_of_a_pipe_on_the_loop() -> None:
    result = run_python(ASYNC_UPPER, stdin="one\ntwö\nthree".encode())
    assert result.stdout.decode().splitlines() == ["ONE", "TWÖ", "THREE"]


def test_async_reading_of_a_redirected_file(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("x\ny\n")
    with open(path, "rb") as f:
        result = subprocess.run([sys.executable, "-c", ASYNC_UPPER], stdin=f,
                                capture_output=True, timeout=60, check=True)
    assert result.stdout.decode().splitlines() == ["X", "Y"]


def test_a_bad_json_line_names_the_node_and_shows_the_line() -> None:
    source = Stream.from_stdin(file=io.BytesIO(b'1\n{oops\n3\n'))
    out = source.sink_to_list()
    with pytest.raises(NodeError, match=r"from_stdin.*\{oops"):
        source.start()
    assert out == [1]


def test_bad_lines_can_be_routed() -> None:
    source = Stream.from_stdin(file=io.BytesIO(b'1\n{oops\n3\n'))
    source.on_error("route")
    out, bad = source.sink_to_list(), source.errors.sink_to_list()
    source.start()
    assert out == [1, 3]
    assert [r.element for r in bad] == ["{oops\n"]


def test_text_format_and_text_file_objects() -> None:
    source = Stream.from_stdin(format="text", file=io.TextIOWrapper(io.BytesIO(b"a\r\nb\nc")))
    buf = io.StringIO()
    source.map(len).sink_to_stdout(format="text", file=buf)
    source.start()
    assert buf.getvalue() == "1\n1\n1\n"


def test_resume_from_a_checkpoint_over_a_seekable_input(tmp_path: Path) -> None:
    from streams import Checkpointer

    data = b"".join(json.dumps(i).encode() + b"\n" for i in range(6))

    def run(f: io.BytesIO) -> list[int]:
        source = Stream.from_stdin(file=f)
        out = source.scan(lambda s, x: s + x, start=0).sink_to_list()
        Checkpointer(source, tmp_path, every=1, fsync=False)
        source.start()
        return out

    assert run(io.BytesIO(data[:8])) == [0, 1, 3, 6]
    assert run(io.BytesIO(data)) == [10, 15]


def test_a_checkpoint_over_another_file_redirected_is_refused(tmp_path: Path) -> None:
    # `python job.py < a.txt`, then the same checkpoint with `< b.txt`: the
    # offset into a would cut b's bytes anywhere.
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent("""
        import sys
        from streams import Checkpointer, Stream
        source = Stream.from_stdin(format="text")
        source.sink_to_stdout(format="text")
        Checkpointer(source, sys.argv[1], every=1, fsync=False)
        source.start()
    """))
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("alice\nbob\n")
    b.write_text("users-alice\nusers-bob\nusers-carol\n")

    def run(redirected: Path) -> subprocess.CompletedProcess[str]:
        with redirected.open("rb") as f:
            return subprocess.run([sys.executable, str(job), str(tmp_path / "ckpt")], stdin=f,
                                  capture_output=True, text=True, timeout=60)

    assert run(a).stdout == "alice\nbob\n"
    with a.open("a") as f:
        f.write("carol\n")
    assert run(a).stdout == "carol\n"  # the same file, grown: resumed
    refused = run(b)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "not the one the checkpoint was taken over" in refused.stderr


def test_a_checkpoint_at_the_start_of_a_file_then_resumes_it_grown(tmp_path: Path) -> None:
    # The first run's checkpoint holds no bytes before its offset 0: the
    # second run's must hold its own, or a third run's resume is refused.
    from streams import Checkpointer

    path = tmp_path / "in.txt"

    def run() -> list[str]:
        with path.open("rb") as f:
            source = Stream.from_stdin(file=f, format="text")
            out = source.sink_to_list()
            Checkpointer(source, tmp_path / "ckpt", every=1, fsync=False)
            source.start()
        return out

    path.write_bytes(b"")
    assert run() == []
    path.write_bytes(b"1\n2\n")
    assert run() == ["1", "2"]
    with path.open("ab") as f:
        f.write(b"3\n")
    assert run() == ["3"]


def test_a_pipe_cannot_be_resumed(tmp_path: Path) -> None:
    source = Stream.from_stdin(file=io.BytesIO(b"1\n"))
    source.offset = 2

    class Pipe(io.BytesIO):
        def seekable(self) -> bool:
            return False

    source.file = Pipe(b"1\n")
    with pytest.raises(RuntimeError, match="a pipe, which cannot be replayed"):
        source.start()


def test_bad_formats() -> None:
    with pytest.raises(ValueError, match="format must be one of"):
        Stream.from_stdin(format="csv")
    with pytest.raises(ValueError, match="format must be one of"):
        Stream().sink_to_stdout(format="csv")


def test_async_source_with_a_regular_file_object() -> None:
    async def main() -> list[str]:
        source = Stream.from_stdin(format="text", file=io.BytesIO(b"p\nq\n"),
                                   asynchronous=True)
        out = source.sink_to_list()
        await source.start()
        return out

    assert asyncio.run(main()) == ["p", "q"]


@pytest.mark.parametrize("on_loop", [False, True], ids=["sync", "on a loop"])
def test_stop_and_start_again_on_a_pipe_goes_on_where_it_stopped(on_loop: bool) -> None:
    # A pipe cannot be replayed: the lines read are kept, and the caller's
    # file is not closed by stop().
    import os

    read, write = os.pipe()
    os.write(write, b"".join(b"%d\n" % i for i in range(6)))
    os.close(write)
    with os.fdopen(read, "rb", buffering=0) as f:
        source = Stream.from_stdin(file=f)
        out: list[int] = []

        def take(x: int) -> None:
            out.append(x)
            if x == 1:
                source.stop()

        source.sink(take)

        async def twice() -> None:
            await source.start()
            await source.start()

        if on_loop:
            asyncio.run(twice())
        else:
            source.start()
            source.start()
    assert out == [0, 1, 2, 3, 4, 5]


@pytest.mark.timeout(60)
def test_stop_on_a_silent_pipe_ends_the_run_at_once_and_loses_nothing() -> None:
    # Its writer sends nothing more: the run waits for a line; stop() ends
    # that wait (it waited for the next line, forever if none came). What
    # comes meanwhile, and the partial line held, is read by the next start.
    import os

    read, write = os.pipe()

    async def main() -> tuple[list[str], list[str]]:
        with os.fdopen(read, "rb", buffering=0) as f:
            source = Stream.from_stdin(format="text", file=f)
            out: list[str] = []
            got = asyncio.Event()
            source.sink(lambda x: (out.append(x), got.set()))
            run = source.start()
            os.write(write, b"a\nb")
            await got.wait()  # "a" emitted; "b" waits for its newline
            await source.stop()  # returns with the pipe silent
            assert run.done() and not run.cancelled() and not source._closed
            before = list(out)
            os.write(write, b"c\nd\n")
            os.close(write)
            await source.start()  # to the pipe's end
            return before, out

    before, out = asyncio.run(asyncio.wait_for(main(), 30))
    assert before == ["a"]
    assert out == ["a", "bc", "d"]


@pytest.mark.parametrize(("fmt", "expected"), [("text", ['"é"', '"b"']), ("json", ["é", "b"])])
def test_a_text_file_object_without_a_binary_buffer(fmt: str, expected: list[str]) -> None:
    source = Stream.from_stdin(format=fmt, file=io.StringIO('"é"\n"b"\n'))
    out = source.sink_to_list()
    source.start()
    assert out == expected
    assert source.offset == 8  # characters: the positions io.StringIO seeks to


def test_a_bad_line_of_a_text_file_object_names_the_node_and_shows_the_line() -> None:
    source = Stream.from_stdin(file=io.StringIO('1\n{oops\n3\n'))
    out = source.sink_to_list()
    with pytest.raises(NodeError, match=r"from_stdin.*\{oops"):
        source.start()
    assert out == [1]


def test_resume_from_a_checkpoint_over_a_text_file_object(tmp_path: Path) -> None:
    from streams import Checkpointer

    data = "".join(json.dumps(w, ensure_ascii=False) + "\n" for w in ["é", "ü", "a", "ß", "b"])

    def run(f: io.StringIO) -> list[str]:
        source = Stream.from_stdin(file=f)
        out = source.scan(lambda s, x: s + x, start="").sink_to_list()
        Checkpointer(source, tmp_path, every=1, fsync=False)
        source.start()
        return out

    assert run(io.StringIO(data[:8])) == ["é", "éü"]
    assert run(io.StringIO(data)) == ["éüa", "éüaß", "éüaßb"]


def test_an_unknown_encoding_is_refused_when_the_source_is_built() -> None:
    with pytest.raises(ValueError, match=r"from_stdin\(\): unknown text encoding 'no-such-codec'"):
        Stream.from_stdin(format="text", encoding="no-such-codec")
