"""The Kafka pipeline the exactly-once test kills: ``python kafka_exactly_once_child.py ...``.

from_kafka (keyed messages ``word n``) -> parse -> keyed scan (a running
count and sum per word) -> format -> a durable text file
(``--sink file``) or a transactional ``to_kafka`` (``--sink kafka``),
checkpointed. It reports progress on stdout ("<elements done>" lines) so the
parent can kill it at a chosen count; with ``--stepped`` it waits at each of
them, and around each checkpoint write, for the parent's word (see
``tests.kills.SteppedChild``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def parse(value: bytes) -> tuple[str, int]:
    word, n = value.decode().split()
    return word, int(n)


def die_after_commit(n: int) -> None:
    import os
    import signal

    from streams.sinks.kafka import ToKafka

    commits = 0
    settled = ToKafka._settled

    def settled_then_die(self: Any) -> Any:
        nonlocal commits
        committing = self._in_txn
        result = settled(self)
        commits += committing
        if commits >= n:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    ToKafka._settled = settled_then_die  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    from streams import Checkpointer, Stream
    from tests.kills import count_and_sum, report_progress, start_and_finish

    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--group")
    p.add_argument("--sink", choices=["file", "kafka"], required=True)
    p.add_argument("--output", required=True, help="a file path, or a topic")
    p.add_argument("--txn-id")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--every", type=int, default=7)
    p.add_argument("--die-after-commit", type=int, default=None,
                   help="SIGKILL this process right after its n-th Kafka transaction commit "
                        "(before the checkpoint covering it is written)")
    p.add_argument("--stepped", action="store_true",
                   help="wait for a line on stdin after each progress or checkpoint line")
    args = p.parse_args(argv)
    if args.die_after_commit is not None:
        die_after_commit(args.die_after_commit)

    params: dict[str, Any] = {"bootstrap.servers": args.bootstrap}
    if args.group:
        params.update({"group.id": args.group, "session.timeout.ms": 2000,
                       "heartbeat.interval.ms": 500})
    source = Stream.from_kafka([args.input], params, offset="earliest", batch=20)
    totals = source.map(parse).scan(count_and_sum, start=(0, 0), key=0)
    lines = totals.map(lambda kv: f"{kv[0]} {kv[1][0]} {kv[1][1]}")
    if args.sink == "file":
        lines.sink_to_durable_textfile(args.output, fsync=False)
    else:
        lines.to_kafka(args.output, {"bootstrap.servers": args.bootstrap,
                                     "transactional.id": args.txn_id}, transactional=True)
    report_progress(totals, stepped=args.stepped)
    Checkpointer(source, args.checkpoint, every=args.every, fsync=False)
    start_and_finish(source)


if __name__ == "__main__":
    main(sys.argv[1:])
