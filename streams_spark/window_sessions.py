"""A static DataFrame's keyed session windows, cut from each key's rows in time order.

Spark's ``session_window(t, gap)`` gives each row a session of its own,
``[t, t + gap)``, aggregates the rows by that struct and key before the
shuffle (a group per row, where a session rarely holds two rows of one
partition at one time), then sorts each key's sessions and merges the ones
that touch. Over a static DataFrame the sessions are cut from the rows
instead: each key's rows in time order, a row starts a session when it
comes more than ``gap`` after the row before it, and a running count of
those starts numbers the sessions; one aggregate by key and number follows,
on the shuffle the ordering already made::

    rows.select(*, lag(t) OVER (PARTITION BY key ORDER BY t) AS prev)
        .select(*, sum(t - prev > gap OR prev IS NULL) OVER (... ROWS UNBOUNDED PRECEDING) AS n)
        .groupBy(key, n).agg(parts, min(t), max(t))

The sessions are ``session_window()``'s, bounds included (from the first
row's time to the last one's plus ``gap``; rows exactly ``gap`` apart in
one session): the same groups, the same results, the same text in a
session's error. Nexmark's q11 (sessions of 920,000 bids by bidder, 10 s
apart), hand-written both ways: 1.15x the rate of ``session_window()``
(medians of 11 paired rounds over 1,000,000 events, 2026-11-29).

The windows whose function runs in Python (``streams_spark.stream``, each
session's rows collected for it) are cut so too: a Nexmark q11 whose
function is not traced, 1.11x the rate of ``session_window()`` (medians of
7 paired rounds, the same 326,003 sessions, 2026-11-29).

Where the function runs in Python, a row may be a span: a key's elements
within one gap of each other, packed by the task before the window (see
:class:`streams_spark.routing.Router`), from its first time to its last
(the column ``last``). A span starts a session when it comes more than
``gap`` after the latest end of the rows before it (a running ``max``
where single rows use ``lag``): the sessions ``session_window()`` would
give its elements. Nexmark's q11 with its bidders folded to 500 (each
bidder one long session), its functions in Python: 2.3x the rate of one
row per element (3 paired rounds over 1,000,000 events, 2026-12-01).

A stream's sessions keep ``session_window()``: its watermark closes them,
and Spark runs no window function over a stream. So do unkeyed sessions:
all their rows are one key, which a window function holds at once where
``session_window()`` streams it after its sort (one session of 920,000 bids
cut this way: 0.93x the rate of ``session_window()``; 0.95x for ~300,000
sessions, 11 paired rounds each, 2026-11-29).
"""

from __future__ import annotations

from typing import Any

from streams.operators.window_bounds import micros
from streams.spec import EventTime

from .sql_text import named

__all__ = ["sessions"]


def sessions(rows: Any, event_time: EventTime, keys: list[str],
             parts: list[tuple[str, str]], time: str = "__et", last: str | None = None) -> Any:
    """``rows`` (timestamped by the column ``time``) by session and ``keys``, with ``parts``.

    Each session's row has its bounds as ``session_window()``'s struct,
    ``__w``, the ``keys`` and each of ``parts`` (``(SQL, name)`` of
    aggregates) over the session's rows, under its name. With ``last``, a
    row is a span from ``time`` to the column ``last`` (elements within one
    gap of each other, packed by :class:`streams_spark.routing.Router`): it
    starts a session when it comes more than ``gap`` after the latest end
    of the rows before it, the session ``session_window()`` would give its
    elements.
    """
    assert event_time.session and not rows.isStreaming
    gap = micros(event_time.size)
    et = f"`{time}`"
    lt = et if last is None else f"`{last}`"
    by = f"PARTITION BY {', '.join(f'`{k}`' for k in keys)} ORDER BY {et}"
    # A row more than gap after the one before it starts a session (the
    # first row of a key has none before it). Each step is one projection:
    # Spark analyses the whole plan at each DataFrame call.
    before = (f"unix_micros(lag({et}) OVER ({by}))" if last is None else
              f"max(unix_micros({lt})) OVER ({by} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 "
              "PRECEDING)")
    starts = rows.selectExpr("*", f"CASE WHEN unix_micros({et}) - {before} <= {gap} "
                                  "THEN 0 ELSE 1 END AS `__new`")
    numbered = starts.selectExpr("*", f"sum(`__new`) OVER ({by} ROWS BETWEEN UNBOUNDED "
                                      "PRECEDING AND CURRENT ROW) AS `__sid`")
    bounds = (f"named_struct('start', min({et}), "
              f"'end', timestamp_micros(unix_micros(max({lt})) + {gap}))")
    return numbered.groupBy(*keys, "__sid").agg(
        named(bounds, "__w"), *[named(sql, name) for sql, name in parts])
