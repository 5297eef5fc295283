"""Spark segments without keyed state: one Spark job per micro-batch."""

from __future__ import annotations

import os
from typing import Any

import pytest

from streams import NodeError, Stream

pytestmark = pytest.mark.spark


def run_local(build: Any, xs: list[Any]) -> list[Any]:
    source = Stream()
    out = build(source).sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return list(out)


def run_spark(build: Any, xs: list[Any], **kwargs: Any) -> list[Any]:
    source = Stream()
    out = build(source.to_spark(**kwargs)).gather().sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return list(out)


def test_chain_matches_in_process(spark: Any) -> None:
    def build(s: Stream) -> Stream:
        return (s.map(lambda x: (x % 3, x)).filter(lambda kv: kv[1] != 4)
                .starmap(lambda k, v: [k] * k + [v]).flatten().remove(lambda x: x == 2))

    xs = list(range(12))
    assert run_spark(build, xs, batch_size=5) == run_local(build, xs)


def test_state_carries_across_batches_and_flushes_at_close(spark: Any) -> None:
    def build(s: Stream) -> Stream:
        return s.scan(lambda a, b: a + b, start=100).partition(3)

    xs = list(range(10))
    assert run_spark(build, xs, batch_size=4) == run_local(build, xs)


def test_unique_sliding_window_frequencies(spark: Any) -> None:
    def build(s: Stream) -> Stream:
        return s.unique(maxsize=3).sliding_window(2, return_partial=False)

    xs = [1, 2, 1, 3, 4, 1, 5]
    assert run_spark(build, xs, batch_size=3) == run_local(build, xs)
    assert run_spark(lambda s: s.frequencies(), list("abca"), batch_size=2) == \
        run_local(lambda s: s.frequencies(), list("abca"))


def test_pickled_and_typed_elements(spark: Any) -> None:
    xs: list[Any] = [{"a": 1}, ("x", 1.5), None, 3, "s", (1, (2, 3))]
    assert run_spark(lambda s: s.map(lambda x: x), xs, batch_size=2) == xs
    assert run_spark(lambda s: s.map(lambda x: x), [(1, "a", 2.0, True)] * 3) == \
        [(1, "a", 2.0, True)] * 3


def test_error_raises_node_error_naming_node_and_element(spark: Any) -> None:
    source = Stream()
    source.to_spark().map(lambda x: 1 // x, stream_name="inverse").gather().sink_to_list()
    source.emit(1)
    source.emit(0)
    with pytest.raises(NodeError, match=r"inverse.*element 0.*ZeroDivisionError"):
        source.close()


def test_error_policies_route_and_skip(spark: Any) -> None:
    source = Stream()
    node = source.to_spark(batch_size=10).map(lambda x: 1 // x).on_error("route")
    errors = node.errors.sink_to_list()
    good = node.filter(lambda x: x > 0).on_error("skip").gather().sink_to_list()
    for x in [1, 0, -1, 1]:
        source.emit(x)
    source.close()
    assert good == [1, 1]
    assert [e.element for e in errors] == [0]


def test_unpicklable_return_value_fails_at_first_batch_naming_node(spark: Any) -> None:
    source = Stream()
    source.to_spark().map(lambda x: (lambda: x), stream_name="closure").gather()
    source.emit(1)
    with pytest.raises(NodeError, match=r"closure.*Spark cannot carry"):
        source.close()


def test_checkpoint_resumes_state(spark: Any, tmp_path: Any) -> None:
    ckpt = str(tmp_path / "ckpt")

    def pipeline() -> tuple[Stream, list[Any]]:
        source = Stream()
        out = (source.to_spark(batch_size=2, checkpoint=ckpt)
               .scan(lambda a, b: a + b, start=0).gather().sink_to_list())
        return source, out

    source, out = pipeline()
    for x in [1, 2, 3, 4]:
        source.emit(x)
    assert out == [1, 3, 6, 10]
    assert os.listdir(ckpt) == ["state-000000000001.pickle"]  # the newest two kept
    source, out = pipeline()  # a restarted process, same checkpoint
    for x in [5, 6]:
        source.emit(x)
    source.close()
    assert out == [15, 21]


def test_micro_batch_closes_on_size_and_on_interval(spark: Any, clock: Any) -> None:
    source = Stream()
    out = source.to_spark(batch_size=3, interval=1.0).map(str).gather().sink_to_list()
    source.emit(1)
    source.emit(2)
    assert out == []  # held in the open micro-batch
    source.emit(3)
    assert out == ["1", "2", "3"]  # closed on size
    source.emit(4)
    clock.advance(1.0)
    source.emit(5)  # the interval has passed: checked when an element arrives
    assert out == ["1", "2", "3", "4", "5"]
    source.close()


def test_await_emit_runs_the_micro_batch_off_the_loop(spark: Any) -> None:
    import asyncio

    async def main() -> tuple[list[Any], int]:
        source: Stream[Any] = Stream(asynchronous=True)
        out = source.to_spark(batch_size=4).map(lambda x: x * 10).gather().sink_to_list()
        turns = 0
        stop = False

        async def spin() -> None:
            nonlocal turns
            while not stop:
                turns += 1
                await asyncio.sleep(0)

        spinner = asyncio.ensure_future(spin())
        await asyncio.sleep(0)
        before = turns
        for i in range(4):
            await source.emit(i)  # the fourth closes a micro-batch: a Spark job
        # While the job ran, the loop served the spinner; a job run on the
        # loop would have let it take no turn at all.
        during = turns - before
        await source.emit(4)
        await source.aclose()
        stop = True
        await spinner
        return out, during

    out, during = asyncio.run(main())
    assert out == [0, 10, 20, 30, 40]
    assert during > 10


def test_an_unpicklable_element_is_named_not_a_bare_pickling_error(spark: Any) -> None:
    import threading

    source: Stream[Any] = Stream()
    out = source.to_spark(session=spark).map(str).gather().sink_to_list()
    source.emit(1)
    source.emit(threading.Lock())
    with pytest.raises(TypeError) as info:
        source.close()
    text = str(info.value)
    assert text.startswith("to_spark(): element <unlocked _thread.lock object")
    assert "cannot be pickled to send to Spark executors" in text
    assert "the 2 element(s) of its batch were not sent" in text
    assert out == []


@pytest.mark.parametrize("which", ["map", "gather"])
def test_a_node_of_a_running_spark_segment_is_not_destroyed(spark: Any, which: str) -> None:
    # Its plan was made at the first batch: cut here, the node would go on
    # running in Spark.
    source: Stream[int] = Stream()
    mapped = source.to_spark(batch_size=2).map(abs)
    back = mapped.gather()
    out = back.sink_to_list()
    source.emit(-1)
    source.emit(-2)  # a batch: the segment runs
    with pytest.raises(RuntimeError, match=rf"destroy\(\): {which}.* Spark segment"):
        {"map": mapped, "gather": back}[which].destroy()
    source.emit(-3)
    source.close()
    assert out == [1, 2, 3]
