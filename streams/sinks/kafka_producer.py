"""The producer ``to_kafka`` writes with: its delivery callbacks' errors raised from Python.

A sink's delivery callback runs the nodes downstream of ``to_kafka`` (each
message delivered is pushed on). An exception leaving a callback is raised
by confluent-kafka's ``poll()`` or ``flush()``, which keeps a reference to it
(confluent-kafka 2.16: the exception outlives the call), and with it the
exception's frames and so the whole graph and the producer, for the rest of
the process. So the sink's callback keeps what it raises, and the producer
raises it, in Python, when the call that served the callback returns: the
same errors, from the same calls, one a call, in the order they were raised.

One difference remains: confluent-kafka stops serving callbacks at the
first that raises; here the other reports of the call are served (their
elements go on downstream) before the error is raised.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["kafka_producer"]


def kafka_producer(config: dict[str, Any], kept: list[Exception]) -> Any:
    """A ``confluent_kafka.Producer`` of ``config`` that raises the errors appended to ``kept``.

    Each call that serves delivery callbacks (``poll``, ``flush``,
    ``commit_transaction``) raises the first error in ``kept`` once it
    returns, removing it.

    Examples
    --------
    >>> kept = []
    >>> p = kafka_producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0}, kept)
    >>> kept.append(ZeroDivisionError("raised in a delivery callback"))
    >>> p.flush(0)
    Traceback (most recent call last):
    ...
    ZeroDivisionError: raised in a delivery callback
    >>> kept, p.flush(0)
    ([], 0)
    """
    return _producer_class()(config, kept)


@functools.cache
def _producer_class() -> type:
    import confluent_kafka as ck  # imported on first use: an optional dependency

    class RaisingProducer(ck.Producer):
        """A producer raising, after each call serving callbacks, what they kept."""

        def __init__(self, config: dict[str, Any], kept: list[Exception]) -> None:
            super().__init__(config)
            self.kept = kept

        def _raise_kept(self) -> None:
            if self.kept:
                raise self.kept.pop(0)

        def poll(self, *args: Any, **kwargs: Any) -> int:
            served: int = super().poll(*args, **kwargs)
            self._raise_kept()
            return served

        def flush(self, *args: Any, **kwargs: Any) -> int:
            left: int = super().flush(*args, **kwargs)
            self._raise_kept()
            return left

        def commit_transaction(self, *args: Any, **kwargs: Any) -> None:
            super().commit_transaction(*args, **kwargs)
            self._raise_kept()

    return RaisingProducer
