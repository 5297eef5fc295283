"""from_textfile and from_stdin on a loop let its other tasks run while a graph takes lines.

A synchronous graph takes each line without awaiting anything: the
sources yield to the loop every ``YIELD_EVERY`` lines, as
``from_iterable`` does, or a large file held every other task (a
heartbeat, a server) until it was read. Asserted by order: what another
task saw each time it ran.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from streams import Stream
from streams.sources.base import YIELD_EVERY

N = 3 * YIELD_EVERY
LINES = b"".join(b"%d\n" % i for i in range(N))  # under a pipe's 64 KiB: written at once


def counts_seen_meanwhile(source: Stream[Any]) -> tuple[list[int], int]:
    """Run ``source`` on a loop; what another task saw of its lines each time it ran, and all."""
    out = source.sink_to_list()

    async def main() -> list[int]:
        seen: list[int] = []
        reading = True

        async def other() -> None:
            while reading:
                seen.append(len(out))
                await asyncio.sleep(0)

        watcher = asyncio.ensure_future(other())
        await source.start()  # follow=False / end of input: returns at the end
        reading = False
        await watcher
        return seen

    return asyncio.run(main()), len(out)


def a_path(tmp_path: Path, _: ExitStack) -> str:
    path = tmp_path / "big.txt"
    path.write_bytes(LINES)
    return str(path)


def a_file(tmp_path: Path, closing: ExitStack) -> Any:
    return closing.enter_context(open(a_path(tmp_path, closing), "rb"))


def a_pipe(_: Path, closing: ExitStack) -> Any:
    read, write = os.pipe()
    os.write(write, LINES)  # all buffered when the source reads it: no read waits
    os.close(write)
    return closing.enter_context(os.fdopen(read, "rb", buffering=0))


CASES: dict[str, tuple[Callable[[Any], Stream[Any]], Callable[[Path, ExitStack], Any]]] = {
    "from_textfile(path)": (lambda f: Stream.from_textfile(f, follow=False), a_path),
    "from_textfile(pipe)": (lambda f: Stream.from_textfile(f, follow=False), a_pipe),
    "from_stdin(file)": (lambda f: Stream.from_stdin(format="text", file=f), a_file),
    "from_stdin(pipe)": (lambda f: Stream.from_stdin(format="text", file=f), a_pipe),
}


@pytest.mark.parametrize("case", list(CASES))
def test_another_task_runs_at_least_every_yield_every_lines(tmp_path: Path, case: str) -> None:
    build, given = CASES[case]
    with ExitStack() as closing:
        seen, total = counts_seen_meanwhile(build(given(tmp_path, closing)))
    assert total == N
    assert any(0 < n < N for n in seen), f"the other task ran only at {seen}"
    # Between two of its turns the source took at most YIELD_EVERY lines.
    steps = [b - a for a, b in zip(seen, [*seen[1:], N], strict=True)]
    assert max(steps) <= YIELD_EVERY, f"the other task ran at {seen}"
