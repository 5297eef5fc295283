"""A source that fails tells the user: start() raises, or its awaitables do."""

from __future__ import annotations

import asyncio
import logging
import traceback
from pathlib import Path
from typing import Any

import pytest

from streams import NodeError, Stream
from streams.errors import SourceError


def test_a_source_failing_on_a_loop_unawaited_is_logged_and_raised_by_its_awaitables(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = Stream.from_textfile(str(tmp_path / "missing.txt"), follow=False)
    source.sink_to_list()

    async def main() -> None:
        task = source.start()  # not awaited: its failure could go unseen
        await asyncio.wait([task])
        assert any("from_textfile" in r.getMessage() and "FileNotFoundError" in r.getMessage()
                   for r in caplog.records)
        with pytest.raises(FileNotFoundError):
            await task
        with pytest.raises(FileNotFoundError):
            await source.stop()
        with pytest.raises(FileNotFoundError):
            await source.aclose()

    with caplog.at_level(logging.ERROR, logger="streams"):
        asyncio.run(main())


def test_an_awaited_source_failing_is_raised_once_not_logged_too(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = Stream.from_textfile(str(tmp_path / "missing.txt"), follow=False)
    source.sink_to_list()

    async def main() -> None:
        with pytest.raises(FileNotFoundError):
            await source.start()

    with caplog.at_level(logging.ERROR, logger="streams"):
        asyncio.run(main())
    assert not [r.getMessage() for r in caplog.records if r.name == "streams"]


def test_a_source_failure_goes_through_the_route_policy(tmp_path: Path) -> None:
    source = Stream.from_textfile(str(tmp_path / "missing.txt"), follow=False)
    source.on_error("route")
    failures = source.errors.sink_to_list()

    async def main() -> None:
        await source.start()  # routed: the run itself ends without raising

    asyncio.run(main())
    assert [type(r.exception) for r in failures] == [FileNotFoundError]
    assert failures[0].node is source


def test_errors_of_a_synchronous_start_do_not_chain_to_the_loop_lookup() -> None:
    source = Stream.from_iterable([1, 0])
    source.map(lambda x: 1 / x).sink_to_list()
    with pytest.raises(NodeError) as info:
        source.start()
    text = "".join(traceback.format_exception(info.value))
    assert "ZeroDivisionError" in text
    assert "no running event loop" not in text
    assert "During handling" not in text


# -- a synchronous Redis client given to a source on a loop ------------------------

redis = pytest.importorskip("redis")


@pytest.mark.redis
def test_a_sync_redis_client_on_a_loop_is_turned_into_an_async_one(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    for i in range(5):
        client.xadd("events", {"n": i})
    source = Stream.from_redis("events", group="g", consumer="c", client=client, block=0.05)
    out: list[Any] = []

    def collect(fields: dict[str, str]) -> None:
        out.append(int(fields["n"]))
        if len(out) == 5:
            source.stop()

    source.sink(collect)

    async def main() -> None:
        await source.start()

    asyncio.run(main())
    assert out == [0, 1, 2, 3, 4]
    assert client.xpending("events", "g")["pending"] == 0  # acknowledged
    client.close()


@pytest.mark.redis
def test_a_client_that_cannot_be_used_is_refused_by_start(redis_url: str) -> None:
    import redis.asyncio as aredis

    source = Stream.from_redis("events", client=aredis.Redis.from_url(redis_url))
    with pytest.raises(TypeError, match=r"from_redis.*redis.asyncio client.*runs without a loop"):
        source.start()
    sentinel_like = redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=redis.connection.SSLConnection, host="127.0.0.1"))
    source = Stream.from_redis("events", client=sentinel_like)

    async def main() -> None:
        with pytest.raises(TypeError, match=r"from_redis.*cannot turn.*SSLConnection"):
            source.start()  # raised by start() itself, not in a background task

    asyncio.run(main())


@pytest.mark.redis
@pytest.mark.parametrize("bad", [[1, 2], None])
def test_sink_to_redis_names_a_field_it_cannot_store(redis_url: str, bad: Any) -> None:
    source = Stream()
    source.sink_to_redis("out", url=redis_url)
    source.emit({"ok": 1, "tags": bad})
    with pytest.raises(NodeError, match=r"DataError: field 'tags' holds .*convert it") as info:
        source.close()
    assert isinstance(info.value.error, redis.exceptions.DataError)  # the type is kept


def test_stop_from_inside_the_graph_and_from_outside(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("".join(f"{i}\n" for i in range(100)))
    source = Stream.from_textfile(str(path), follow=True)
    out = source.map(int).sink_to_list()
    source.map(int).filter(lambda i: i == 4).sink(lambda _: source.stop())

    async def main() -> None:
        await source.start()  # the sink's stop() ends the run after element 4
        assert out == [0, 1, 2, 3, 4]
        source.start()
        await source.stop()  # from outside: waits for the run to end
        assert source._fp is None

    asyncio.run(main())
    assert source.stop() is not None and source._task is not None and source._task.done()


def test_stop_of_a_process_source_is_awaitable_like_any_source() -> None:
    async def main() -> None:
        source = Stream.from_process(["sleep", "60"])
        source.sink(print)
        source.start()
        await asyncio.sleep(0)
        end = source.stop()
        assert end is not None  # the end of the run, as Source.stop() gives
        await end

    asyncio.run(main())


def test_a_missing_file_at_start_names_the_source_and_keeps_its_type(tmp_path: Path) -> None:
    # Longer than a shortened repr's 80 characters: the path is named whole.
    path = str(tmp_path / ("a-directory-that-is-not-there-" * 3) / "missing.txt")
    source = Stream.from_textfile(path)
    source.sink_to_list()
    with pytest.raises(FileNotFoundError) as info:
        source.start()
    assert isinstance(info.value, SourceError) and info.value.node is source
    assert str(info.value).startswith(f"from_textfile({path!r}) failed: FileNotFoundError")
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_a_long_path_given_as_a_path_is_named_whole(tmp_path: Path) -> None:
    path = tmp_path / ("a-directory-that-is-not-there-" * 3) / "missing.txt"
    source = Stream.from_textfile(path)
    source.sink_to_list()
    with pytest.raises(FileNotFoundError, match=r"^from_textfile\(") as info:
        source.start()
    assert str(info.value).startswith(f"from_textfile({path!r}) failed")


def test_a_missing_program_names_the_source(tmp_path: Path) -> None:
    program = str(tmp_path / "no-such-program")
    source = Stream.from_process([program])
    source.sink_to_list()
    with pytest.raises(FileNotFoundError, match=r"^from_process\(.*no-such-program.*\) failed"):
        source.start()


def test_a_source_failure_on_a_loop_is_logged_once_naming_the_source(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = Stream.from_textfile(str(tmp_path / "missing.txt"))
    source.sink_to_list()

    async def main() -> BaseException | None:
        task = source.start()  # not awaited: logged
        await asyncio.wait([task])
        return task.exception()

    with caplog.at_level(logging.ERROR, logger="streams"):
        error = asyncio.run(main())
    assert isinstance(error, SourceError)
    messages = [r.getMessage() for r in caplog.records if r.name == "streams"]
    assert messages == [str(error)]
    assert messages[0].count("failed") == 1


def test_a_node_failure_is_not_renamed_as_the_sources(tmp_path: Path) -> None:
    path = tmp_path / "numbers.txt"
    path.write_text("1\n0\n")
    source = Stream.from_textfile(str(path))
    source.map(lambda line: 1 / int(line)).sink_to_list()
    with pytest.raises(ZeroDivisionError) as info:
        source.start()
    assert isinstance(info.value, NodeError) and not isinstance(info.value, SourceError)
    assert info.value.element == "0\n"


def test_aclose_after_a_failed_run_flushes_what_the_graph_holds_then_raises() -> None:
    # A service shutting down with `await source.aclose()` kept a partial
    # partition forever: aclose() raised the run's failure before closing.
    def items() -> Any:
        yield from range(5)
        raise OSError("disk gone")

    source = Stream.from_iterable(items())
    held = source.partition(3).sink_to_list()

    async def main() -> None:
        task = source.start()  # not awaited: a service starts it and goes on
        await asyncio.wait([task])
        for _ in range(2):  # raised at every aclose(), as by the run's task
            with pytest.raises(OSError, match="disk gone"):
                await source.aclose()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(logging.getLogger("streams"), "disabled", True)  # logged: nobody awaits
        asyncio.run(main())
    assert held == [(0, 1, 2), (3, 4)] and source._closed
