"""The expression a function returns, read from its source and checked against its code.

:mod:`streams.inline` writes a function's expression into fused code only
if the source found for it compiles to the very code the function runs:
the same bytecode, names and constants (of the same types). A file edited
since its import, or two look-alike lambdas on one line, are not guessed.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import textwrap
import types
import weakref
from typing import Any

__all__ = ["returned_expression", "tree_copy"]


#: ``returned_expression``'s answers, for the code object they were found for: a stage
#: on a Dask worker or Spark executor compiles its fused code again per batch.
_found: weakref.WeakKeyDictionary[types.FunctionType, tuple[types.CodeType, ast.expr | None]] \
    = weakref.WeakKeyDictionary()


def returned_expression(func: types.FunctionType) -> ast.expr | None:
    """The expression ``func`` returns, from its verified source, if its body is one return."""
    known = _found.get(func)
    if known is None or known[0] is not func.__code__:
        known = _found[func] = (func.__code__, _find_returned(func))
    return known[1]


def tree_copy(node: Any) -> Any:
    """A copy of the syntax tree ``node``: its fields and positions, nothing else.

    Not ``copy.deepcopy``: the parser shares one ``Load()`` (and one of each
    operator) between all its trees, and a library may hang attributes on
    them; IPython's ``executing`` gives every node it reads a ``parent``, so
    a deep copy of ``x + 1`` copied a whole module's tree (a graph's first
    emit in Jupyter took 63 ms instead of 1.2).

    Examples
    --------
    >>> tree = ast.parse("x + 1", mode="eval").body
    >>> tree.left.ctx.parent = ast.parse("y = [1, 2, 3]")  # as executing does
    >>> copied = tree_copy(tree)
    >>> ast.unparse(copied), hasattr(copied.left.ctx, "parent")
    ('x + 1', False)
    """
    if isinstance(node, ast.AST):
        copied = type(node)(**{f: tree_copy(getattr(node, f)) for f in node._fields
                               if hasattr(node, f)})
        for name in node._attributes:  # lineno and the like
            if hasattr(node, name):
                setattr(copied, name, getattr(node, name))
        return copied
    if isinstance(node, list):
        return [tree_copy(item) for item in node]
    return node


def _find_returned(func: types.FunctionType) -> ast.expr | None:
    try:
        lines, _ = inspect.findsource(func)
    except (OSError, TypeError):
        return None
    code = func.__code__
    first = code.co_firstlineno
    # The function's own block first: parsing a whole module to find one
    # function cost ~100 ms on the first emit in a 2,000-line file. A lambda
    # inside a statement that spans lines is no block of its own; its file is.
    for where in (_block, _functions):
        found = [node for node in where(tuple(lines), first)
                 if _named(node, code) and _same_code(node, func)]
        if found:
            break
    if len(found) != 1:
        return None  # none, or two look-alikes on one line: no guessing
    node = found[0]
    if isinstance(node, ast.Lambda):
        return node.body
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return body[0].value
    return None


Function = ast.FunctionDef | ast.Lambda


def _block(lines: tuple[str, ...], first: int) -> list[Function]:
    """The ``def`` and ``lambda`` nodes starting on line ``first``, from that line's block.

    The block is what :func:`inspect.getblock` finds there: a decorated
    ``def`` and its body, or a lambda's logical line.
    """
    try:
        block = inspect.getblock(list(lines[first - 1:]))
    except Exception:  # a tokenize error: look in the whole file
        return []
    return _parsed_block(tuple(block))


@functools.lru_cache(maxsize=256)
def _parsed_block(block: tuple[str, ...]) -> list[Function]:
    try:
        tree = ast.parse(textwrap.dedent("".join(block)))
    except (SyntaxError, ValueError):  # a lambda inside a longer statement
        return []
    return _by_first_line(tree).get(1, [])


def _functions(lines: tuple[str, ...], first: int) -> list[Function]:
    """The ``def`` and ``lambda`` nodes of a whole file starting on line ``first``."""
    return _file_functions(lines).get(first, [])


@functools.lru_cache(maxsize=32)
def _file_functions(lines: tuple[str, ...]) -> dict[int, list[Function]]:
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return {}
    return _by_first_line(tree)


def _by_first_line(tree: ast.AST) -> dict[int, list[Function]]:
    """``tree``'s ``def`` and ``lambda`` nodes, by the line their code object starts on."""
    by_line: dict[int, list[Function]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.Lambda):
            # A decorated function's code starts on its first decorator.
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
            by_line.setdefault(first, []).append(node)
    return by_line


def _named(node: Function, code: types.CodeType) -> bool:
    args = node.args
    name = node.name if isinstance(node, ast.FunctionDef) else "<lambda>"
    return (name == code.co_name and len(args.posonlyargs) + len(args.args) == 1
            and (args.posonlyargs + args.args)[0].arg == code.co_varnames[0])


def _same_code(node: Function, func: types.FunctionType) -> bool:
    """Whether compiling ``node`` alone gives ``func``'s bytecode, names and constants."""
    code = func.__code__
    if isinstance(node, ast.Lambda):
        inner: ast.stmt = ast.Expr(node)
    else:
        inner = copy.copy(node)
        inner.decorator_list = []  # they run at definition, not in the function's code
    module = ast.Module([inner], type_ignores=[])
    if code.co_freevars:
        # Closure variables must be an enclosing function's locals, as they were.
        module = ast.parse("def _enclosing():\n" + "".join(
            f"    {v} = None\n" for v in code.co_freevars))
        enclosing = module.body[0]
        assert isinstance(enclosing, ast.FunctionDef)
        enclosing.body.append(inner)
    ast.fix_missing_locations(module)
    try:
        compiled = compile(module, code.co_filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return any(_equal(c, code) for c in _code_objects(compiled))


def _code_objects(code: types.CodeType) -> list[types.CodeType]:
    nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return nested + [c for n in nested for c in _code_objects(n)]


def _equal(a: types.CodeType, b: types.CodeType) -> bool:
    return (a.co_name == b.co_name and a.co_code == b.co_code and a.co_names == b.co_names
            and _same_constants(a.co_consts, b.co_consts) and a.co_varnames == b.co_varnames
            and a.co_freevars == b.co_freevars and a.co_argcount == b.co_argcount)


def _same_constants(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Equal constants of equal types: ``2 == 2.0``, ``1 == True``, ``0.0 == -0.0``.

    A file edited from ``x * 2`` to ``x * 2.0`` after its import must not
    pass for the code that runs.

    >>> _same_constants((2, "a"), (2, "a")), _same_constants((2,), (2.0,))
    (True, False)
    >>> _same_constants((0.0,), (-0.0,)), _same_constants(((1, 2),), ((1, True),))
    (False, False)
    """
    return len(a) == len(b) and all(map(_same_constant, a, b))


def _same_constant(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, types.CodeType):
        return _equal(a, b)
    if isinstance(a, tuple | frozenset):
        return len(a) == len(b) and all(
            map(_same_constant, sorted(a, key=repr), sorted(b, key=repr))
            if isinstance(a, frozenset) else map(_same_constant, a, b))
    if isinstance(a, float | complex):
        return repr(a) == repr(b)  # -0.0 and 0.0, and nan, told apart
    return bool(a == b)
