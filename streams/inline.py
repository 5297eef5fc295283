"""Write a simple user function's expression into fused code instead of calling it.

Fused code (:mod:`streams.fusion`) still pays one Python call per user
function and element, which is most of what a short chain such as
``filter(is_bid).map(euro)`` costs. A function whose whole body is one
``return <expression>`` is written out in place: the step ``x_2 = f_1(x_1)``
of ``def euro(b): return (b.auction, b.price * 0.908)`` becomes::

    try:
        x_2 = (x_1.auction, x_1.price * 0.908)
    except Exception as first_3:
        try:
            x_2 = f_1(x_1)  # the function's own exception, see below
            raise first_3
        except BaseException as error_4:
            if error_4.__context__ is first_3:
                error_4.__context__ = first_3.__context__
            raise

Operators ask for it through :meth:`streams.fusion.Fuser.apply`: ``map``,
``filter``, ``remove`` and the event-time windows' ``time`` and ``key``
functions do. A step that is this assignment alone (``map``'s, through
:meth:`streams.fusion.Fuser.assign`) needs no try statement of its own: the
fallback call's ``Exception`` goes to the node's error policy from the
handler above (``except Exception as error_4: ... return fail_5(x_1,
error_4)``), one jump an element fewer. So does a filter's, when its
predicate's expression is a bool (:func:`boolean`: a comparison by ``is``
or ``in``, a ``not``, ``isinstance()``...): the truth test of a bool cannot
raise, so the expression is tested where it is computed, ``if not (type(x_1)
is Bid): return None`` (:func:`passes`; a variable between cost 3-4% of
``filter(is_bid).map(euro)`` into a list); any other value's truth test (a
numpy array's raises) stays under the policy.

A function is inlined only when all of this holds:

* it is a plain Python function (a ``def``, optionally with a docstring, or a
  ``lambda``) of exactly one positional parameter, without defaults, called
  with no extra arguments;
* its source is found (:func:`inspect.findsource`; the block starting on
  its first line, else the whole file), exactly one ``def`` or ``lambda``
  there starts on its first line with its name and parameter,
  and compiling that one gives the function's own bytecode, names and
  constants (so an edited file, or two lambdas on a line, are not guessed);
* its expression uses only the parameter, global names, closure variables,
  constants, attribute access, subscripts and slices, arithmetic,
  comparisons, ``and``/``or``/``not``, conditional expressions, tuples,
  lists, sets and dicts of these, and calls of the builtins in
  :data:`SAFE_BUILTINS` (positional arguments only). No other call, no
  ``:=``, no comprehension or lambda (they open scopes of their own).

Names keep Python's meaning: a global is read from the function's own module
globals when the step runs (a name the module rebinds later is seen), a
closure variable through its cell (``nonlocal`` rebinding is seen). A global
is read as an attribute of its module (``queries_6.Bid``), which Python
caches where the name sits, where reading it so gives the same: the module is
a plain one in ``sys.modules`` with no ``__getattr__`` (it would answer for a
missing name, where the function raises NameError) and the name is not one
that the module type has (``__dict__``); otherwise the globals dict is
subscripted (``globals_6['Bid']``), several times slower. A module that gets
a ``__getattr__`` or another class after the graph first ran is not seen
until the graph changes. A
builtin is taken when the code is compiled, if the module has no global of
that name then: testing the module's globals again for every element costs
more than the call saved, so a module that shadows a builtin only after the
graph first ran is not seen until the graph changes. Everything is renamed
to the fused code's fresh names, so nothing clashes. Likewise, a function
whose ``__code__`` is replaced in place (IPython's ``%autoreload`` does that)
keeps running its old expression until the graph changes.

Errors stay the user's: when the expression raises, the function itself is
called on the same element, so the exception the node's policy gets, its
type, message and traceback through the user's function, is the one the
call gives; it is not chained to the expression's (its ``__context__`` is
what it would have been). Operations on the element (an attribute a class
computes, an ``__add__``) run again in that call, which only happens for an
element that fails. Where the call succeeds (the expression changed the
element: ``max(it)`` consumed an iterator before failing on a string in it),
the expression's exception is the element's: it failed, as the function
alone would have, never a value computed from what was left. A try block
costs nothing on Python 3.11+ until something raises.

Set ``STREAMS_NO_INLINE=1`` in the environment (or :data:`enabled` to False)
to call every function, as before: a debugger's breakpoint or a coverage
tool then sees the function run. ``STREAMS_NO_FUSION=1`` turns this off too.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import os
import sys
import types
from collections.abc import Callable
from typing import Any

from .inline_source import returned_expression, tree_copy

__all__ = ["SAFE_BUILTINS", "assignment", "boolean", "enabled", "expression", "passes"]

#: False calls every user function (``STREAMS_NO_INLINE=1``).
enabled = os.environ.get("STREAMS_NO_INLINE", "") in ("", "0")

#: Builtins an inlined expression may call: they only compute a value from
#: their arguments (``type`` with one argument only).
SAFE_BUILTINS = frozenset({
    "abs", "bool", "divmod", "float", "hash", "int", "isinstance", "len", "max", "min",
    "pow", "repr", "round", "str", "type",
})

#: Expression nodes an inlined expression may contain, besides calls and names.
_PLAIN_NODES = (
    ast.Constant, ast.Attribute, ast.Subscript, ast.Slice, ast.BinOp, ast.UnaryOp,
    ast.BoolOp, ast.Compare, ast.IfExp, ast.Tuple, ast.List, ast.Set, ast.Dict,
    ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.Load,
)

_FLAGS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_GENERATOR | \
    inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


def assignment(target: str, func: Any, arg: str, call: str,
               bind: Callable[[Any, str], str], fresh: Callable[[str], str],
               failed: Callable[[str], str] | None = None) -> str | None:
    """Statements setting ``target`` to ``func(arg)`` without calling it, or None.

    ``call`` is the expression calling ``func`` (the fallback), ``bind`` as
    for :func:`expression`, ``fresh(hint)`` a new variable name.
    ``failed(name)``: statements taking the call's ``Exception`` named
    ``name`` (a node's error policy); given, that exception goes there from
    this very try statement, so that a step made of this assignment alone
    needs no try statement of its own (one jump an element fewer).

    Examples
    --------
    >>> print(assignment("y", lambda r: r.a + 1, "x", "f(x)", None, lambda hint: hint))
    try:
        y = x.a + 1
    except Exception as first:
        try:
            y = f(x)
            raise first
        except BaseException as error:
            if error.__context__ is first:
                error.__context__ = first.__context__
            raise
    >>> text = assignment("y", lambda r: -r, "x", "f(x)", None, lambda hint: hint,
    ...                   lambda e: f"return fail(x, {e})")
    >>> print(*text.splitlines()[6:10], sep=chr(10))  # then as above
        except Exception as error:
            if error.__context__ is first:
                error.__context__ = first.__context__
            return fail(x, error)
    """
    value = expression(func, arg, bind)
    if value is None:
        return None
    return _with_fallback(f"{target} = {value}", f"{target} = {call}", "", fresh, failed)


def passes(keep: str, negate: str, func: Any, arg: str, call: str,
           bind: Callable[[Any, str], str], fresh: Callable[[str], str],
           failed: Callable[[str], str]) -> str | None:
    """Statements returning None where ``func(arg)`` drops the element, or None.

    For a filter's predicate that :func:`boolean` holds for (its truth test
    cannot raise): its expression is tested where it is computed, with no
    variable between (a store and a load an element fewer); the fallback
    call's result, named ``keep``, is tested after that call. ``negate`` is
    ``"not "`` to keep the elements the predicate is true for (``filter``),
    ``""`` to drop them (``remove``). The other arguments are as for
    :func:`assignment`.

    Examples
    --------
    >>> lines = passes("k", "not ", lambda e: type(e) is int, "x", "f(x)", lambda o, h: h,
    ...                lambda hint: hint, lambda e: f"return fail(x, {e})").splitlines()
    >>> print(*lines[:5], "    ...", *lines[-2:], sep=chr(10))  # the fallback as above
    try:
        if not (type(x) is int):
            return None
    except Exception as first:
        try:
        ...
        if not k:
            return None
    """
    value = expression(func, arg, bind)
    if value is None:
        return None
    ending = f"if {negate}{{}}:\n    return None"
    return _with_fallback(ending.format(f"({value})"), f"{keep} = {call}",
                          ending.format(keep), fresh, failed)


def _with_fallback(computed: str, called: str, after: str, fresh: Callable[[str], str],
                   failed: Callable[[str], str] | None) -> str:
    """``computed`` in a try statement; where it raises, ``called``, then ``after``."""
    first, error = fresh("first"), fresh("error")
    # The call's exception must not look raised while handling the
    # expression's: its context is the one the expression's had, as if the
    # function had been called in the first place.
    restore = (f"        if {error}.__context__ is {first}:\n"
               f"            {error}.__context__ = {first}.__context__\n")
    handled = "" if failed is None else (
        f"    except Exception as {error}:\n{restore}"
        + "".join(f"        {line}\n" for line in failed(error).splitlines()))
    # A call that succeeds where the expression raised ran on an element the
    # expression changed (an iterator it consumed, a property with effects):
    # the element failed, as the function alone would have failed on it.
    return ("try:\n" + "".join(f"    {line}\n" for line in computed.splitlines())
            + f"except Exception as {first}:\n"
            f"    try:\n        {called}\n        raise {first}\n"
            f"{handled}"
            f"    except BaseException as {error}:\n{restore}"
            f"        raise"
            + "".join(f"\n    {line}" for line in after.splitlines()))


def expression(func: Any, arg: str, bind: Callable[[Any, str], str]) -> str | None:
    """The text of an expression computing ``func(arg)``, or None when it must be called.

    ``bind(obj, hint)`` gives a name under which the fused code sees
    ``obj``; the text reads the function's globals and cells through such
    names.

    Examples
    --------
    >>> names = {}
    >>> def bind(obj, hint):
    ...     return names.setdefault(hint, f"{hint}_{len(names)}")
    >>> expression(lambda r: (r.a, -r.b), "x", bind)
    '(x.a, -x.b)'
    >>> expression(lambda r: print(r), "x", bind) is None
    True
    """
    if not enabled or not _plain(func):
        return None
    returned = returned_expression(func)
    if returned is None or not _allowed(returned, func):
        return None
    # A copy: the parsed file is cached, and the renaming rewrites the tree.
    return ast.unparse(_Rename(func, arg, bind).visit(tree_copy(returned)))


def boolean(func: Any) -> bool:
    """Whether ``func`` is written in place (:func:`expression`) and always gives a bool.

    Its value is then a comparison by ``is``, ``is not``, ``in`` or ``not
    in``, a ``not``, ``isinstance()`` or ``bool()``, or ``and``/``or`` of
    these: a filter's truth test of it cannot raise.

    Examples
    --------
    >>> boolean(lambda e: type(e) is int), boolean(lambda e: e > 0)
    (True, False)
    """
    if not enabled or not _plain(func):
        return False
    returned = returned_expression(func)
    return returned is not None and _allowed(returned, func) and _is_bool(returned)


_BOOL_COMPARISONS = (ast.Is, ast.IsNot, ast.In, ast.NotIn)


def _is_bool(node: ast.expr) -> bool:
    if isinstance(node, ast.Compare):
        return all(isinstance(op, _BOOL_COMPARISONS) for op in node.ops)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.Not)
    if isinstance(node, ast.BoolOp):
        return all(_is_bool(value) for value in node.values)
    if isinstance(node, ast.Call):  # _allowed: a builtin's, and not shadowed
        return isinstance(node.func, ast.Name) and node.func.id in ("bool", "isinstance")
    return isinstance(node, ast.Constant) and isinstance(node.value, bool)


def _plain(func: Any) -> bool:
    """A Python function of one positional parameter, no defaults, no generator."""
    if not isinstance(func, types.FunctionType):
        return False
    code = func.__code__
    return (code.co_argcount == 1 and not code.co_kwonlyargcount
            and not code.co_flags & _FLAGS and not func.__defaults__
            and not func.__kwdefaults__)


def _allowed(expr: ast.expr, func: types.FunctionType) -> bool:
    """Whether every part of ``expr`` is one the module docstring lists."""
    code = func.__code__
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                return False
        elif isinstance(node, ast.Call):
            callee = node.func
            if not (isinstance(callee, ast.Name) and callee.id in SAFE_BUILTINS
                    and callee.id not in code.co_varnames + code.co_freevars
                    and callee.id not in func.__globals__
                    and _builtins(func).get(callee.id) is getattr(builtins, callee.id)
                    and not node.keywords
                    and not any(isinstance(a, ast.Starred) for a in node.args)
                    and (callee.id != "type" or len(node.args) == 1)):
                return False
        elif isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                return False  # ``{**d}``
        elif not isinstance(node, _PLAIN_NODES):
            return False
    return True


def _builtins(func: types.FunctionType) -> dict[str, Any]:
    found = getattr(func, "__builtins__", builtins.__dict__)
    return found if isinstance(found, dict) else vars(found)


class _Rename(ast.NodeTransformer):
    """Turn the function's names into the fused code's: the argument, cells, globals."""

    def __init__(self, func: types.FunctionType, arg: str,
                 bind: Callable[[Any, str], str]) -> None:
        code = func.__code__
        self.param = code.co_varnames[0]
        self.arg = arg
        self.cells = dict(zip(code.co_freevars, func.__closure__ or (), strict=True))
        self.globals = func.__globals__
        self.module = _module_of(self.globals)
        self.builtins = _builtins(func)
        self.bind = bind

    def visit_Name(self, node: ast.Name) -> ast.expr:
        name = node.id
        if name == self.param:
            return ast.Name(self.arg, ast.Load())
        if name in self.cells:
            cell = ast.Name(self.bind(self.cells[name], "cell"), ast.Load())
            return ast.Attribute(cell, "cell_contents", ast.Load())
        if name not in self.globals and name in self.builtins:
            # Resolved now: a test of the module's globals on every element
            # costs more than the call saved (see the module docstring).
            hint = "builtin" if name.startswith("_") else name  # fused_loop's names start with _
            return ast.Name(self.bind(self.builtins[name], hint), ast.Load())
        if self.module is not None and not hasattr(types.ModuleType, name):
            # An attribute of the module: Python caches where the name sits
            # in its dict, a subscript hashes and probes at every element.
            module = ast.Name(self.bind(self.module, _hint(self.module)), ast.Load())
            return ast.Attribute(module, name, ast.Load())
        namespace = ast.Name(self.bind(self.globals, "globals"), ast.Load())
        return ast.Subscript(namespace, ast.Constant(name), ast.Load())


def _module_of(namespace: dict[str, Any]) -> types.ModuleType | None:
    """The plain module whose dict ``namespace`` is, if reading its attributes reads that dict.

    A module's ``__getattr__`` would answer for a missing global (the
    function raises NameError), a module subclass may intercept any name.
    """
    module = sys.modules.get(namespace.get("__name__"))  # type: ignore[arg-type]
    if type(module) is not types.ModuleType or vars(module) is not namespace \
            or "__getattr__" in namespace:
        return None
    return module


def _hint(module: types.ModuleType) -> str:
    """A readable name for ``module`` in fused code (fused_loop's names start with _)."""
    last = module.__name__.rpartition(".")[2]
    return last if last.isidentifier() and not last.startswith("_") else "module"
