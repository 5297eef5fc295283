"""sink, sink_to_textfile, from_iterable, from_textfile (synchronous use)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streams import NodeError, Stream


def test_sink_passes_args_and_kwargs() -> None:
    got = []
    source = Stream()
    source.sink(lambda x, a, b: got.append((x, a, b)), 1, b=2)
    source.emit(0)
    assert got == [(0, 1, 2)]


def test_sink_to_textfile_appends_and_closes(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    source = Stream()
    source.map(str).sink_to_textfile(str(path), end=";\n")
    source.emit(1)
    source.emit(2)
    source.close()
    assert path.read_text() == "old\n1;\n2;\n"


def test_a_file_uri_writes_in_the_encoding_it_names(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    source = Stream()
    source.to_uri(f"file://{path}?encoding=latin-1")
    source.emit("café")
    source.close()
    assert path.read_bytes() == b"caf\xe9\n"
    with path.open("a") as opened, pytest.raises(ValueError, match=r"encoding= is for a path"):
        Stream().sink_to_textfile(opened, encoding="utf-8")


def test_sink_to_textfile_refuses_non_strings_with_a_hint(tmp_path: Path) -> None:
    source = Stream()
    source.sink_to_textfile(tmp_path / "out.txt")
    with pytest.raises(NodeError, match=r"writes strings, got int; add .map\(str\)"):
        source.emit(1)


@pytest.mark.parametrize("mode", ["r", "rt", "ab", "wb", "", "aw", "aa", "q"])
def test_sink_to_textfile_refuses_a_mode_that_does_not_write_text(tmp_path: Path,
                                                                  mode: str) -> None:
    path = tmp_path / "exists.txt"
    path.write_text("kept\n")
    with pytest.raises(ValueError, match=r"sink_to_textfile\(\): mode must write text"):
        Stream().sink_to_textfile(path, mode=mode)
    assert path.read_text() == "kept\n"


@pytest.mark.parametrize(("mode", "expected"), [("a", "kept\nx\n"), ("at", "kept\nx\n"),
                                                ("w", "x\n"), ("w+", "x\n")])
def test_sink_to_textfile_writes_in_each_writing_mode(tmp_path: Path, mode: str,
                                                      expected: str) -> None:
    path = tmp_path / "out.txt"
    path.write_text("kept\n")
    source = Stream()
    source.sink_to_textfile(path, mode=mode)
    source.emit("x")
    source.close()
    assert path.read_text() == expected


def test_file_sinks_refuse_an_unknown_encoding_when_built(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"sink_to_textfile\(\): unknown text encoding"):
        Stream().sink_to_textfile(tmp_path / "a.txt", encoding="no-such-codec")
    with pytest.raises(ValueError, match=r"sink_to_durable_textfile\(\): unknown text encod"):
        Stream().sink_to_durable_textfile(tmp_path / "b.txt", encoding="no-such-codec")
    assert not (tmp_path / "a.txt").exists()


def test_a_file_source_refuses_an_unknown_encoding_as_the_sinks_do(tmp_path: Path) -> None:
    # It raised a bare LookupError naming neither the source nor the option,
    # and the relay command exited with status 1, not 2 as for a bad option.
    with pytest.raises(ValueError, match=r"from_textfile\(\): unknown text encoding 'nope'"):
        Stream.from_textfile(str(tmp_path / "in.txt"), encoding="nope")
    with pytest.raises(ValueError, match=r"from_textfile\(\): unknown text encoding 'hex'"):
        Stream.from_textfile(str(tmp_path / "in.txt"), encoding="hex")  # not a text codec


def test_from_iterable_emits_everything_then_closes() -> None:
    source = Stream.from_iterable(range(7))
    out = source.partition(3).sink_to_list()
    source.start()
    assert out == [(0, 1, 2), (3, 4, 5), (6,)]
    assert source.stopped


def test_from_iterable_stop_from_inside_the_graph() -> None:
    source = Stream.from_iterable(range(100))
    out = source.sink_to_list()
    source.filter(lambda x: x == 4).sink(lambda x: source.stop())
    source.start()
    assert out == [0, 1, 2, 3, 4]


def test_from_textfile_reads_lines_with_delimiter(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\nb\nlast")
    source = Stream.from_textfile(str(path))
    out = source.sink_to_list()
    source.start()
    assert out == ["a\n", "b\n", "last"]


def test_from_textfile_reads_a_file_that_starts_with_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "bom.txt"
    path.write_text("a\nb\nc", encoding="utf-8-sig")  # as Windows tools write UTF-8
    source = Stream.from_textfile(str(path), encoding="utf-8-sig")
    out = source.sink_to_list()
    source.start()
    assert out == ["a\n", "b\n", "c"]
    with pytest.raises(ValueError, match=r"encoding 'utf-16' writes each character in "
                                         r"several bytes.*convert the input to UTF-8"):
        Stream.from_textfile(str(path), encoding="utf-16")


def test_lines_are_split_only_where_the_delimiter_stands_alone(tmp_path: Path) -> None:
    # "ポ" is b"\x83|" in Shift_JIS: split at "|" it would be cut in two.
    text = "ポスト|メモ|"
    for encoding in ("shift_jis", "big5", "gbk", "iso2022_jp"):
        with pytest.raises(ValueError, match=rf"from_textfile\(\): encoding '{encoding}' may "
                                             "write the delimiter's bytes inside another"):
            Stream.from_textfile(str(tmp_path / "x"), delimiter="|", encoding=encoding)
    for encoding in ("euc_jp", "shift_jis"):
        path = tmp_path / f"{encoding}.txt"
        delimiter = "|" if encoding == "euc_jp" else "\n"
        path.write_text(text.replace("|", delimiter), encoding=encoding)
        source = Stream.from_textfile(str(path), delimiter=delimiter, encoding=encoding)
        out = source.sink_to_list()
        source.start()
        assert out == [f"ポスト{delimiter}", f"メモ{delimiter}"]
    with pytest.raises(ValueError, match=r"from_stdin\(\): encoding 'utf-16' writes each "):
        Stream.from_stdin(format="text", encoding="utf-16")


def test_from_textfile_custom_delimiter(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a;b;")
    source = Stream.from_textfile(str(path), delimiter=";")
    out = source.sink_to_list()
    source.start()
    assert out == ["a;", "b;"]


def test_tornado_coroutine_sink_on_a_synchronous_stream_without_a_loop() -> None:
    # issue 15: a @gen.coroutine sink that sleeps, in a plain script, as with streamz.
    from tornado import gen

    out: list[int] = []

    @gen.coroutine
    def slow_write(x: int) -> Any:
        yield gen.sleep(0)
        out.append(x)

    source = Stream()
    source.map(lambda x: x + 1).sink(slow_write)
    source.emit(1)
    source.emit(2)
    assert out == [2, 3]
