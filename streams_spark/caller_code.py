"""What a traced function's code wrote, read from its bytecode, for Python's messages."""

from __future__ import annotations

import dis
from typing import Any

__all__ = ["MIRRORED", "written_as"]

#: Each order's mirror: Python tries ``b.__gt__(a)`` for ``a < b`` when ``a``'s fails.
MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def written_as(frame: Any, op: str) -> bool:
    """Whether the caller's code wrote ``op`` (False: the mirror, reflected here).

    ``3 < r.n`` calls ``r.n.__gt__(3)``: Python's message names ``<`` and the
    operands in the order they were written, read here from the comparison
    the caller's frame is running. A comparison made elsewhere (``min()``,
    ``operator.lt``) is taken as written.
    """
    for instruction in dis.get_instructions(frame.f_code):
        if instruction.offset == frame.f_lasti:
            written = instruction.argrepr.removeprefix("bool(").removesuffix(")")
            return instruction.opname != "COMPARE_OP" or written != MIRRORED[op]
    return True
