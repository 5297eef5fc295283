"""Checked by mypy in tests/test_quality.py, never run: the public API's types.

A line ending in ``# type: ignore[...]`` is an error mypy must find: with
``warn_unused_ignores`` an ignore that silences nothing fails the check.
"""

from __future__ import annotations

from operator import add

from streams import Stream


def typed_pipeline() -> list[str]:
    source: Stream[int] = Stream()
    doubled: Stream[int] = source.map(lambda x: x * 2)
    texts: Stream[str] = doubled.map(str)
    kept: Stream[str] = texts.filter(None)
    totals = source.scan(add, start=0)
    totals.sink(print)
    wrong: Stream[int] = texts  # type: ignore[assignment]
    source.emit("not checked at run time")  # type: ignore[arg-type]
    del wrong
    return kept.sink_to_list()


def typed_joins() -> None:
    views: Stream[int] = Stream()
    clicks: Stream[str] = Stream()
    pairs: Stream[tuple[int, str]] = views.join(clicks, key=0, within="2s", time=1)
    looked_up: Stream[tuple[int, object]] = views.lookup(clicks, key=0, default=None)
    wrong: Stream[tuple[str, str]] = pairs  # type: ignore[assignment]
    views.join(clicks, key=0, within=[1], time=1)  # type: ignore[arg-type]
    del wrong, looked_up


def typed_sources() -> None:
    lines: Stream[object] = Stream.from_uri("file:///tmp/data.txt")
    lines.to_uri("stdio://?format=text")
    batches = Stream.from_kafka_batched("events", {"bootstrap.servers": "h:9092"},
                                        npartitions=2)
    batches.to_uri(42)  # type: ignore[arg-type]
    Stream.from_uri("file:///tmp/data.txt", "text")  # type: ignore[call-arg]


def typed_source_attributes() -> None:
    """A source is its own class: its documented attributes type-check."""
    kafka = Stream.from_kafka(["events"], {"bootstrap.servers": "h:9092"})
    offsets: dict[tuple[str, int], int] = kafka.offsets
    written: int = kafka.map(len).to_kafka("out", {"bootstrap.servers": "h:9092"}).written
    process = Stream.from_process(["ls"])
    code: int | None = process.returncode
    # ...and keeps what it emits: lines of text, bytes of a process.
    lines: Stream[str] = Stream.from_textfile("data.txt")
    numbers: Stream[int] = Stream.from_iterable([1, 2, 3])
    chunks: Stream[str] = process  # type: ignore[assignment]
    not_text: Stream[int] = Stream.from_textfile("data.txt")  # type: ignore[assignment]
    redis = Stream.from_redis("events")
    last: str | bytes | None = redis.offset
    kafka.no_such_attribute  # type: ignore[attr-defined]
    del offsets, written, code, lines, numbers, chunks, not_text, last
