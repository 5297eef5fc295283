"""Configuration of the Kafka sources, checked at build time: consumer settings, start offsets.

Shared by ``from_kafka`` (:mod:`streams.sources.kafka`) and
``from_kafka_batched`` (:mod:`streams.sources.kafka_batched`);
confluent-kafka itself is imported only when a source is built.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

__all__ = ["Partition", "kafka_consumer_config", "start_offsets"]

#: A partition of a topic: ``(topic, partition number)``.
Partition = tuple[str, int]

_NAMED = ("earliest", "latest", "committed")


def _import_kafka(what: str) -> Any:
    try:
        import confluent_kafka
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"{what} needs confluent-kafka: pip install 'streams[kafka]'") from e
    return confluent_kafka


def kafka_consumer_config(params: Any, what: str) -> dict[str, Any]:
    """Check a consumer configuration at build time; return a copy we may change.

    Examples
    --------
    >>> kafka_consumer_config({"bootstrap.servers": "h:9092"}, "from_kafka()")
    {'bootstrap.servers': 'h:9092'}
    >>> kafka_consumer_config({}, "from_kafka()")
    Traceback (most recent call last):
    ...
    ValueError: from_kafka(): consumer_params needs 'bootstrap.servers' (host:port of a broker)
    """
    if not isinstance(params, dict):
        raise TypeError(f"{what}: consumer_params must be a dict of librdkafka settings, "
                        f"got {type(params).__name__}")
    if "bootstrap.servers" not in params:
        raise ValueError(f"{what}: consumer_params needs 'bootstrap.servers' (host:port of a "
                         "broker)")
    return dict(params)


def start_offsets(offset: Any, what: str) -> Any:
    """Check where a Kafka source starts; return it normalised.

    ``None`` or ``"committed"``: the group's committed offsets (else the
    consumer's ``auto.offset.reset``); ``"earliest"``, ``"latest"``; an int
    (that offset in every partition); a dict ``{partition: offset}``; or a
    time (``datetime`` or seconds since the epoch, a float): the first
    message at or after it.

    Examples
    --------
    >>> start_offsets("earliest", "from_kafka()"), start_offsets(5, "from_kafka()")
    ('earliest', 5)
    >>> import datetime
    >>> start_offsets(datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc), "x")
    ('time', 1704067200000)
    """
    if offset is None or offset == "committed":
        return None
    if isinstance(offset, str):
        if offset in _NAMED:
            return offset
        raise ValueError(f"{what}: offset must be 'earliest', 'latest', 'committed', an int, "
                         f"a dict {{partition: offset}} or a time; got {offset!r}")
    if isinstance(offset, _dt.datetime):
        return ("time", round(offset.timestamp() * 1000))
    if isinstance(offset, bool):
        raise TypeError(f"{what}: offset must not be a bool, got {offset!r}")
    if isinstance(offset, int):
        if offset < 0:
            raise ValueError(f"{what}: offset must be >= 0, got {offset!r}")
        return offset
    if isinstance(offset, float):
        return ("time", round(offset * 1000))
    if isinstance(offset, dict):
        return _partition_offsets(offset, what)
    raise TypeError(f"{what}: offset must be 'earliest', 'latest', 'committed', an int, a "
                    f"dict {{partition: offset}} or a time; got {offset!r}")


def _partition_offsets(offset: dict[Any, Any], what: str) -> dict[int, int]:
    """An ``offset`` dict ``{partition: offset}``, checked as a single int offset is.

    A partition may be given by its digits (a JSON object's keys are strings).

    Examples
    --------
    >>> _partition_offsets({0: 5, "1": 7}, "from_kafka()")
    {0: 5, 1: 7}
    >>> _partition_offsets({0: -2}, "from_kafka()")
    Traceback (most recent call last):
    ...
    ValueError: from_kafka(): offset {partition: offset} takes offsets >= 0, got -2 for ...
    """
    out = {}
    for key, value in offset.items():
        if isinstance(key, str) and key.isdigit():
            key = int(key)
        if isinstance(key, bool) or not isinstance(key, int) or key < 0:
            raise TypeError(f"{what}: offset {{partition: offset}} takes partition numbers "
                            f"(ints >= 0) as keys, got {key!r}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{what}: offset {{partition: offset}} takes int offsets, got "
                            f"{value!r} for partition {key}")
        if value < 0:
            raise ValueError(f"{what}: offset {{partition: offset}} takes offsets >= 0, got "
                             f"{value!r} for partition {key}; leave a partition out to start "
                             "it at the group's committed offset (else auto.offset.reset)")
        out[key] = value
    return out
