"""``python -m streams`` (also installed as ``streams-demo``): the demos.

With no argument, a live stream of generated page views runs for a few
seconds through windows and a keyed scan, printing a line each second under
a progress bar. See ``python -m streams --help`` for the other demos.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import importlib.util
import os
import sys
from typing import Any

from streams import NodeError, Stream

# Subcommands of the command-line tools (streams.cli), when installed.
CLI_COMMANDS = ("relay", "tap", "clock")

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def _positive(kind: type) -> Any:
    """An argparse type: a number of ``kind`` above 0, else a one-line usage error."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:
            whole = "whole " if kind is int else ""
            raise argparse.ArgumentTypeError(f"{text!r} is not a {whole}number above 0")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _redis_url(text: str) -> str:
    """An argparse type: a Redis URL, refused in one line before anything connects."""
    if not text.startswith(_REDIS_SCHEMES):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Redis URL: write redis://host:6379/0 (or rediss://, unix://)")
    return text


def _parser() -> argparse.ArgumentParser:
    kafka = " | Kafka: Stream.from_kafka is installed" if hasattr(Stream, "from_kafka") else ""
    ap = argparse.ArgumentParser(
        prog="python -m streams",
        description="Demos of the streams library. With no demo named, 'events' runs.",
        epilog=("examples: python -m streams dask | python -m streams spark (a JVM starts: "
                "~30 s) | python -m streams redis redis://localhost:6379/0 | "
                "python -m streams words FILE... [--follow]" + kafka
                + ("; command-line tools: python -m streams {" + ",".join(CLI_COMMANDS) + "}"
                   if _has_cli() else "")))
    demos = ap.add_subparsers(dest="demo", metavar="{events,dask,spark,redis,words}")
    for name, text in [("events", "live page views through windows and a keyed scan"),
                       ("dask", "the same, enrichment on a local Dask cluster"),
                       ("spark", "the same, enrichment in Spark")]:
        p = demos.add_parser(name, help=text)
        p.add_argument("--seconds", type=_positive(float), default=4.0,
                       help="how long events come")
        p.add_argument("--rate", type=_positive(float), default=2000.0,
                       help="events per second")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p = demos.add_parser("redis", help="events through a Redis stream")
    p.add_argument("url", type=_redis_url, help="the server, e.g. redis://localhost:6379/0")
    p.add_argument("--seconds", type=_positive(float), default=4.0)
    p.add_argument("--rate", type=_positive(float), default=2000.0)
    p = demos.add_parser("words", help="word counts over text files")
    p.add_argument("files", nargs="+", help="text files")
    p.add_argument("--follow", action="store_true", help="keep reading appended lines")
    p.add_argument("--window", type=_positive(int), default=500, help="words per window")
    p.add_argument("--top", type=_positive(int), default=5)
    return ap


def _has_cli() -> bool:
    return importlib.util.find_spec("streams.cli") is not None


def _segment(demo: str) -> Any:
    from .demo import enrich

    if demo == "dask":
        # Batches of up to 1,000 views, many in flight: results come back as tasks finish.
        return lambda s: s.scatter(batch_size=1000).map(enrich).gather()
    if demo == "spark":
        # Micro-batches of 1,000 views: results come back while the stream runs.
        return lambda s: s.to_spark(batch_size=1000).map(enrich).gather()
    return None


def main(argv: list[str] | None = None) -> int:
    """Run a demo; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in CLI_COMMANDS and _has_cli():
        from streams import cli  # type: ignore[attr-defined,unused-ignore]

        return int(cli.main(argv) or 0)
    demos_named = ("events", "dask", "spark", "redis", "words")
    implicit = bool(argv) and argv[0] not in demos_named
    if argv and not argv[0].startswith("-") and argv[0] not in demos_named:
        argv = ["words", *argv]  # `python -m streams FILE...`, as before
    elif argv and argv[0] not in ("-h", "--help") and argv[0] not in demos_named:
        argv = ["events", *argv]  # options of the default demo
    ap = _parser()
    args = ap.parse_args(argv)
    demo = args.demo or "events"
    from . import demo as demos

    if demo == "words":
        missing = [f for f in args.files if not os.path.isfile(f)]
        if missing:
            close = difflib.get_close_matches(missing[0], demos_named, n=1) if implicit else []
            named = f" (the demo {close[0]!r}?)" if close else ""
            print(f"python -m streams: no such file: {', '.join(missing)}{named}",
                  file=sys.stderr)
            return 2
        try:
            asyncio.run(demos.run_words(args.files, args.follow, args.window, args.top))
        except KeyboardInterrupt:  # how --follow ends; a read once was cut short
            return 0 if args.follow else 130
        return 0
    if demo == "redis":
        try:
            asyncio.run(demos.run_redis(args.url, args.seconds, args.rate))
        except Exception as e:
            # The server refused or went away: redis-py's errors, as the source raises them.
            if not isinstance(e, OSError | NodeError) and not type(e).__module__.startswith(
                    "redis"):
                raise
            print(f"python -m streams: redis demo: {args.url}: {e}", file=sys.stderr)
            return 1
        return 0
    seconds = getattr(args, "seconds", 4.0)
    rate = getattr(args, "rate", 2000.0)
    progress = not getattr(args, "no_progress", False)
    try:
        segment = _segment(demo)
    except ImportError as e:
        print(f"python -m streams: the {demo} demo needs {e.name}: "
              f"pip install 'streams[{demo}]'", file=sys.stderr)
        return 2
    asyncio.run(demos.run_events(seconds, rate, segment=segment, progress=progress))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
