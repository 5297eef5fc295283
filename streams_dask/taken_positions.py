"""Every element of a keyed round taken by exactly one of its parts: checked on the client.

A keyed stage's round (:mod:`streams_dask.chain`) runs as one task per part,
and each task calls the node's key function over the whole batch and keeps
the elements of its own key groups
(:func:`~streams_dask.key_groups.run_key_groups`). That gives the output of
one node seeing every element only if the key function gives an element the
same key at every call. One that draws a random key, or reads the clock,
has an element taken by two parts (its results doubled) or by none (lost),
and nothing fails. So each part reports which positions of the batch it
took, one byte a position (1: taken), and the client checks them when it
takes the round (:meth:`~streams_dask.chain.StateChain.take`): a round that
does not add up is the :class:`NondeterministicKey` error, and its results
are not delivered.

The check is one pass in C over each part's bytes: read as integers and
summed, the parts' bytes give the all-ones value exactly when every position
was taken once (no byte carries into the next while fewer than 256 parts
add up; there are at most :data:`~streams_dask.key_groups.KEY_GROUPS`).
Counting the positions taken twice or by none, for the message, is done
only once the check has failed.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from itertools import zip_longest
from typing import Any

from streams.errors import short_repr

from .fetching import DaskTaskError

__all__ = ["NondeterministicKey", "check_taken", "miscounted", "nondeterministic_key"]


class NondeterministicKey(DaskTaskError):
    """A keyed stage on Dask whose key function gave an element different keys at different calls.

    Its parts disagreed about which of them holds an element: some were
    taken twice, some by none, and the states after that batch hold them
    so. The batch's results are not delivered and the stage stops, as
    after any failed task of a stateful stage: every later call raises
    this error.
    """


def miscounted(taken: Sequence[bytes | bytearray | None]) -> tuple[int, int] | None:
    """``(positions taken by no part, positions taken by more than one)``, or None if each
    position was taken by exactly one part (or a part took all: nothing to check).

    Examples
    --------
    >>> miscounted([b"\\x01\\x00\\x01", b"\\x00\\x01\\x00"]) is None
    True
    >>> miscounted([b"\\x01\\x01\\x00\\x00", b"\\x00\\x01\\x00\\x01"])
    (1, 1)
    """
    parts = [t for t in taken if t is not None]
    if len(parts) < 2 or len(parts) < len(taken):
        return None
    n = len(parts[0])
    if all(len(t) == n for t in parts):
        total = sum(int.from_bytes(t, "little") for t in parts)
        if total == int.from_bytes(b"\x01" * n, "little"):
            return None
    # Rare, and only once: per position in Python. Parts that read batches
    # of different lengths (a step before that is not pure after all) are
    # counted position by position too: the message still says what went wrong.
    counts: list[int] = [sum(c) for c in zip_longest(*parts, fillvalue=0)]
    return counts.count(0), sum(c > 1 for c in counts)


def check_taken(taken: Sequence[bytes | bytearray | None], plan_bytes: bytes) -> None:
    """Raise :class:`NondeterministicKey` unless each position of a round's batch was
    taken by exactly one part (``taken``: each part's bytes, in order).

    ``plan_bytes``, the stage's pickled plan, names the keyed node (read
    only for the error).
    """
    wrong = miscounted(taken)
    if wrong is not None:
        raise nondeterministic_key(plan_bytes, len(taken[0] or b""), *wrong)


def nondeterministic_key(plan_bytes: bytes, size: int, lost: int, doubled: int
                         ) -> NondeterministicKey:
    """The error of a round of ``size`` elements, ``lost`` of them taken by no part and
    ``doubled`` by several, naming the keyed node of the stage ``plan_bytes``."""
    spec = pickle.loads(plan_bytes).ops[0].spec
    traits = spec.traits
    key: Any = traits.key if traits.key is not None else traits.watermark_key
    shown = getattr(key, "__name__", None) if callable(key) else None
    return NondeterministicKey(
        f"{spec.name} (key={shown or short_repr(key)}): its key function gave elements a "
        f"different key at different calls: of a batch of {size} elements, {doubled} "
        f"were taken by more than one worker's task and {lost} by none, so the results of "
        "that batch and of every element after it are not delivered (the stage stops). "
        "On Dask each worker's task calls the key function over the whole batch and keeps "
        "the elements of its own keys, so a key function must return the same key for an "
        "element each time it is called. Draw a random or time-based key in a map() before "
        "the keyed node, e.g. .map(lambda x: (random.randrange(4), x)) then key=0: such a "
        "step runs once per batch and every task reads its output.")
