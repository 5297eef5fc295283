"""A source's loop compiled together with its fused push function.

A synchronous source that loops over its items (``from_iterable``) would
call its compiled push function (:mod:`streams.fusion`) once per item: a
Python call, and the loop's own bookkeeping, cost more than a short chain
itself. Here the push function's body is written *into* the loop::

    def _loop(_it, _src, _push, _counted, *, f_1=f_1, results_2=results_2):
        _n = 0
        try:
            for _n, x_1 in _enumerate(_it, 1):
                try:
                    if _src._interrupted:        # stop(), or the graph changed
                        if _src.stopped:
                            _n -= 1              # read, not gone through
                            _src._unsent = (x_1,)
                            return _STOPPED
                        return _src._push(x_1)   # new code from here
                    <the push function's body, each ``return None`` turned
                     into ``continue``, each other ``return v`` into
                     ``_p = v; if _p is not None: return _p`` then ``continue``>
                except BaseException:
                    _n -= 1              # this item did not go through
                    _src._unsent = (x_1,)
                    raise
            return _EXHAUSTED
        finally:
            _counted(_n)                 # the source's offset

One test an item watches for both a stop and a change of the graph: the
source's ``_interrupted`` flag, which :meth:`~streams.sources.base.Source.stop`
sets, and so does everything that replaces the source's push function (a
change of the graph below it, :func:`streams.fusion.invalidate`, which
closing and destroying a node go through; a backlog of pending work,
:mod:`streams.backlog`). :func:`take_push` clears it before each loop (a
stopped source's stays set), then takes the push function, so a change in
between is not missed. Testing ``stopped`` and comparing push functions,
once each an item, cost 13 ns an item against 4 ns for the flag: about 6%
of ``filter -> map`` into a list. Setting ``stopped`` (a property, as
streamz code may set it) raises the flag as ``stop()`` does.

The names the body reads from its namespace (user functions, the sink's
list, the module a global is read from) are the loop's keyword defaults:
locals, read without a dictionary look-up. That is the same as reading the
namespace: its names are bound once, when the code is compiled, and never
rebound (a global of the user's module is still read from the module at
every item, see :mod:`streams.inline`). The loop is compiled from a tree
whose ``try`` statements carry their first statement's line: a ``try:`` line
of its own costs an instruction an item, and a traceback never stops on
one (a debugger stepping through does not either).

Over a list or a tuple the loop counts nothing: ``for x_1 in _it:``, and
the number of items that went through is read from the iterator's position
when the loop ends (:func:`drive`; ``_n`` is then 0, or -1 when the last
item read did not go through). Numbering every item cost an integer
allocation and a tuple unpacking per item, an eighth of a short chain. A
list iterator forgets its index once it runs out: the source then stands at
the list's end, so a list cut, during the run, below the position reached
counts as read to its (new) end, where the numbering loop counted the items
read.

An item that did not go through, or whose pending work is returned (a
pending result also keeps its item there), is kept in ``_src._unsent``:
from an iterator, which cannot be read again, a source sends it first when
started again (``from_iterable``). :func:`drive` forgets it once its work is
done.

Nothing else changes: items still go through the whole graph one at a
time, depth first, user functions are called in the same order, and pending
work (a coroutine sink) is handed back to :func:`drive`, which finishes it
before the next item, exactly as the source's own loop does. A change of the
graph while the loop runs (a sink connecting a node) is seen before the next
item; from there the new code runs.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterator
from itertools import islice, repeat
from types import CodeType
from typing import TYPE_CHECKING, Any

from . import fusion

if TYPE_CHECKING:
    from .sources.base import Source

__all__ = ["EXHAUSTED", "STOPPED", "counting", "drive", "loop_for", "skip", "take_push"]

#: What a loop (:func:`loop_for`) returns when its items are exhausted, or the source stopped.
EXHAUSTED = object()
STOPPED = object()

Loop = Callable[[Iterator[Any], Any, Callable[[Any], Any], Callable[[int], None]], Any]


def drive(source: Source, items: Iterator[Any], counted: Callable[[int], None]) -> bool:
    """Push every item of ``items`` from ``source`` downstream, in compiled loops.

    ``counted(n)`` is told how many items went through (also after a
    failure, which does not count the failing item). Returns False when the
    source was stopped (``source.stopped``), True when ``items`` ran out.
    A list's or a tuple's iterator is looped over without counting (see the
    module docstring); once it ran out, every item up to the sequence's
    length then counts as read.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream.from_iterable([])
    >>> L = source.map(str).sink_to_list()
    >>> done = []
    >>> source.stopped = False
    >>> drive(source, iter([1, 2]), done.append), L, sum(done)
    (True, ['1', '2'], 2)
    """
    __tracebackhide__ = True  # pytest, IPython: show the user's frames
    from .clock import run_sync

    positional, counted = counting(items, counted)
    while True:
        push = take_push(source)
        outcome = loop_for(push, positional)(items, source, push, counted)
        if outcome is EXHAUSTED:
            return True
        if outcome is STOPPED:
            return False
        if outcome is not None:
            try:
                run_sync(outcome)  # the item's pending work, before the next item
            except BaseException:
                counted(-1)  # its work failed: a new start() reads it again
                raise
            source._unsent = None  # the item the loop kept with its work went through


def counting(items: Iterator[Any], counted: Callable[[int], None]
             ) -> tuple[bool, Callable[[int], None]]:
    """Whether a loop over ``items`` numbers nothing, and the ``counted`` to give it.

    A list's or a tuple's iterator is looped over without numbering (see
    the module docstring): its ``counted`` then reads the iterator's
    position, and still tells ``counted`` how many items went through.

    Examples
    --------
    >>> done = []
    >>> positional, moved = counting(iter([1, 2, 3]), done.append)
    >>> positional, counting(iter(range(3)), done.append)[0]
    (True, False)
    """
    if type(items) in _POSITIONAL and len(items.__reduce__()) == 3:
        return True, _Moved(items, counted)
    return False, counted


def take_push(source: Source) -> Callable[[Any], Any]:
    """``source``'s push function for a new loop, its interrupt flag cleared.

    Cleared first, then taken: a change of the graph in between leaves a
    push function to recompile, one after it sets the flag again. A stopped
    source keeps the flag set: its loop reads one item and stops there, as
    the source's own loop does.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream.from_iterable([])
    >>> source.stopped = False
    >>> take_push(source)(1), source._interrupted
    (None, False)
    >>> source.stop()
    >>> take_push(source)(1), source._interrupted
    (None, True)
    """
    source._interrupted = False
    push = source._pusher()
    if source.stopped:
        source._interrupted = True
    return push


def loop_for(push: Callable[[Any], Any], positional: bool = False) -> Loop:
    """The loop that runs ``push``'s body for each item (compiled once per ``push``).

    A push function that was not compiled by :mod:`streams.fusion` (a closed
    or destroyed node's) is called from a loop of the same shape.
    ``positional``: the loop does not number the items; its ``_counted(n)``
    gets only 0, or -1 when the last item read did not go through (see
    :func:`drive`).
    """
    namespace = getattr(push, "__globals__", None)
    source = None if namespace is None else namespace.get(fusion.SOURCE_KEY)
    if source is None or namespace is None:
        return _calling_loop_positional if positional else _calling_loop
    key = _LOOP_KEYS[positional]
    loop: Loop | None = namespace.get(key)
    if loop is None:
        loop = _compile_loop(source, push.__name__, namespace, positional)
        namespace[key] = loop
    return loop


_LOOP_KEYS = {False: "__streams_loop__", True: "__streams_positional_loop__"}

#: Iterators whose ``__reduce__`` tells their position: ``(iter, (seq,), index)``
#: until they run out, ``(iter, (empty,))`` after.
_POSITIONAL: frozenset[type] = frozenset({type(iter([])), type(iter(()))})


def skip(items: Iterator[Any], n: int) -> Iterator[Any]:
    """``items`` past their next ``n``; a list's or tuple's iterator stays one (see :func:`drive`).

    Examples
    --------
    >>> it = skip(iter([1, 2, 3]), 2)
    >>> type(it).__name__, list(it)
    ('list_iterator', [3])
    >>> list(skip(iter(range(5)), 3))
    [3, 4]
    """
    if type(items) in _POSITIONAL:
        items.__setstate__(n)  # type: ignore[attr-defined]
        return items
    return islice(items, n, None)


class _Moved:
    """``counted`` for a loop that does not number its items: reads the iterator's position."""

    __slots__ = ("at", "counted", "items", "sequence")

    def __init__(self, items: Iterator[Any], counted: Callable[[int], None]) -> None:
        state: Any = items.__reduce__()
        self.sequence: list[Any] | tuple[Any, ...] = state[1][0]
        self.at: int = state[2]
        self.items = items
        self.counted = counted

    def __call__(self, n: int) -> None:
        state: Any = self.items.__reduce__()
        # Run out: the iterator forgot its index, it stood at the end.
        now = state[2] if len(state) == 3 else len(self.sequence)
        self.counted(now - self.at + n)
        self.at = now


# The loop's own names start with "_": the fused code's names never do
# (they are ``hint_N``), so they cannot collide.
_HEAD = """\
def _loop(_it, _src, _push, _counted{defaults}):
    _n = 0
    try:
        {head}
            try:
                if _src._interrupted:
                    if _src.stopped:
                        _n -= 1
                        _src._unsent = ({x},)
                        return _STOPPED
                    _p = _src._push({x})
                    if _p is not None:
                        _src._unsent = ({x},)
                    return _p
                pass
            except BaseException:
                _n -= 1
                _src._unsent = ({x},)
                raise
        return _EXHAUSTED
    finally:
        _counted(_n)
"""


class _Returns(ast.NodeTransformer):
    """Turn the body's ``return v`` statements into the loop's next step."""

    def __init__(self, x: str) -> None:
        self.x = x  # the item's name

    def visit_Return(self, node: ast.Return) -> Any:
        value = node.value
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            return ast.Continue()
        # return v  ->  _p = v; if _p is not None: _src._unsent = (x,); return _p; continue
        return [
            ast.Assign(targets=[ast.Name("_p", ast.Store())], value=value),
            ast.If(
                test=ast.Compare(ast.Name("_p", ast.Load()), [ast.IsNot()],
                                 [ast.Constant(None)]),
                body=[*ast.parse(f"_src._unsent = ({self.x},)").body,
                      ast.Return(ast.Name("_p", ast.Load()))], orelse=[]),
            ast.Continue(),
        ]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        return node  # a nested function's returns are its own

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]
    visit_Lambda = visit_FunctionDef  # type: ignore[assignment]


