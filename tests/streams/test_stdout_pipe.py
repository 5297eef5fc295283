"""sink_to_stdout in ``... | head``: a reader that goes away ends the program quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PRODUCER = """
from streams import Stream
source = Stream.from_iterable(range(1_000_000))
source.map(lambda i: {{"n": i}}).sink_to_stdout(flush={flush})
try:
    source.start()
finally:
    import sys
    print("cleanup ran", file=sys.stderr)
"""


@pytest.mark.parametrize("flush", [False, True])
def test_a_closed_pipe_ends_the_producer_quietly(flush: bool) -> None:
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER.format(flush=flush)],
                                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-3"], stdin=producer.stdout, capture_output=True,
                          timeout=60)
    assert producer.stdout is not None and producer.stderr is not None
    producer.stdout.close()  # only head holds the read end
    stderr = producer.stderr.read().decode()
    producer.stderr.close()
    status = producer.wait(timeout=60)
    assert head.stdout == b'{"n": 0}\n{"n": 1}\n{"n": 2}\n'
    assert stderr == "cleanup ran\n"  # no traceback, no "Exception ignored"
    assert status == 141  # 128 + SIGPIPE, as a Unix tool killed by the closed pipe
