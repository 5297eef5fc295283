"""The pipeline the exactly-once test kills: run as ``python exactly_once_child.py ...``.

source (a text file by byte offset, or a Redis stream through a consumer
group) -> parse -> keyed scan (a running count and sum per word) -> format ->
sink_to_durable_textfile (or, with ``--sink redis``, sink_to_redis into the
stream named by ``--output``), checkpointed every ``every`` elements (or,
with ``--every 0``, not checkpointed: the Redis source then acknowledges
entries as their output is written). It reports
progress on stdout ("<elements done>" lines) so the parent can kill it at a
chosen count; with ``--stepped`` it waits at each of them for the parent's
word (see ``tests.kills.SteppedChild``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def parse_line(line: str) -> tuple[str, int]:
    word, n = line.split()
    return word, int(n)


def parse_fields(fields: dict[str, str]) -> tuple[str, int]:
    return fields["word"], int(fields["n"])


def main(argv: list[str]) -> None:
    from streams import Checkpointer, Stream
    from tests.kills import count_and_sum, report_progress, start_and_finish

    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["textfile", "redis"])
    p.add_argument("--input", help="text file path, or Redis stream key")
    p.add_argument("--url")
    p.add_argument("--output")
    p.add_argument("--checkpoint")
    p.add_argument("--every", type=int, default=7)
    p.add_argument("--sink", choices=["file", "redis"], default="file")
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--ids", action="store_true", help="write each entry's id, not the totals")
    p.add_argument("--count", type=int, default=50, help="Redis entries read a round trip")
    p.add_argument("--stepped", action="store_true",
                   help="wait for a line on stdin after each progress line")
    args = p.parse_args(argv)

    source: Any
    if args.kind == "textfile":
        source = Stream.from_textfile(args.input)
        parsed = source.map(parse_line)
    else:
        source = Stream.from_redis(args.input, group="g", consumer="c", url=args.url,
                                   count=args.count, with_id=args.ids)
        parsed = source.map(lambda x: (x[0], 0)) if args.ids else source.map(parse_fields)
    totals = parsed.scan(count_and_sum, start=(0, 0), key=0)
    if args.ids:
        lines = parsed.pluck(0)
        totals = parsed
    else:
        lines = totals.map(lambda kv: f"{kv[0]} {kv[1][0]} {kv[1][1]}")
    if args.sink == "file":
        lines.sink_to_durable_textfile(args.output, fsync=False)
    else:
        lines.sink_to_redis(args.output, url=args.url, batch=args.batch)
    report_progress(totals, stepped=args.stepped)
    if args.every:
        Checkpointer(source, args.checkpoint, every=args.every, fsync=False)
    start_and_finish(source)


if __name__ == "__main__":
    main(sys.argv[1:])
