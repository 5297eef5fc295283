"""Names: operator method names derived from node class names."""

from __future__ import annotations

__all__ = ["snake_case"]


def snake_case(name: str) -> str:
    """``CombineLatest`` -> ``combine_latest``; ``FromHTTPServer`` -> ``from_http_server``.

    Examples
    --------
    >>> snake_case("CombineLatest"), snake_case("FromHTTPServer"), snake_case("map")
    ('combine_latest', 'from_http_server', 'map')
    """
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper() or
                                   (i + 1 < len(name) and name[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
