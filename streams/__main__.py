"""The demo: ``python -m streams [FILE ...]`` (also installed as ``streams-demo``).

A real pipeline over real data: the lines of text files (by default this
package's own source) become words, counted in windows of 500 words, and
the running top five is printed after each window.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

from streams import Stream

WORD = re.compile(r"[A-Za-z_]{4,}")


def build(top: int = 5, window: int = 500) -> tuple[Stream[str], list[list[tuple[str, int]]]]:
    """The demo pipeline: lines in, one top-``top`` list per window out."""
    lines: Stream[str] = Stream(stream_name="lines")
    counts = (
        lines.map(str.lower)
        .map(WORD.findall)
        .flatten()
        .partition(window, stream_name="window")
        .map(collections.Counter)
        .scan(lambda total, c: total + c, start=collections.Counter(), stream_name="totals")
    )
    tops = counts.map(lambda c: c.most_common(top)).sink_to_list()
    return lines, tops


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m streams", description=__doc__)
    ap.add_argument("files", nargs="*", type=Path,
                    help="text files to read (default: this package's source files)")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--window", type=int, default=500)
    args = ap.parse_args(argv)
    files = args.files or sorted(Path(__file__).parent.rglob("*.py"))
    lines, tops = build(args.top, args.window)
    n_lines = 0
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as fp:
            for line in fp:
                lines.emit(line)
                n_lines += 1
    lines.close()  # end of stream: the last, partial window is counted too
    for i, top in enumerate(tops, 1):
        print(f"after window {i:3}: " + ", ".join(f"{w}={n}" for w, n in top))
    print(f"{n_lines} lines from {len(files)} files, {len(tops)} windows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
