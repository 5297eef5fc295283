"""A seeded generator of Nexmark events: persons, auctions and bids.

The proportions are Nexmark's (of every 50 events, 1 person, 3 auctions
and 46 bids); event time moves 1 ms per event, in order, from a start
aligned on 10 s, so every engine cuts the same windows. Bids go to recent
auctions, a few of them hot, as in Nexmark's generator.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["START", "Auction", "Bid", "Person", "generate"]

#: The time of the first event (a multiple of 10 s since the epoch).
START = datetime(2026, 1, 1, tzinfo=UTC)

_CITIES = ("Phoenix", "Portland", "Boise", "Seattle", "Kent", "Bend", "Redmond", "Tacoma")
_STATES = ("AZ", "OR", "ID", "WA", "CA")


@dataclass(frozen=True, slots=True)
class Person:
    id: int
    name: str
    city: str
    state: str
    dt: datetime


@dataclass(frozen=True, slots=True)
class Auction:
    id: int
    seller: int
    category: int
    initial_bid: int
    dt: datetime


@dataclass(frozen=True, slots=True)
class Bid:
    auction: int
    bidder: int
    price: int
    dt: datetime


def generate(n: int, seed: int = 0) -> list[Person | Auction | Bid]:
    """``n`` events, the same for the same ``seed``.

    Examples
    --------
    >>> events = generate(100)
    >>> [type(e).__name__ for e in events[:5]]
    ['Person', 'Auction', 'Auction', 'Auction', 'Bid']
    >>> generate(100) == events
    True
    """
    rng = random.Random(seed)
    step = timedelta(milliseconds=1)
    events: list[Person | Auction | Bid] = []
    persons = auctions = 0
    for i in range(n):
        dt = START + i * step
        slot = i % 50
        if slot == 0:
            events.append(Person(persons, f"person-{persons}", rng.choice(_CITIES),
                                 rng.choice(_STATES), dt))
            persons += 1
        elif slot <= 3:
            seller = rng.randrange(max(persons, 1))
            events.append(Auction(auctions, seller, rng.randrange(10),
                                  rng.randrange(1, 1000), dt))
            auctions += 1
        else:
            # Most bids go to one of the 100 newest auctions; one in five to a
            # few hot ones.
            if rng.random() < 0.2:
                auction = max(auctions - 1 - rng.randrange(5), 0)
            else:
                auction = max(auctions - 1 - rng.randrange(100), 0)
            events.append(Bid(auction, rng.randrange(max(persons, 1)),
                              rng.randrange(1, 100_000), dt))
    return events
