"""The routing columns of the elements bound for a stateful Spark stage: ``k`` and ``t``.

A keyed scan's elements go by the group of their key (:func:`key_bucket`
of its pickle), a sequential stage's to its one group, a window's with
their event time as the time function gives it (and, keyed, their pickled
key: one pickle for keys one state in-process, 1, 1.0 and True). Each
key is pickled once per task. :class:`streams_spark.routing.Router` packs
the rows by these columns. A window is emitted with its first element's
own key, not the one these bytes unpickle to (:func:`window_key_metadata`).
"""

from __future__ import annotations

import json
import os
import pickle
import zlib
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from streams.operators._checks import holds_nan, key_bytes, key_function

from .plan import Route

__all__ = ["KEY_BUCKETS", "ONE_GROUP", "Routed", "element_routes", "key_bucket",
           "key_of_windows", "window_key", "window_key_metadata", "window_routes"]

#: The key of the one group of a sequential stage (never a pickled key).
ONE_GROUP = b"\x01"

#: Keys of a keyed scan are spread over this many groups (each holding the
#: states of its keys): one group per key would cost PySpark ~2 ms per key
#: and micro-batch, and one row per key and window on the way to a window.
#: It bounds how many tasks share the keyed work, so it is well above the
#: cores of a cluster (as Flink's default of 128 key groups); a micro-batch
#: pays for the groups its keys fill, at most one per distinct key. Fixed for
#: a query's life: its checkpoint keeps the state of each group, and a query
#: restarted with another number is refused (see :mod:`streams_spark.stages`).
KEY_BUCKETS = 128


def key_bucket(kbytes: bytes, buckets: int = KEY_BUCKETS) -> bytes:
    """The group of a key's bytes (:func:`key_bytes`) among ``buckets``, in every process.

    Examples
    --------
    >>> key_bucket(key_bytes(0.0)) == key_bucket(key_bytes(-0.0)) == key_bucket(key_bytes(0))
    True
    """
    return b"%d" % (zlib.crc32(kbytes) % buckets)


def window_key(k: Any) -> bytes:
    """The pickle of a window's (or a join's) key: one for keys that are one state in-process.

    A dict takes 1, 1.0 and True as one key; Spark groups the windows, and
    matches a join's sides, by these bytes. They unpickle to one form of the
    key (``1`` for all three), which is not what in-process emits: see
    :func:`window_key_metadata`. A tuple key holding a NaN is a key of its
    own for each element in-process (a dict finds it only by identity, see
    :func:`~streams.operators._checks.one_key`): its bytes are followed by
    random ones, so that its element is grouped (or matched) with no other.
    The caller takes one key object's bytes once: elements sharing that very
    object share its bytes, as they share a state in-process.

    >>> window_key(1) == window_key(1.0) == window_key(True) != window_key(1.5)
    True
    >>> window_key(("a", float("nan"))) != window_key(("a", float("nan")))
    True
    """
    b = key_bytes(k)
    return b + os.urandom(16) if holds_nan(k) else b


#: The key of :func:`window_key_metadata` in the metadata of Spark's ``k`` column.
KEY_METADATA = "streams.window_key"

#: How Spark's Arrow batches carry a column's metadata: as JSON, under this key.
SPARK_METADATA = b"SPARK::metadata::json"


def window_key_metadata(key: Any) -> dict[str, str]:
    """The metadata of Spark's ``k`` column of windows keyed by ``key`` (a window's key= option).

    In-process a keyed window is emitted with the key of the element that
    opened it (``2.0``, ``True``, ``-0.0``), and Spark groups the windows by
    :func:`window_key`, one form for all the keys a dict takes as one. The
    metadata carries the key function, pickled, with the windows' rows
    wherever they go (an executor's pass, a table collected on the driver):
    :func:`key_of_windows` finds it there to take each window's key from its
    first element.

    Examples
    --------
    >>> meta = json.dumps(window_key_metadata(1)).encode()
    >>> key_of_windows({SPARK_METADATA: meta})(("a", 2.0))
    2.0
    """
    from pyspark import cloudpickle  # the one the worker's functions are pickled with

    return {KEY_METADATA: cloudpickle.dumps(key).hex()}


