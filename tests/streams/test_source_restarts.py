"""A source started again after an element failed reads that element again.

Contract 9: a source counts an element (moves its offset, acknowledges its
entry, marks its file seen) once the work for it is done. An element whose
work failed, synchronously, in a coroutine step, or synchronously beside a
coroutine branch whose work was still pending, is not done: the next
``start()`` goes on from it, so the failing branch loses nothing.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams import NodeError, Stream, VirtualClock, use_clock

VALUES = ["0", "1", "2", "3", "4"]

#: How the element "2" fails, the first time only.
FAILURES = ("synchronously", "in a coroutine", "beside a coroutine branch")


async def _later(out: list[Any], x: Any) -> None:
    await asyncio.sleep(0)
    out.append(x)


def _graph(node: Stream[Any], failure: str) -> tuple[list[Any], list[Any]]:
    """What the failing branch and a coroutine branch saw, as ``node`` goes on."""
    seen: list[Any] = []
    other: list[Any] = []
    failed: list[bool] = []

    def fails(x: Any) -> bool:
        if x == "2" and not failed:
            failed.append(True)
            return True
        return False

    def once(x: Any) -> None:
        if fails(x):
            raise ValueError("once")
        seen.append(x)

    async def once_later(x: Any) -> None:
        await asyncio.sleep(0)
        once(x)

    if failure == "beside a coroutine branch":
        node.sink(lambda x: _later(other, x))
    node.sink(once_later if failure == "in a coroutine" else once)
    return seen, other


def _check(seen: list[Any], other: list[Any], failure: str) -> None:
    assert seen == VALUES  # nothing lost: "2" again after the restart
    if failure == "beside a coroutine branch":
        # The coroutine branch had run for "2": it sees it again (at least once).
        assert other == ["0", "1", "2", "2", "3", "4"]


def _run_twice(start: Callable[[], Any], on_loop: bool) -> None:
    async def twice() -> None:
        with pytest.raises(NodeError, match="once"):
            await start()
        await start()

    if on_loop:
        asyncio.run(twice())
    else:
        with pytest.raises(NodeError, match="once"):
            start()
        start()


def _lines(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("".join(f"{v}\n" for v in VALUES))
    return path


@pytest.mark.parametrize("on_loop", [False, True], ids=["sync", "on a loop"])
@pytest.mark.parametrize("failure", FAILURES)
def test_from_iterable(failure: str, on_loop: bool) -> None:
    source = Stream.from_iterable(VALUES)
    seen, other = _graph(source, failure)
    _run_twice(source.start, on_loop)
    _check(seen, other, failure)


@pytest.mark.parametrize("on_loop", [False, True], ids=["sync", "on a loop"])
@pytest.mark.parametrize("failure", FAILURES)
def test_from_textfile(tmp_path: Path, failure: str, on_loop: bool) -> None:
    source = Stream.from_textfile(str(_lines(tmp_path)), follow=False)
    seen, other = _graph(source.map(str.strip), failure)
    _run_twice(source.start, on_loop)
    _check(seen, other, failure)


@pytest.mark.parametrize("on_loop", [False, True], ids=["sync", "on a loop"])
@pytest.mark.parametrize("failure", FAILURES)
def test_from_stdin_over_a_seekable_file(failure: str, on_loop: bool) -> None:
    data = "".join(json.dumps(v) + "\n" for v in VALUES).encode()
    source = Stream.from_stdin(file=io.BytesIO(data))
    seen, other = _graph(source, failure)
    _run_twice(source.start, on_loop)
    _check(seen, other, failure)


@pytest.mark.redis
@pytest.mark.parametrize("group", [None, "g"])
@pytest.mark.parametrize("on_loop", [False, True], ids=["sync", "on a loop"])
@pytest.mark.parametrize("failure", FAILURES)
def test_from_redis(r: Any, redis_url: str, failure: str, on_loop: bool,
                    group: str | None) -> None:
    for v in VALUES:
        r.xadd("in", {"n": v})
    options = {"group": group, "consumer": "c"} if group else {}
    source = Stream.from_redis("in", url=redis_url, count=10, block=0.05,
                               asynchronous=on_loop, **options)
    values = source.map(lambda f: f["n"])
    seen, other = _graph(values, failure)
    # On a loop the source follows the stream: the last value stops it.
    values.sink(lambda x: source.stop() if x == VALUES[-1] else None)
    _run_twice(source.start, on_loop)
    _check(seen, other, failure)
    if group:
        assert r.xpending("in", group)["pending"] == 0


@pytest.mark.parametrize("failure", FAILURES)
def test_filenames(tmp_path: Path, failure: str) -> None:
    for v in VALUES:
        (tmp_path / v).touch()
    clock = VirtualClock()
    with use_clock(clock):
        source = Stream.filenames(str(tmp_path), poll_interval=1.0)
    seen, other = _graph(source.map(lambda p: Path(p).name), failure)

    async def main() -> None:
        with pytest.raises(NodeError, match="once"):
            await source.start()
        source.start()
        await clock.advance_async(0)
        source.stop()

    asyncio.run(main())
    _check(seen, other, failure)
