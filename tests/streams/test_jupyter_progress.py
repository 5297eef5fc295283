"""progress(): counts, totals, rates on the virtual clock, end of stream, fusion."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from streams import Checkpointer, Stream, VirtualClock
from streams.jupyter import Progress, progress_bar


def test_counts_every_element_and_passes_it_through() -> None:
    source = Stream()
    counted = source.progress(file=io.StringIO())
    L = counted.map(str).sink_to_list()
    for i in range(1000):
        source.emit(i)
    assert isinstance(counted, Progress)
    assert counted.bar.n == 1000 and [str(i) for i in range(1000)] == L


def test_total_comes_from_a_sized_iterable_source() -> None:
    out = io.StringIO()
    source = Stream.from_iterable(range(50))
    counted = source.progress(file=out)
    assert counted.total == counted.bar.total == 50
    source.start()
    assert counted.bar.n == 50
    assert "50/50" in out.getvalue()


def test_total_is_unknown_for_a_generator_and_can_be_given() -> None:
    unknown = Stream.from_iterable(x for x in range(3)).progress(file=io.StringIO())
    assert unknown.total is None and unknown.bar.total is None
    given = Stream.from_iterable(x for x in range(3)).progress(total=3, file=io.StringIO())
    assert given.bar.total == 3


def test_rate_is_measured_on_the_stream_clock(clock: VirtualClock) -> None:
    source = Stream()
    counted = source.progress(unit="row", smoothing=0, file=io.StringIO())
    for i in range(10):
        clock.advance(0.5)
        source.emit(i)
    assert counted.bar.format_dict["elapsed"] == 5.0
    assert "2.00row/s" in str(counted.bar)


def test_the_bar_closes_at_the_end_of_the_stream() -> None:
    out = io.StringIO()
    source = Stream()
    counted = source.progress(total=2, desc="rows", file=out)
    source.emit("a")
    source.emit("b")
    source.close()
    assert counted.bar.disable  # tqdm marks a closed bar disabled
    assert out.getvalue().rstrip().splitlines()[-1].startswith("rows: 100%")


def test_progress_is_fused_into_the_compiled_chain() -> None:
    from streams.fusion import Fuser, is_fusable

    source = Stream()
    counted = source.progress(file=io.StringIO())
    assert is_fusable(counted)
    f = Fuser()
    f.push_function(source, frozenset())
    assert "tick" in f.source()


def test_description_and_bad_arguments() -> None:
    source = Stream(stream_name="orders")
    counted = source.progress(total=10, file=io.StringIO())
    spec = counted.describe()
    assert spec.operator == "progress"
    assert dict(spec.params) == {"total": 10, "desc": "orders", "unit": "it"}
    with pytest.raises(ValueError, match="total"):
        source.progress(total=-1)


def test_progress_bar_for_engines_reports_batches() -> None:
    clock = VirtualClock()
    bar = progress_bar(total=4, unit="batch", clock=clock, smoothing=0, file=io.StringIO())
    for _ in range(4):
        clock.advance(2.0)
        bar.update(1)
    assert bar.n == 4 and "2.00s/batch" in str(bar)  # tqdm inverts rates below 1/s


def test_a_cell_end_shows_the_count_tqdm_has_not_drawn_yet() -> None:
    from streams.jupyter import flush_all

    out = io.StringIO()
    source = Stream()
    source.progress(file=out, mininterval=3600, desc="clicks").sink_to_list()
    for i in range(1000):
        source.emit(i)
    assert "clicks: 1000" not in out.getvalue()  # tqdm waits for mininterval
    flush_all()  # what IPython runs when a cell ends
    assert "clicks: 1000" in out.getvalue()


def test_a_destroyed_progress_node_closes_its_bar() -> None:
    source = Stream()
    counted = source.progress(file=io.StringIO())
    counted.destroy()
    assert counted.bar.disable  # closed: a later bar is not drawn a line below it


def test_progress_passes_metadata_on() -> None:
    from streams import RefCounter

    source = Stream()
    source.progress(file=io.StringIO()).partition(2).sink_to_list()
    ref = RefCounter()
    source.emit(1, metadata=[{"ref": ref}])
    assert ref.count == 1  # held by the partition


def _checkpointed(path: Path, ckpt: Path, **kwargs: Any) -> tuple[Progress, list[int]]:
    source = Stream.from_textfile(path)
    counted = source.progress(file=io.StringIO(), smoothing=0, **kwargs)
    totals = counted.map(int).scan(lambda s, x: s + x, start=0).sink_to_list()
    Checkpointer(source, ckpt, every=1, fsync=False)
    source.start()
    return counted, totals


def test_a_restored_pipeline_counts_on_from_its_checkpoint(tmp_path: Path) -> None:
    data = tmp_path / "in.txt"
    data.write_text("1\n2\n3\n")
    first, _ = _checkpointed(data, tmp_path / "ckpt")
    with data.open("a") as f:
        f.write("4\n5\n")
    # The label and total are shown, not kept: changing them keeps the checkpoint.
    again, totals = _checkpointed(data, tmp_path / "ckpt", desc="lines", total=5)
    assert first.count == 3
    assert totals == [10, 15] and again.count == again.bar.n == 5
    assert "5/5" in str(again.bar)


def test_a_disabled_bar_still_counts_and_a_restore_counts_on(tmp_path: Path) -> None:
    # tqdm(disable=True) counts nothing itself: the count, the node's state, is kept apart.
    data = tmp_path / "in.txt"
    data.write_text("1\n2\n3\n")
    first, _ = _checkpointed(data, tmp_path / "ckpt", disable=True)
    assert first.count == 3
    with data.open("a") as f:
        f.write("4\n")
    again, totals = _checkpointed(data, tmp_path / "ckpt", disable=True)
    assert totals == [10] and again.count == 4


def test_the_rate_after_a_restore_counts_only_this_run(clock: VirtualClock) -> None:
    source = Stream()
    counted = source.progress(unit="row", smoothing=0, file=io.StringIO())
    counted.restore({"count": 1000})
    for i in range(10):
        clock.advance(0.5)
        source.emit(i)
    assert counted.count == 1010
    assert "2.00row/s" in str(counted.bar)


def test_a_checkpoint_taken_without_the_count_restores_the_bar_from_zero(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "in.txt"
    data.write_text("1\n2\n3\n")
    with monkeypatch.context() as m:  # a checkpoint as the code before the count kept it
        m.setattr(Progress, "_state", ())
        _checkpointed(data, tmp_path / "ckpt")
    with data.open("a") as f:
        f.write("4\n")
    again, totals = _checkpointed(data, tmp_path / "ckpt")
    assert totals == [10] and again.count == 1
