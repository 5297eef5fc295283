"""from_kafka in a consumer group whose partitions move between members (rebalances).

Two members of one group run on one loop: the first reads both partitions,
a second joins and takes one, then leaves and gives it back. What each
commits, and where each reads, shows whose offsets a moved partition
follows: the group's, as its new owner commits them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from streams import Checkpointer, Stream
from tests.streams.test_kafka_delivery import committed

pytestmark = pytest.mark.kafka

#: The group's rebalance protocols: eager (every partition is revoked, then
#: assigned anew) and incremental (only the partitions that move).
STRATEGIES = ["range", "cooperative-sticky"]


async def until(done: Callable[[], bool], what: str) -> None:
    """Wait for ``done()``: a hang guard (a minute), not a timing."""
    for _ in range(6000):
        if done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"still waiting for {what}")


def member_params(broker: Any, group: str, strategy: str) -> dict[str, Any]:
    # Heartbeats every 100 ms: a member learns of a rebalance that soon.
    return broker.config(**{"group.id": group, "auto.offset.reset": "earliest",
                            "session.timeout.ms": 6000, "heartbeat.interval.ms": 100,
                            "partition.assignment.strategy": strategy})


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_moved_partition_follows_the_group_offsets_its_new_owner_commits(
        kafka_broker: Any, strategy: str) -> None:
    topic = kafka_broker.create_topic(f"moved-{strategy}", partitions=2)
    for p in (0, 1):
        kafka_broker.produce(topic, [b"%d-old-%d" % (p, i) for i in range(20)], partition=p)
    params = member_params(kafka_broker, f"moved-{strategy}", strategy)

    def offsets() -> list[int]:
        return committed(kafka_broker, params, topic, 2)

    async def main() -> None:
        # The first member starts at the beginning, whatever the group says.
        a = Stream.from_kafka([topic], params, offset="earliest", asynchronous=True,
                              poll_interval=0.01)
        got_a = a.sink_to_list()
        run_a = a.start()
        await until(lambda: len(got_a) == 40, "the first member to read both partitions")
        b = Stream.from_kafka([topic], params, asynchronous=True, poll_interval=0.01)
        got_b = b.sink_to_list()
        run_b = b.start()
        await until(lambda: len(a._assigned) == 1 and len(b._assigned) == 1,
                    "the partitions to be shared")
        (_, kept), = a._assigned
        (_, moved), = b._assigned
        kafka_broker.produce(topic, [b"%d-b-%d" % (moved, i) for i in range(10)],
                             partition=moved)
        await until(lambda: len(got_b) == 10 and offsets()[moved] == 30,
                    "the second member to read and commit")
        assert got_b == [b"%d-b-%d" % (moved, i) for i in range(10)]
        # The first member commits its partition's offsets, only those: it
        # rewound the second's to where it had read it before.
        kafka_broker.produce(topic, [b"%d-a-%d" % (kept, i) for i in range(5)],
                             partition=kept)
        await until(lambda: len(got_a) == 45 and offsets()[kept] == 25,
                    "the first member to read and commit")
        assert offsets()[moved] == 30
        assert (topic, moved) not in a.offsets
        # The second leaves: the partition comes back to the first, which
        # reads on where the second stopped (not from its own old offset, nor
        # from the beginning its offset= says for a partition never read).
        b.stop()
        await run_b
        await until(lambda: len(a._assigned) == 2, "the partition to come back")
        kafka_broker.produce(topic, [b"%d-back-%d" % (moved, i) for i in range(3)],
                             partition=moved)
        await until(lambda: any(v.startswith(b"%d-back-2" % moved) for v in got_a),
                    "the first member to read the partition again")
        a.stop()
        await run_a
        assert [v for v in got_a[45:] if v.startswith(b"%d-" % moved)] == [
            b"%d-back-%d" % (moved, i) for i in range(3)]
        assert offsets() == [25 if p == kept else 33 for p in (0, 1)]

    asyncio.run(main())


def test_with_a_checkpoint_a_moved_partitions_offset_is_kept_and_not_committed(
        kafka_broker: Any, tmp_path: Any) -> None:
    # The checkpoint's state holds what was read of the partition: were it to
    # come back, reading on from the checkpoint's offset applies nothing twice
    # (the group's offset may lag it). The group's offset is the new owner's.
    topic = kafka_broker.create_topic("moved-checkpointed", partitions=2)
    for p in (0, 1):
        kafka_broker.produce(topic, [b"%d-old-%d" % (p, i) for i in range(20)], partition=p)
    params = member_params(kafka_broker, "moved-checkpointed", "range")

    def offsets() -> list[int]:
        return committed(kafka_broker, params, topic, 2)

    async def main() -> None:
        a = Stream.from_kafka([topic], params, asynchronous=True, poll_interval=0.01)
        got_a = a.sink_to_list()
        Checkpointer(a, tmp_path, every=1, fsync=False)
        run_a = a.start()
        await until(lambda: len(got_a) == 40 and offsets() == [20, 20],
                    "the first member to read and commit both partitions")
        b = Stream.from_kafka([topic], params, asynchronous=True, poll_interval=0.01)
        got_b = b.sink_to_list()
        run_b = b.start()
        await until(lambda: len(a._assigned) == 1 and len(b._assigned) == 1,
                    "the partitions to be shared")
        (_, kept), = a._assigned
        (_, moved), = b._assigned
        kafka_broker.produce(topic, [b"b-%d" % i for i in range(10)], partition=moved)
        await until(lambda: len(got_b) == 10 and offsets()[moved] == 30,
                    "the second member to read and commit")
        kafka_broker.produce(topic, [b"a-%d" % i for i in range(5)], partition=kept)
        await until(lambda: len(got_a) == 45 and offsets()[kept] == 25,
                    "the first member to read and commit")
        assert offsets()[moved] == 30
        assert a.offsets[(topic, moved)] == 20  # the checkpoint's
        for source, run in ((b, run_b), (a, run_a)):
            source.stop()
            await run

    asyncio.run(main())


def test_an_incremental_rebalance_protocol_reads_every_partition(kafka_broker: Any) -> None:
    # assign() is refused under it (a rebalance adds partitions to those kept):
    # the first read raised, and not even as an Exception.
    topic = kafka_broker.create_topic("cooperative", partitions=2)
    for p in (0, 1):
        kafka_broker.produce(topic, [b"%d-%d" % (p, i) for i in range(10)], partition=p)
    params = member_params(kafka_broker, "cooperative", "cooperative-sticky")
    source = Stream.from_kafka([topic], params)
    out = source.sink_to_list()
    source.start()
    assert sorted(out) == sorted(b"%d-%d" % (p, i) for p in (0, 1) for i in range(10))
    assert committed(kafka_broker, params, topic, 2) == [10, 10]
