"""Refuse, in one line, to start worker processes from an unguarded script.

Dask starts its worker processes with ``multiprocessing``'s *spawn*: each
one imports the user's script again, so a script that builds and runs a
Dask pipeline at its top level, without ``if __name__ == "__main__":``,
runs it once more in every worker, which fails with hundreds of lines of
``distributed.nanny`` errors. This is detected before any process starts.
"""

from __future__ import annotations

import ast
import sys
from types import FrameType, ModuleType

__all__ = ["check_main_guard", "unguarded_line"]

MESSAGE = (
    "streams_dask: {file}, line {line}, starts Dask worker processes at the top level of the "
    "script; each worker re-imports the script, so put the code that runs the pipeline under "
    '`if __name__ == "__main__":` (or pass to_dask(Client(processes=False)) for threads)')


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast.dump(test.left), ast.dump(test.comparators[0])}
    return sides == {ast.dump(ast.Name("__name__", ast.Load())),
                     ast.dump(ast.Constant("__main__"))}


def _module_frame(main: ModuleType) -> FrameType | None:
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>":
            return frame
        frame = frame.f_back
    return None


def unguarded_line(main: ModuleType | None = None) -> tuple[str, int] | None:
    """The script and line running this call outside a ``__main__`` guard, if any.

    None when ``__main__`` is not a script file (Jupyter, ``python -c``, a
    test runner) or when the call comes from inside the guard.

    Examples
    --------
    >>> unguarded_line() is None  # under the doctest runner, not a script
    True
    """
    main = sys.modules.get("__main__") if main is None else main
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or main.__name__ != "__main__":
        return None
    frame = _module_frame(main)
    if frame is None:
        return None  # not called from the script's top-level code
    line = frame.f_lineno
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end:
                return None
    return path, line


def check_main_guard() -> None:
    """Exit with one line saying what to do when worker processes would re-run the script."""
    import dask

    if dask.config.get("distributed.worker.multiprocessing-method", "spawn") == "fork":
        return  # forked workers do not import the script again
    where = unguarded_line()
    if where is not None:
        raise SystemExit(MESSAGE.format(file=where[0], line=where[1]))