def _inlinable(body: list[ast.stmt]) -> bool:
    """Whether every ``return`` of ``body`` can become a step of the item loop.

    A ``return`` inside a loop of the body's own would turn into a
    ``continue`` of that inner loop.
    """
    return not any(isinstance(n, ast.For | ast.While | ast.AsyncFor)
                   and any(isinstance(r, ast.Return) for r in ast.walk(n))
                   for stmt in body for n in ast.walk(stmt))


def _as_list(visited: Any) -> list[ast.stmt]:
    return visited if isinstance(visited, list) else [visited]


_FOR = {False: "for _n, {x} in _enumerate(_it, 1):", True: "for {x} in _it:"}


def _compile_loop(source: str, name: str, namespace: dict[str, Any], positional: bool) -> Loop:
    # Its first line names the node; the rest, and the names bound, make the loop.
    bound = frozenset(n for n in namespace if not n.startswith("_"))
    text, code = _loop_code(source.partition("\n")[2], name, positional, bound)
    namespace.update(_enumerate=enumerate, _STOPPED=STOPPED, _EXHAUSTED=EXHAUSTED)
    exec(fusion.with_filename(code, fusion.remember(text)), namespace)
    compiled: Loop = namespace.pop("_loop")
    return compiled


@functools.lru_cache(maxsize=64)
def _loop_code(source: str, name: str, positional: bool,
               bound: frozenset[str]) -> tuple[str, CodeType]:
    """The text and code of the loop for push function ``name`` of ``source``.

    Kept for the same fused code (a pipeline built again: each run of a
    benchmark, a test; a Kafka source's push function after a graph change):
    writing and compiling a loop costs about 2 ms.
    """
    module = ast.parse(source)
    push = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == name)
    x = push.args.args[0].arg
    body = push.body
    if not _inlinable(body):
        # Written by an operator we cannot see into: call it per item instead.
        body = ast.parse(f"return {name}({x})").body
    loop = ast.parse(_HEAD.format(head=_FOR[positional].format(x=x), x=x,
                                  defaults=_defaults(body, bound))).body[0]
    assert isinstance(loop, ast.FunctionDef)
    outer = loop.body[1]
    assert isinstance(outer, ast.Try)
    for_loop = outer.body[0]
    assert isinstance(for_loop, ast.For)
    guard = for_loop.body[0]
    assert isinstance(guard, ast.Try)
    returns = _Returns(x)
    guard.body[1:] = [new for stmt in body for new in _as_list(returns.visit(stmt))]
    tree = ast.fix_missing_locations(ast.Module(body=[loop], type_ignores=[]))
    text = f"# fused loop of {name}\n{ast.unparse(tree)}\n"
    return text, compile(_try_on_first_line(ast.parse(text)), "<fused loop>", "exec")


