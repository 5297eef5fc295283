"""The Nexmark queries' functions, shared by every contender.

Each contender wires the same functions with its own operators, so the
benchmark measures the engines, not the functions.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from events import Auction, Bid, Person

__all__ = [
    "SESSION_GAP", "SLIDE", "WINDOW", "euro", "event_time", "hot_item", "highest_bid",
    "is_bid", "is_person_or_auction", "new_users", "owner", "q2_selected", "session_count",
]

#: Window length (q5, q7, q8), slide (q5) and session gap (q11), in seconds.
WINDOW = 10
SLIDE = 2
#: Half a millisecond off the events' 1 ms grid, so that no two bids are
#: exactly a gap apart (streams, Spark, Flink and bytewax keep such bids in
#: one session; streams before 2026-11 started a new one).
SESSION_GAP = 10.0005


def event_time(e: Person | Auction | Bid) -> Any:
    return e.dt


def is_bid(e: object) -> bool:
    return type(e) is Bid


def euro(b: Bid) -> tuple[int, int, float, Any]:
    """q1: a bid's price in euros."""
    return (b.auction, b.bidder, b.price * 0.908, b.dt)


def q2_selected(e: object) -> bool:
    """q2: bids of the auctions whose id is a multiple of 123."""
    return type(e) is Bid and e.auction % 123 == 0


def q2_fields(b: Bid) -> tuple[int, int]:
    return (b.auction, b.price)


def hot_item(bids: list[Bid]) -> tuple[int, int]:
    """q5: the auction with the most bids in a window, and its count (lowest id on ties)."""
    counts = Counter(b.auction for b in bids)
    top = max(counts.values())
    return min(a for a, c in counts.items() if c == top), top


def highest_bid(bids: list[Bid]) -> tuple[int, int]:
    """q7: the highest bid of a window (auction, price; the first on ties)."""
    best = max(bids, key=lambda b: b.price)
    return (best.auction, best.price)


def is_person_or_auction(e: object) -> bool:
    return type(e) is Person or type(e) is Auction


def owner(e: Person | Auction) -> int:
    """q8's key: a person's id, an auction's seller."""
    return e.id if type(e) is Person else e.seller  # type: ignore[union-attr]


def new_users(key_events: tuple[Any, list[Person | Auction]]) -> list[tuple[int, str, int]]:
    """q8: persons who opened auctions in the window they joined: (id, name, auction)."""
    _, events = key_events
    persons = [e for e in events if type(e) is Person]
    auctions = [e for e in events if type(e) is Auction]
    return [(p.id, p.name, a.id) for p in persons for a in auctions]


def bidder(b: Bid) -> int:
    return b.bidder


def session_count(key_bids: tuple[Any, list[Bid]]) -> tuple[Any, int]:
    """q11: bids per bidder session."""
    return (key_bids[0], len(key_bids[1]))