def key_of_windows(metadata: dict[bytes, bytes] | None) -> Callable[[Any], Any] | None:
    """The key function of windows whose ``k`` field has ``metadata`` (None: not given).

    See :func:`window_key_metadata`. Unpickled once per process for each key.
    """
    spark = (metadata or {}).get(SPARK_METADATA)
    return None if spark is None else _key_function(spark)


@lru_cache(maxsize=64)
def _key_function(spark: bytes) -> Callable[[Any], Any] | None:
    pickled = json.loads(spark).get(KEY_METADATA)
    return None if pickled is None else key_function(pickle.loads(bytes.fromhex(pickled)))


def element_routes(route: Route | None) -> Callable[[Any], tuple[bytes | None, Any]]:
    """The routing columns ``k`` and ``t`` of an element bound for ``route`` (``t`` as given)."""
    if route is None:
        return lambda x: (None, None)
    if route.kind == "group":
        return lambda x: (ONE_GROUP, None)
    assert route.spec is not None
    traits = route.spec.traits
    if route.kind == "key":
        keyf = key_function(traits.key)
        # Keys repeat: take each one's bytes once. Equal keys have the same
        # bytes in every task, as they share one state in-process (a dict: 1,
        # 1.0 and True are one key, so are 0.0 and -0.0), and so one bucket.
        taken: dict[Any, bytes] = {}

        def by_key(x: Any) -> tuple[bytes, None]:
            k = keyf(x)
            try:
                return taken[k], None
            except KeyError:
                b = taken[k] = key_bytes(k)
                return b, None
            # An unhashable key raises TypeError: an error of the node, as in-process.

        return by_key
    event_time = traits.event_time
    assert event_time is not None
    # The time as the function returns it: the Router turns a batch's times
    # into seconds at once (see event_seconds).
    timef = key_function(event_time.time)
    if event_time.key is not None:
        keyf = key_function(event_time.key)
        known: dict[Any, bytes] = {}

        def keyed_when(x: Any) -> tuple[bytes, Any]:
            t = timef(x)
            k = keyf(x)
            try:
                return known[k], t
            except KeyError:
                b = known[k] = window_key(k)
                return b, t

        return keyed_when
    return lambda x: (None, timef(x))


#: The keys and times of a batch's elements before the first that fails, and
#: that one's position and exception (None: none fails).
Routed = tuple[list[bytes | None], list[Any], tuple[int, Exception] | None]


def window_routes(route: Route) -> Callable[[list[Any]], Routed]:
    """The routing columns ``k`` and ``t`` of elements bound for the window ``route``, at once.

    The functions run over the list (``map``), each key pickled once. On
    an exception, which need not be the first element's, the elements are
    routed again one by one (:func:`element_routes`) to find the first.
    """
    assert route.spec is not None
    event_time = route.spec.traits.event_time
    assert event_time is not None
    timef = key_function(event_time.time)
    keyf = key_function(event_time.key) if event_time.key is not None else None
    one_by_one = element_routes(route)
    known: dict[Any, bytes] = {}

    def routes(values: list[Any]) -> Routed:
        try:
            times = list(map(timef, values))
            if keyf is None:
                return [None] * len(values), times, None
            keys = list(map(keyf, values))
            for k in set(keys).difference(known):  # unhashable: TypeError, as in-process
                known[k] = window_key(k)
            return [known[k] for k in keys], times, None
        except Exception:
            pass
        ks: list[bytes | None] = []
        times = []
        for i, x in enumerate(values):
            try:
                k, t = one_by_one(x)
            except Exception as e:
                return ks, times, (i, e)
            ks.append(k)
            times.append(t)
        return ks, times, None

    return routes