def _defaults(body: list[ast.stmt], bound: frozenset[str]) -> str:
    """``, *, a=a, b=b``: the names ``body`` reads of those ``bound``, as keyword defaults."""
    names = sorted({n.id for stmt in body for n in ast.walk(stmt)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in bound})
    return ", *" + "".join(f", {n}={n}" for n in names) if names else ""


def _try_on_first_line(tree: ast.Module) -> ast.Module:
    """``tree`` with each ``try`` on its first statement's line: no instruction for its own."""
    tries = [node for node in ast.walk(tree) if isinstance(node, ast.Try)]
    for node in reversed(tries):  # inner ones first: ``try:`` may open with a ``try:``
        node.lineno = node.body[0].lineno
    return tree


def _calling_loop(items: Iterator[Any], source: Any, push: Callable[[Any], Any],
                  counted: Callable[[int], None], numbered: bool = True) -> Any:
    """The compiled loop's protocol, calling ``push`` per item (uncompiled push)."""
    n = 0
    try:
        for n, x in enumerate(items, 1) if numbered else zip(repeat(0), items):
            if source.stopped:
                n -= 1
                source._unsent = (x,)
                return STOPPED
            try:
                p = push(x) if source._push is push else source._push(x)
            except BaseException:
                n -= 1
                source._unsent = (x,)
                raise
            if p is not None:
                source._unsent = (x,)
                return p
            if source._push is not push:
                return None  # the graph changed: new code for the rest
        return EXHAUSTED
    finally:
        counted(n)


def _calling_loop_positional(items: Iterator[Any], source: Any, push: Callable[[Any], Any],
                             counted: Callable[[int], None]) -> Any:
    return _calling_loop(items, source, push, counted, numbered=False)
