"""The producer ``to_kafka`` writes with: its configuration checked, opening it, its transactions.

:func:`check_producer_config` refuses a configuration librdkafka refuses,
when the graph is built. :func:`open_producer` opens a sink's producer,
fencing an earlier writer of its transactional id, and
:func:`commit_transaction` commits the open transaction: their failures are
returned, for the sink to fail the node through its error policy, naming it
(as a failed delivery does), not raised as bare ``KafkaException``.

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .kafka import ToKafka

__all__ = ["begin_transaction", "check_producer_config", "commit_transaction", "kafka_producer",
           "message_part", "open_producer"]

#: Settings that depend on the machine or reach the network, left out of the
#: build-time check: librdkafka would connect to the brokers, load the TLS
#: files, run Kerberos' kinit, fetch an OAuth token (confluent-kafka waits up
#: to 10 s for ``oauth_cb``'s) or load plugins (which a Dask or Spark worker,
#: where the sink may run, has and the building process may not).
_WHERE_IT_RUNS = ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
                  "oauth_cb", "plugin.library.paths")


class _Quiet:
    """A librdkafka logger dropping every line: the checking producer's are of no interest."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        """Drop the line."""


def check_producer_config(config: dict[str, Any], what: str = "to_kafka()") -> None:
    """Refuse, at build time, a producer configuration librdkafka refuses (naming ``what``).

    librdkafka checks the names and values of its settings when a client is
    created, not before: a producer is created here, with the settings that
    depend on where it runs left out (:data:`_WHERE_IT_RUNS`), which connects
    nowhere, and destroyed at once (its threads with it).

    Examples
    --------
    >>> check_producer_config({"bootstrap.servers": "h:9092", "linger.ms": 5})
    >>> check_producer_config({"bootstrap.servers": "h:9092", "linger.ms": "soon"})
    Traceback (most recent call last):
    ...
    ValueError: to_kafka(): librdkafka refuses producer_config: Invalid value for ...
    """
    import confluent_kafka as ck

    checked = {k: v for k, v in config.items() if k not in _WHERE_IT_RUNS}
    checked["logger"] = _Quiet()  # it warns that it has no brokers
    try:
        ck.Producer(checked)
    except (ck.KafkaException, TypeError, ValueError) as e:
        err = e.args[0] if e.args else e
        reason = err.str() if isinstance(err, ck.KafkaError) else str(err)
        raise ValueError(f"{what}: librdkafka refuses producer_config: {reason}; correct or "
                         "remove that setting (see librdkafka's CONFIGURATION.md)") from None


def open_producer(sink: ToKafka) -> Exception | None:
    """Open ``sink``'s producer (anew, if it has one); the error if it could not be opened.

    A transactional producer fences an earlier one of its id, aborting its
    open transaction, and finds what it already wrote. On an error the sink
    has no producer: the next element opens one again, and fails if that
    fails too (through the node's error policy, which the caller applies
    once out of the ``except`` block: see ``ToKafka._refused``).
    """
    old = sink._producer
    if old is not None:  # reports of successes are now needed
        sink._producer = None
        old.flush()
        sink._done = sink._sent  # the successes it did not report
    # The delivery callback is the producer's own: passed to each produce()
    # call it costs about as much again as the produce itself. Reports of
    # successes (about as costly again) only when something reads them:
    # the marks of a transaction, downstream nodes, a source's tokens.
    sink._all_reports = sink.transactional or bool(sink.downstreams) or sink._defer
    producer = None
    try:
        producer = kafka_producer({**sink.producer_config, "on_delivery": sink._delivered,
                                   "delivery.report.only.error": not sink._all_reports},
                                  sink._raised)
        if sink.transactional:
            # Fences an earlier producer with this id and aborts its open transaction.
            producer.init_transactions(30)
            sink._skip = sink._already_written()
    except Exception as e:
        # The error's traceback keeps this frame: not the producer (its threads).
        producer = None
        return e
    sink._producer = producer
    if sink._produce_now is not None:
        sink._produce_now = producer.produce
    return None


def begin_transaction(sink: ToKafka) -> None:
    """Begin a transaction of ``sink``'s producer, aborting first one that failed to commit."""
    producer = sink._producer
    if sink._must_abort:
        sink._must_abort = False
        producer.abort_transaction(30)
    producer.begin_transaction()
    sink._in_txn = True


def commit_transaction(sink: ToKafka) -> Exception | None:
    """Commit ``sink``'s open transaction; the error if it could not be committed.

    The transaction's messages are then not written. One the producer can
    abort is aborted when the next element begins another
    (:func:`begin_transaction`), not here: a sink that closes leaves it to
    the broker, which aborts it when its timeout passes or a producer of
    its id starts. A fenced producer (a newer one has its transactional id)
    cannot go on: each later element fails the node.
    """
    import confluent_kafka as ck

    sink._in_txn = False
    try:
        sink._producer.commit_transaction(30)
    except ck.KafkaException as e:
        error = e
    else:
        return None
    kafka_error = error.args[0] if error.args else None
    sink._must_abort = isinstance(kafka_error, ck.KafkaError) and kafka_error.txn_requires_abort()
    error.add_note(f"streams: {sink._label()} could not commit its transaction: its "
                   "messages since the last commit are not written")
    return error


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


def message_part(x: Any) -> Any:
    """A message's value or key as the producer takes it: str, bytes or None, else refused."""
    if x is None or isinstance(x, (bytes, str)):
        return x
    raise TypeError(f"to_kafka writes str or bytes, got {type(x).__name__}; add .map(str) or "
                    ".map(json.dumps) before it")
