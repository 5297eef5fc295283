"""Unix-style tools over stream URIs: ``streams relay``, ``streams tap``, ``streams clock``.

Installed as the ``streams`` console script (and run by ``python -m streams``)::

    streams relay --input redis://localhost:6379/events --output kafka://localhost:9092/events
    streams relay --input stdio:// --output kafka://localhost:9092/lines --map mymod:clean
    streams tap kafka://localhost:9092/events --offset earliest
    streams clock kafka://localhost:9092/ticks --interval 1s --count 10

Elements travel as text lines: Kafka values are decoded (UTF-8), Redis
entries become JSON objects (an entry with the single field ``data`` becomes
its value), file lines lose their newline, an MQTT message becomes its
payload. A ``stdio://?format=json`` output takes JSON documents: a JSON
input's as they are (``--map`` gets those), each line of another input as
the document it holds, or what ``--map`` makes of the line. Without
``--follow`` a relay or tap reads what its source holds and
exits; with it, it follows the source until interrupted (SIGINT or SIGTERM;
exit status 0). A source that never ends (a server: ``tcp://``, ``http://``,
``ws://``; an ``mqtt://`` subscription) needs ``--follow``; a server then
says on standard error which port it listens on. A bad URI or option is
reported in one line, with exit status 2; a file or connection that fails,
or an element that does (bad data), in one line with status 1; with
``--traceback``, its traceback comes first (a ``--map`` function's line that
failed, or a bug's).

See :mod:`streams.uri` for the URI schemes and their options.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import importlib
import json
import os
import re
import signal
import sys
import time
import traceback
import urllib.parse
from collections.abc import Callable
from typing import Any

from .core import Stream
from .errors import NodeError
from .uri import from_uri, parse_uri, to_uri

__all__ = ["main", "parse_interval", "text_of"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}

#: Sources that never end on their own: servers, and a broker subscription.
_ENDLESS = ("tcp", "http", "ws", "mqtt")


def parse_interval(text: str) -> float:
    """Seconds in ``text`` (``"1s"``, ``"250ms"``, ``"2m"``, ``"0.5"``).

    Examples
    --------
    >>> parse_interval("1s"), parse_interval("250ms"), parse_interval("2m"), parse_interval("0.5")
    (1.0, 0.25, 120.0, 0.5)
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|)\s*", text)
    if m is None or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive interval (write 1s, 250ms, 2m or a number of seconds)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _positive_int(text: str) -> int:
    """``text`` as an int >= 1 (a count), or argparse's one-line error."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return n


def text_of(x: Any) -> str:
    """An element as one line of text; a message with a ``payload`` (MQTT's) is its payload.

    Examples
    --------
    >>> text_of(b"abc\\n"), text_of("line\\n"), text_of({"data": "v"}), text_of({"a": 1})
    ('abc', 'line', 'v', '{"a": 1}')
    >>> from types import SimpleNamespace
    >>> text_of(SimpleNamespace(topic="t", payload=b"21.5"))
    '21.5'
    """
    if isinstance(x, bytes):  # a line of a process, a TCP message: without its newline
        x = x.decode("utf-8", errors="replace")
    if isinstance(x, str):
        return x.rstrip("\r\n")
    if hasattr(x, "payload"):
        return text_of(x.payload)
    if isinstance(x, dict) and len(x) == 1 and "data" in x:
        return text_of(x["data"])
    return json.dumps(x, default=lambda v: v.decode() if isinstance(v, bytes) else str(v))


def _load(spec: str) -> Callable[[Any], Any]:
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"--map {spec!r}: write module:function, e.g. mypackage.clean:line")
    if "" not in sys.path and os.getcwd() not in sys.path:
        # A module of the current directory, as ``python -m streams`` finds it
        # (the installed ``streams`` script's path starts at its own directory);
        # last, so that it shadows no installed module.
        sys.path.append(os.getcwd())
    try:
        func = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--map {spec!r}: {e}") from None
    if not callable(func):
        raise ValueError(f"--map {spec!r}: {name} is not callable")
    return func  # type: ignore[no-any-return]


def _source_options(uri: str, offset: str | None, since: str | None = None) -> dict[str, Any]:
    """Default options for a source made by the tools (text stdin; where to start)."""
    _, scheme = parse_uri(uri, "source")
    opts: dict[str, Any] = {}
    if scheme == "stdio" and "format=" not in uri:
        opts["format"] = "text"
    if since is not None:
        at = _position(since)
        if not isinstance(at, float):
            raise ValueError(f"--since {since!r}: not an ISO 8601 time (2026-01-01T12:00:00)")
        offset = since
    if offset is not None:
        if scheme == "kafka":
            opts["offset"] = _position(offset)
        elif scheme == "redis":
            opts["start"] = _redis_start(offset)
        else:
            raise ValueError(f"--offset/--since: a {scheme}:// source has no offsets")
    return opts


def _position(text: str) -> Any:
    """An offset, a name (``earliest``...), or a time (ISO 8601) as seconds since the epoch."""
    if text.isdigit():
        return int(text)
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        return text
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return when.timestamp()


#: A Redis entry id: milliseconds, and a sequence number.
_ENTRY_ID = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def _redis_start(text: str) -> Any:
    """``from_redis``'s ``start`` (after which it reads) for ``--offset`` / ``--since``.

    An entry id is the first one shown (``from_redis`` reads after its
    ``start``); an id without its sequence number is its first, ``-0``;
    ``$`` is Redis' own word for ``latest``.

    >>> _redis_start("earliest"), _redis_start("latest"), _redis_start("1001")
    ('0', '$', '1000-18446744073709551615')
    >>> _redis_start("1700000000000-3"), _redis_start("1970-01-01T00:00:02+00:00")
    ('1700000000000-2', 2.0)
    """
    if text in ("earliest", "latest", "$"):
        return "0" if text == "earliest" else "$"
    entry = _ENTRY_ID.fullmatch(text)
    if entry:
        ms, seq = int(entry.group(1)), int(entry.group(2) or 0)
        if seq:
            return f"{ms}-{seq - 1}"
        return "0" if ms == 0 else f"{ms - 1}-{2**64 - 1}"
    at = _position(text)
    if not isinstance(at, float):
        raise ValueError(f"--offset {text!r}: a redis:// source starts at earliest, latest, "
                         "an entry id (1700000000000-0) or an ISO 8601 time")
    return at


def _sink_options(uri: str) -> dict[str, Any]:
    _, scheme = parse_uri(uri, "sink")
    return {"format": "text"} if scheme == "stdio" and "format=" not in uri else {}


def _check_ends(uri: str, follow: bool) -> None:
    """Refuse a source that never ends without ``--follow`` (it would serve nobody)."""
    _, scheme = parse_uri(uri, "source")
    if scheme in _ENDLESS and not follow:
        what = "a subscription" if scheme == "mqtt" else "a server"
        raise ValueError(f"a {scheme}:// source is {what} and never ends: add --follow to "
                         "run it until interrupted (Ctrl-C)")


def _run(source: Stream[Any], follow: bool, command: str) -> None:
    """Run ``source`` to its end, or (``follow``) on a loop until SIGINT/SIGTERM."""
    if not follow:
        source.start()
        return

    async def forever() -> None:
        loop = asyncio.get_running_loop()
        interrupted = asyncio.Event()
        run: Any = None

        def interrupt() -> None:
            interrupted.set()
            if run is not None:
                source.stop()  # the run ends after its element in progress

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupt)
        run = source.start()
        if run is None:  # a server: start() has bound its port; it serves until interrupted
            print(f"streams {command}: listening on port {getattr(source, 'port', None)} "
                  "until interrupted", file=sys.stderr, flush=True)
            await interrupted.wait()
            stop: Callable[[], Any] = source.stop  # a server's: an awaitable on a loop
            end = stop()
            if end is not None:
                await end  # the elements in flight are through
        else:
            await run
        await source.aclose()

    asyncio.run(forever())


def _json(uri: str, role: str) -> bool:
    """Whether ``uri`` is ``stdio://?format=json``: its elements are JSON documents."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query)
    return parse_uri(uri, role)[1] == "stdio" and query.get("format") == ["json"]


def _relay(args: argparse.Namespace) -> None:
    _check_ends(args.input, args.follow)
    source = from_uri(args.input, **_source_options(args.input, args.offset))
    node: Stream[Any] = source
    if not _json(args.input, "source") or not _json(args.output, "sink"):
        node = source.map(text_of)
    if args.map:
        node = node.map(_load(args.map))
    elif node is not source and _json(args.output, "sink"):
        # Each line holds a JSON document (a Kafka value, a Redis entry as
        # text_of writes it): the sink writes that, not a JSON string of it.
        node = node.map(json.loads)
    to_uri(node, args.output, **_sink_options(args.output))
    _run(source, args.follow, "relay")


def _tap(args: argparse.Namespace) -> None:
    offset = args.offset
    _check_ends(args.uri, args.follow)
    _, scheme = parse_uri(args.uri, "source")
    if offset is None and args.since is None and scheme == "kafka":
        offset = "earliest"
    source = from_uri(args.uri, **_source_options(args.uri, offset, args.since))
    # Followed, each line is shown as it comes (as tail -f); else block-buffered (faster).
    source.map(text_of).sink_to_stdout(format="text", flush=args.follow)
    _run(source, args.follow, "tap")


def _clock(args: argparse.Namespace) -> None:
    from .clock import get_clock

    source: Stream[Any] = Stream(asynchronous=True)
    to_uri(source.map(json.dumps), args.uri, **_sink_options(args.uri))

    async def tick() -> None:
        clock = get_clock()
        i = 0
        try:
            while args.count is None or i < args.count:
                await source.emit({"tick": i, "time": time.time()})
                i += 1
                if args.count is None or i < args.count:
                    await clock.sleep(args.interval)
        finally:
            await source.aclose()

    try:
        asyncio.run(tick())
    except KeyboardInterrupt:
        pass


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="streams", description="Move and watch streams named by URI (kafka://, "
        "redis://, stdio://, file://, tcp://, http://).",
        epilog="URIs and their options: see the streams.uri module.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="{relay,tap,clock}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true",
                        help="on a failure, print its traceback too (where it failed: a --map "
                             "function's line, or a bug's)")
    relay = sub.add_parser("relay", help="copy a stream to another, optionally mapped",
                           parents=[common],
                           description="Copy every element of --input to --output.")
    relay.add_argument("--input", required=True, metavar="URI", help="the source")
    relay.add_argument("--output", required=True, metavar="URI", help="the sink")
    relay.add_argument("--map", metavar="MODULE:FUNCTION",
                       help="apply this function to each element (a line of text)")
    relay.add_argument("--offset", metavar="WHERE",
                       help="where to start: earliest, latest, an offset or id, or an ISO time")
    relay.add_argument("--follow", action="store_true",
                       help="keep following the source until interrupted")
    relay.set_defaults(run=_relay)
    tap = sub.add_parser("tap", help="print a stream to stdout, one element a line",
                         parents=[common],
                         description="Print the elements of a stream, one a line.")
    tap.add_argument("uri", metavar="URI")
    tap.add_argument("--offset", metavar="WHERE",
                     help="where to start: earliest (Kafka's default), latest, an offset "
                          "(Kafka) or entry id (Redis), the first shown")
    tap.add_argument("--since", metavar="TIME",
                     help="start at the first element at or after this ISO 8601 time")
    tap.add_argument("--follow", action="store_true", help="keep printing new elements")
    tap.set_defaults(run=_tap)
    clock = sub.add_parser("clock", help="write a tick every interval",
                           parents=[common],
                           description='Write {"tick": n, "time": seconds} every interval.')
    clock.add_argument("uri", metavar="URI")
    clock.add_argument("--interval", type=parse_interval, default=1.0,
                       help="time between ticks (1s, 250ms, 2m; default 1s)")
    clock.add_argument("--count", type=_positive_int, default=None,
                       help="stop after this many ticks (default: until interrupted)")
    clock.set_defaults(run=_clock)
    return ap


def _failure(e: Exception) -> tuple[int, str, bool]:
    """The exit status, the line that says what failed, and whether its traceback may help."""
    if isinstance(e, NodeError):  # an element, or the source, failed while running (its node named)
        return 1, str(e), True  # a --map function's line
    if isinstance(e, ValueError):  # a bad URI or option
        return 2, str(e), False
    if isinstance(e, RuntimeError | OSError):  # a file, a connection, a broker: in its own words
        return 1, str(e), False
    # A client library's own failure (redis-py's ConnectionError) says what
    # failed; one of Python's types raised from here is more likely a bug.
    return 1, f"{type(e).__name__}: {e}", type(e).__module__.partition(".")[0] in (
        "builtins", "streams")


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        args.run(args)
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if args.traceback:
            traceback.print_exc()
        status, message, where = _failure(e)
        hint = " (--traceback shows where)" if where and not args.traceback else ""
        print(f"streams {args.command}: error: {message}{hint}", file=sys.stderr)
        return status
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
