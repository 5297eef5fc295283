"""Compile a node's downstream graph into one Python function.

Calling ``update`` on every node costs a method call, a loop over
downstreams and attribute look-ups per element and per node: about three
times a hand-written loop. Instead, when a node first emits, the synchronous
operators below it are *fused*: their steps are written out as straight-line
Python source, with each user function bound as a local name, and compiled
with ``exec``. A chain ``map -> filter -> scan -> sink`` becomes::

    def push_0(x0):
        try:
            x1 = f_1(x0)
        except Exception as e:
            return fail_1(x0, e)
        ...

A user function whose body is one simple ``return <expression>`` is not even
called: :mod:`streams.inline` writes its expression in place of the call.

Nodes that cannot be fused (several upstreams, coroutine functions,
user-defined ``update``) are called through their ``update`` method, so the
generic protocol stays the reference behaviour. A fan-out becomes one
function per branch, called in order, which is the order streamz uses.

The compiled function is cached on the node and dropped whenever the graph
around it changes (see ``streams.core._invalidate``). Its source is
registered with :mod:`linecache`, so tracebacks and debuggers show the lines
that ran. Set ``STREAMS_NO_FUSION=1`` in the environment (or use
:func:`unfused`) to run every node through its ``update`` method instead:
the reference behaviour, for debugging.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import operator
import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType
from typing import TYPE_CHECKING, Any

from . import inline
from .backlog import Backlog
from .pending import failing_after, gather_branches

if TYPE_CHECKING:
    from .core import Stream

__all__ = ["Fuser", "compile_push", "compiled", "invalidate", "is_fusable", "unfused"]

#: False runs every node through ``update`` (``STREAMS_NO_FUSION=1``, :func:`unfused`).
enabled = os.environ.get("STREAMS_NO_FUSION", "") in ("", "0")


@contextmanager
def unfused() -> Iterator[None]:
    """Run the nodes compiled inside the block unfused, each through its ``update``.

    Examples
    --------
    >>> from streams import Stream
    >>> with unfused():
    ...     source = Stream()
    ...     L = source.map(abs).sink_to_list()
    ...     source.emit(-1)
    >>> L
    [1]
    """
    global enabled
    saved, enabled = enabled, False
    try:
        yield
    finally:
        enabled = saved

_fusable_types: dict[type, bool] = {}

#: Nodes holding compiled code; while it is empty (building a graph),
#: topology changes cost nothing.
compiled: weakref.WeakSet[Stream[Any]] = weakref.WeakSet()


def invalidate(node: Stream[Any]) -> None:
    """Drop compiled push functions that a change at ``node`` affects.

    A node's compiled code inlines the steps below it, so a change at
    ``node`` (its downstreams, its state shape, its closing) affects the code
    of ``node`` and of every node upstream of it; nothing else. Code is
    recompiled lazily, on the next element.
    """
    if not compiled:
        return
    seen: set[int] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n in compiled:
            compiled.discard(n)
            n._interrupted = True  # a compiled loop over ``n`` takes the new code
            owner = getattr(n._push, "__self__", None)
            push = owner.saved if isinstance(owner, Backlog) else n._push
            # Code running now (a sink of it made the change) takes the
            # graph as it is at its next fan-out branch.
            namespace = getattr(push, "__globals__", {})
            for name, d, up in namespace.get(BRANCHES_KEY, ()):
                namespace[name] = functools.partial(_through_graph, d, up)
            if not n._closed:
                if isinstance(owner, Backlog):
                    owner.saved = n._compile_and_push  # keep queued emits in order
                else:
                    n._push = n._compile_and_push
        todo.extend(n.upstreams)


def recompiled_when_set(slot: str, doc: str,
                        then: Callable[[Any, Any], None] | None = None) -> Any:
    """A property kept in ``slot`` whose new value compiled code takes.

    Compiled code holds a node's function (``map``'s ``func``): setting it
    after the first element (``node.func = other``, as streamz users may)
    drops that code (:func:`invalidate`), so the next element runs the new
    one, as an uncompiled node would. Read in the hot path through ``slot``.
    ``then(node, value)``: what else the node derives from the value.
    """

    def set_value(node: Any, value: Any) -> None:
        setattr(node, slot, value)
        if then is not None:
            then(node, value)
        if hasattr(node, "upstreams"):  # built: code may hold the old value
            invalidate(node)

    return property(operator.attrgetter(slot), set_value, doc=doc)


def compile_installed(node: Stream[Any]) -> Callable[[Any], Any]:
    """Compile ``node``'s push function and put it where the node's push lives.

    That is ``node._push``; while a :class:`~streams.backlog.Backlog` queues
    the node's emits, the backlog's ``saved`` push, which runs the queued
    elements: one compiled there (the graph changed while they queued) must
    not go through the backlog, where it would wait behind itself.

    A push already there is returned as it is: a source that took the node's
    push into a local before the first element (``from_redis``, a batch at a
    time) calls this for every element of that batch, and compiling for each
    cost a Redis pipeline 0.64x its rate.
    """
    owner = getattr(node._push, "__self__", None)
    backlog = owner if isinstance(owner, Backlog) else None
    installed = node._push if backlog is None else backlog.saved
    if installed != node._compile_and_push:
        return installed
    push = compile_push(node)
    compiled.add(node)
    if backlog is None:
        node._push = push
    else:
        backlog.saved = push
    return push


def is_fusable(node: Stream[Any]) -> bool:
    """Whether ``node``'s step can be inlined into compiled code.

    A class is fusable when the class that defines the ``update`` it uses
    also defines ``_fuse``: a subclass that overrides ``update`` (a streamz
    plugin, say) is always called through it. An instance may still opt out
    through ``_fusable()`` (a coroutine function, for instance).
    """
    if not enabled:
        return False
    klass = type(node)
    ok = _fusable_types.get(klass)
    if ok is None:
        from .core import Stream

        ok = False
        for base in klass.__mro__:
            if "update" in base.__dict__:
                ok = "_fuse" in base.__dict__
                break
        # An overridden ``_emit`` must see every output: no inlining past it.
        ok = ok and klass._emit is Stream._emit
        _fusable_types[klass] = ok
    return ok and bool(node._fusable())  # type: ignore[attr-defined]


def _gather(results: tuple[Any, ...]) -> Any:
    return gather_branches(list(results))


def _nothing(x: Any) -> None:
    return None


def _through_graph(d: Stream[Any], node: Stream[Any], x: Any) -> Any:
    """A fan-out's branch to ``d``, node by node through the graph as it is now.

    What :func:`invalidate` puts in place of the branches of code that may be
    running: a sink on one branch that connected, removed or closed a node
    below a later branch changes the graph for the element on its way too,
    as unfused code does (and at no cost to code that is not running).
    """
    return d._push_closed(x) if d._closed else d.update(x, node)


class Fuser:
    """Writes the source of compiled push functions.

    Operators implement ``_fuse(fuser, x)``: they write their step for the
    input variable named ``x`` with :meth:`step` and :meth:`line`, and return
    the name of the variable holding their output, or None when nothing goes
    downstream (sinks).
    """

    def __init__(self) -> None:
        #: The fan-outs' branch functions, by name, with the node each goes
        #: to and the node it leaves (see :func:`invalidate`).
        self.branches: list[tuple[str, Stream[Any], Stream[Any]]] = []
        self.namespace: dict[str, Any] = {"_gather": _gather, "_failing_after": failing_after,
                                          BRANCHES_KEY: self.branches}
        self._names: dict[int, str] = {}
        self._functions: list[list[str]] = []
        self._body: list[str] = []
        self._count = 0

    # -- helpers for operators -----------------------------------------

    def bind(self, obj: Any, hint: str = "v") -> str:
        """A name under which ``obj`` is visible to the compiled code."""
        key = id(obj)
        name = self._names.get(key)
        if name is None:
            name = self.fresh(hint)
            self._names[key] = name
            self.namespace[name] = obj
        return name

    def fresh(self, hint: str = "x") -> str:
        """A new, unused variable name."""
        self._count += 1
        return f"{hint}_{self._count}"

    def call(self, func: Any, arg: str, args: tuple[Any, ...] = (),
             kwargs: dict[str, Any] | None = None, hint: str = "f") -> str:
        """The expression calling ``func(arg, *args, **kwargs)``, names bound."""
        extra = ""
        if args:
            extra += f", *{self.bind(args, 'args')}"
        if kwargs:
            extra += f", **{self.bind(kwargs, 'kwargs')}"
        return f"{self.bind(func, hint)}({arg}{extra})"

    def apply(self, target: str, func: Any, arg: str, args: tuple[Any, ...] = (),
              kwargs: dict[str, Any] | None = None, hint: str = "f") -> str:
        """Statements setting ``target`` to ``func(arg, *args, **kwargs)``.

        A function that only returns a simple expression is written out in
        place, not called (see :mod:`streams.inline`): on a failure the
        function is called on the same element, for its own exception.
        """
        call = self.call(func, arg, args, kwargs, hint)
        inlined = self._inlined(target, func, arg, call, args, kwargs)
        return f"{target} = {call}" if inlined is None else inlined

    def assign(self, node: Stream[Any], x: str, target: str, func: Any,
               args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> None:
        """Write ``node``'s step setting ``target`` to ``func(x, *args, **kwargs)``.

        As ``step(node, x, apply(target, func, x, args, kwargs))``, in one
        try statement where the function is written in place: the
        exception of its fallback call goes to the policy from there.
        """
        call = self.call(func, x, args, kwargs)
        fail = self.bind(node._fail, "fail")
        inlined = self._inlined(target, func, x, call, args, kwargs,
                                lambda error: f"return {fail}({x}, {error})")
        if inlined is None:
            self.step(node, x, f"{target} = {call}")
        else:
            self.line(inlined)

    def keep_if(self, node: Stream[Any], x: str, negate: str, func: Any) -> bool:
        """Write ``node``'s test of ``func(x)``, a bool written in place, if it is one.

        The step returns None where the element is dropped (``negate``
        ``"not "``: where the value is false; ``""``: where it is true), with
        no variable between the expression and its test (see
        :func:`streams.inline.passes`); the fallback call's exception goes to
        ``node``'s policy. False, writing nothing, for any other function.
        """
        if not inline.boolean(func):
            return False
        fail = self.bind(node._fail, "fail")
        text = inline.passes(self.fresh("keep"), negate, func, x, self.call(func, x),
                             self.bind, self.fresh, lambda error: f"return {fail}({x}, {error})")
        assert text is not None  # boolean(func): its expression is written in place
        self.line(text)
        return True

    def _inlined(self, target: str, func: Any, arg: str, call: str, args: tuple[Any, ...],
                 kwargs: dict[str, Any] | None,
                 failed: Callable[[str], str] | None = None) -> str | None:
        if args or kwargs:
            return None
        return inline.assignment(target, func, arg, call, self.bind, self.fresh, failed)

    def line(self, code: str) -> None:
        """Write one statement (or a few, separated by newlines)."""
        self._body.extend("    " + c for c in code.splitlines())

    def step(self, node: Stream[Any], x: str, code: str) -> None:
        """Write ``code``, routing any exception to ``node``'s error policy.

        After a failure the element goes no further down this branch.
        """
        fail = self.bind(node._fail, "fail")
        self.line("try:")
        self._body.extend("        " + c for c in code.splitlines())
        self.line(f"except Exception as e:\n    return {fail}({x}, e)")

    # -- compilation -----------------------------------------------------

    def push_function(self, origin: Stream[Any], path: frozenset[int]) -> str:
        """Write a function pushing an element from ``origin`` downstream."""
        saved = self._body
        self._body = []
        name = self.fresh("push")
        x = self.fresh("x")
        self._chain_from(origin, x, path | {id(origin)})
        self._functions.append([f"def {name}({x}):", *self._body])
        self._body = saved
        return name

    def _chain_from(self, node: Stream[Any], x: str, path: frozenset[int]) -> None:
        downs = node.downstreams
        if not downs:
            self.line("return None")
        elif len(downs) == 1:
            self._chain(downs[0], node, x, path)
        else:
            results: list[str] = []
            for d in downs:
                branch = self._branch_function(d, node, path)
                self.branches.append((branch, d, node))
                r = self.fresh("r")
                if results:
                    # A later branch's failure must not drop the work an earlier
                    # one left pending (a coroutine sink's): it would never run.
                    self.line(f"try:\n    {r} = {branch}({x})\nexcept Exception as e:\n"
                              f"    return _failing_after([{', '.join(results)}], e)")
                else:
                    self.line(f"{r} = {branch}({x})")
                results.append(r)
            self.line(
                f"if {' is None and '.join(results)} is None:\n    return None\n"
                f"return _gather(({', '.join(results)},))"
            )

    def _branch_function(
        self, node: Stream[Any], who: Stream[Any], path: frozenset[int]
    ) -> str:
        saved = self._body
        self._body = []
        # A global, not one of the fused loop's bound locals: :func:`invalidate`
        # replaces it in the namespace while an element may be on its way.
        name = self.fresh("_branch")
        x = self.fresh("x")
        self._chain(node, who, x, path)
        self._functions.append([f"def {name}({x}):", *self._body])
        self._body = saved
        return name

    def _chain(
        self, node: Stream[Any], who: Stream[Any], x: str, path: frozenset[int]
    ) -> None:
        if node._closed:
            # Elements must not slip through a closed node: raise, naming it.
            self.line(f"return {self.bind(node._push_closed, 'closed')}({x})")
            return
        if id(node) in path or not is_fusable(node):
            update = self.bind(node.update, "update")
            self.line(f"return {update}({x}, {self.bind(who, 'node')})")
            return
        out = node._fuse(self, x)  # type: ignore[attr-defined]
        if out is None:
            self.line("return None")
            return
        self._chain_from(node, out, path | {id(node)})

    def source(self) -> str:
        return "\n".join("\n".join(f) for f in self._functions) + "\n"


def compile_push(node: Stream[Any]) -> Callable[[Any], Any]:
    """The function that pushes an element from ``node`` to its downstreams.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> L = source.map(str).sink_to_list()
    >>> push = compile_push(source)
    >>> push(1) is None, L
    (True, ['1'])
    """
    if not node.downstreams:
        return _nothing
    fuser = Fuser()
    name = fuser.push_function(node, frozenset())
    source = f"# fused code from {node._label()}\n{fuser.source()}"
    exec(with_filename(_compiled_source(source), remember(source)), fuser.namespace)
    # Kept for streams.fused_loop, which writes this code into a source's loop.
    fuser.namespace[SOURCE_KEY] = source
    push: Callable[[Any], Any] = fuser.namespace[name]
    return push


#: Where a compiled push function's namespace keeps its source text.
SOURCE_KEY = "__streams_source__"
#: Where it keeps its fan-outs' branches (:attr:`Fuser.branches`).
BRANCHES_KEY = "__streams_branches__"


_serial = itertools.count()
#: Fused sources kept in linecache: a ring of this many names, each reused
#: (a graph recompiles when it changes, and stages recompile per batch).
#: Names are overwritten, never deleted: ``linecache.checkcache()``, which
#: debuggers and tracebacks call from any thread, fails on a key deleted
#: while it iterates.
MAX_SOURCES = 512


@functools.lru_cache(maxsize=64)
def _compiled_source(source: str) -> CodeType:
    """``source`` compiled, kept for the same fused code.

    The same code comes back whenever a node's state is restored (its code
    may have specialised on the old state): on a Dask worker, a keyed
    stage's node is restored to each key group's state in turn, every batch,
    and compiling cost it about 7% of its time.
    """
    return compile(source, "<streams fused code>", "exec")


def with_filename(code: CodeType, filename: str) -> CodeType:
    """``code`` (and the code objects it holds) under ``filename``, for tracebacks."""
    consts = tuple(with_filename(c, filename) if isinstance(c, CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def remember(source: str) -> str:
    """Register fused ``source`` with linecache so tracebacks show its lines.

    Returns the file name to compile it under.
    """
    filename = f"<streams fused code {next(_serial) % MAX_SOURCES}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return filename
