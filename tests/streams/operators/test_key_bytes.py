"""Key bytes: the form in which the engines route and group keys.

Dask routes an element to its key group by them, Spark groups keyed windows
and joins on them: keys a dict takes as one must give the same bytes, in
every process, or one key's state splits in two (and a join loses pairs).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections import namedtuple
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from enum import IntEnum, StrEnum
from fractions import Fraction
from typing import Any

import numpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.operators._checks import NAN_KEY, key_bytes, one_key

#: Scalars that compare equal across types: 1 == 1.0 == True.
scalars = st.one_of(st.integers(-3, 3), st.floats(-3, 3).map(lambda f: round(f * 2) / 2),
                    st.booleans(), st.sampled_from(["a", "bc", "a" * 40]), st.none())
keys = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3).map(tuple),
                    max_leaves=8)


def copied(key: Any) -> Any:
    """An equal key made of other objects: strings built anew, numbers as other types."""
    if isinstance(key, tuple):
        return tuple(copied(k) for k in key)
    if isinstance(key, str):
        return "".join(list(key))  # an equal string, another object (unless cached)
    if type(key) is int and -3 <= key <= 3:
        return float(key)
    return key


@given(keys)
def test_equal_keys_give_equal_bytes(key: Any) -> None:
    twin = copied(key)
    assert twin == key
    assert key_bytes(twin) == key_bytes(key)


@given(keys, keys)
def test_keys_a_dict_tells_apart_give_other_bytes(a: Any, b: Any) -> None:
    assert (key_bytes(a) == key_bytes(b)) == (a == b)


def test_a_string_met_twice_in_a_key_is_not_a_reference_to_itself() -> None:
    # Pickle writes an object met twice as a reference to its first copy.
    s = "user-" + str(7)
    assert key_bytes((s, s)) == key_bytes((s, "user-" + "7"))
    pair = (1, "x")
    assert key_bytes((pair, pair)) == key_bytes(((1, "x"), (1.0, "x")))


def test_equal_frozensets_built_in_any_order_give_equal_bytes() -> None:
    # A frozenset's iteration order depends on the order its elements were
    # added in (where their hashes collide), and pickle follows it.
    tags = [f"tag-{i}" for i in range(40)]
    built = [frozenset(tags[i:] + tags[:i]) for i in range(40)]
    built += [frozenset(reversed(tags[i:] + tags[:i])) for i in range(40)]
    assert len({key_bytes(k) for k in built}) == 1
    assert key_bytes(frozenset({1, 2.0})) == key_bytes(frozenset({2, 1.0}))
    assert pickle.loads(key_bytes(("k", frozenset(tags)))) == ("k", frozenset(tags))


def test_the_bytes_are_the_same_in_another_process() -> None:
    probe = [("a", 1), ("b" * 3, 2.0, (True, None)), 7, "k", 2.5, frozenset("abcdefgh")]
    code = ("import sys; from streams.operators._checks import NAN_KEY, key_bytes, one_key; "
            f"sys.stdout.write(repr([key_bytes(k) for k in {probe!r}]))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout
    assert other == repr([key_bytes(k) for k in probe])


class Colour(StrEnum):
    RED = "red"


class Level(IntEnum):
    HIGH = 2


Point = namedtuple("Point", "x y")


@pytest.mark.parametrize(("a", "b"), [
    (Decimal("1.1"), Decimal("1.10")),
    (Decimal("10"), 10),
    (Decimal("0.5"), 0.5),
    (Fraction(1), 1),
    (Fraction(1, 2), 0.5),
    (Colour.RED, "red"),
    (Level.HIGH, 2),
    (Point(1, "a"), (1, "a")),
    (1 + 0j, 1),
    (0.5 + 0j, 0.5),
    (numpy.True_, True),
    (numpy.False_, 0),
])
def test_keys_of_other_types_a_dict_takes_as_one_give_equal_bytes(a: Any, b: Any) -> None:
    assert a == b and hash(a) == hash(b)  # one key of a dict
    assert key_bytes(a) == key_bytes(b)


@pytest.mark.parametrize(("a", "b"), [
    (Decimal("1.1"), 1.1),  # Python compares them exactly: two keys
    (Fraction(1, 3), 1 / 3),
    (1 + 1j, 1),
])
def test_keys_of_other_types_a_dict_tells_apart_give_other_bytes(a: Any, b: Any) -> None:
    assert a != b
    assert key_bytes(a) != key_bytes(b)


@given(st.datetimes(timezones=st.one_of(st.none(), st.timezones())),
       st.integers(-14 * 60, 14 * 60))
def test_equal_times_give_equal_bytes(when: datetime, minutes: int) -> None:
    # An aware time in another zone, pandas' types, a naive one's fold: equal, one key.
    import pandas as pd

    twins = [pd.Timestamp(when)]
    if when.utcoffset() is None:
        twins.append(when.replace(fold=1 - when.fold))  # equality ignores it
    else:
        twins.append(when.astimezone(timezone(timedelta(minutes=minutes))))
    for twin in twins:
        assert twin == when
        assert key_bytes(twin) == key_bytes(when)
    assert key_bytes(pd.Timedelta(seconds=minutes)) == key_bytes(timedelta(seconds=minutes))


def test_times_a_dict_tells_apart_stay_apart_and_odd_ones_do_not_fail() -> None:
    import pandas as pd

    one, two = pd.Timestamp("2024-01-01 00:00:00.000000001"), pd.Timestamp(
        "2024-01-01 00:00:00.000000002")
    assert one != two and key_bytes(one) != key_bytes(two)  # a nanosecond apart
    paris = pd.Timestamp("2024-01-01 01:00:00.000000001", tz="Europe/Paris")
    assert key_bytes(paris) == key_bytes(paris.tz_convert("UTC"))
    assert key_bytes(pd.Timedelta(1, "ns")) != key_bytes(pd.Timedelta(2, "ns"))
    east = datetime.min.replace(tzinfo=timezone(timedelta(hours=1)))  # no UTC form
    for odd in (pd.NaT, east):
        assert key_bytes(odd) == key_bytes(odd)


def test_every_nan_key_gives_one_nans_bytes() -> None:
    # Each a key of its own to a dict, but one key to every keyed operator
    # (one_key), as to Spark: the bytes that route them agree.
    nans = [NAN_KEY, float("nan"), -float("nan"), float("inf") - float("inf"),
            numpy.float64("nan")]
    assert len({key_bytes(k) for k in nans}) == 1
    assert {one_key(k) is NAN_KEY for k in nans} == {True}
