"""Redis stream entry ids for ``from_redis``: where to start, how ids compare, raw replies."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

__all__ = ["start_id"]

_MAX_SEQ = 2**64 - 1


_hiredis_pack: Callable[..., bytes] | None
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - depends on the environment
    _hiredis_pack = None


def _id_key(entry_id: Any) -> tuple[int, int]:
    """A Redis entry id (``"<ms>-<seq>"``, str or bytes) as a comparable pair."""
    ms, _, seq = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id).partition("-")
    return int(ms), int(seq or 0)


def _raw(response: Any, **options: Any) -> Any:
    return response


def _joined(ids: list[Any]) -> Any:
    """``ids`` (all str, or all bytes) as one newline-separated string."""
    return ("\n" if isinstance(ids[0], str) else b"\n").join(ids)


def start_id(start: Any) -> str:
    """The exclusive Redis id to read after, from an id, ``"$"`` or a time.

    A time (``datetime`` or seconds since the epoch) means "entries added at
    or after it"; an id means "entries after it"; ``"0"`` the whole stream,
    ``"$"`` only entries added from now on.

    Examples
    --------
    >>> start_id("0"), start_id("1700000000000-3")
    ('0', '1700000000000-3')
    >>> start_id(1700000000.5)
    '1700000000499-18446744073709551615'
    """
    if isinstance(start, _dt.datetime):
        start = start.timestamp()
    if isinstance(start, (int, float)) and not isinstance(start, bool):
        ms = round(start * 1000)
        return "0" if ms <= 0 else f"{ms - 1}-{_MAX_SEQ}"
    if isinstance(start, bytes):
        start = start.decode()
    if isinstance(start, str):
        return start
    raise TypeError(f"from_redis(): start must be an id, '$', a datetime or a timestamp, "
                    f"got {start!r}")
