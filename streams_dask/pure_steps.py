"""Which stateless steps may run more than once, each time with the same result.

The parts of a keyed round (:mod:`streams_dask.chain`) may each run the
stateless stage before them over the whole batch, rather than take its
result from a task of its own: only if running it again, in another process,
gives the same elements and does nothing else. A step that draws a random
number (key salting), reads the clock, or calls an API would make the parts
disagree about an element's key (it would be lost by one and counted by
another) or repeat its side effect once per part.

Whether a function is pure cannot be decided in general; this check is
conservative. A step passes if it needs no function (``pluck``,
``flatten``, ``filter(None)``: the core's own code), or if every function
it holds is one of a few pure builtins (:data:`PURE_BUILTINS`), or a plain
Python function whose bytecode

* calls nothing but those builtins (no method calls, no calls of
  arguments, imported functions or user classes, no keyword arguments,
  which would let ``max(key=...)`` call a function);
* stores nothing outside its locals: no global, attribute or item
  assignment, no in-place operator (``+=`` on a global list mutates it);
* imports nothing, yields nothing, defines no nested function (in Python
  3.11 a comprehension is one) and opens no ``with`` block;
* closes over immutable values only;
* uses a set (one it builds, or a constant, global or closure value) only
  to test membership (``x in {"a", "b"}``): the order of a set of strings
  depends on the process's hash seed, which workers started without a
  nanny (``dask worker --no-nanny``) do not share, so ``list({a, b})[0]``
  could differ from part to part.

Reading globals and attributes, indexing, arithmetic and comparisons are
taken to be pure, as they are for plain data; an element type whose
operators have side effects, or whose ``str()`` shows its address, is not
covered, nor a set the step finds in an element or an attribute. An opcode
this module does not know (a newer Python's) fails the check: the step then
runs once, in a task of its own whose output the client fetches and hands
on (see :mod:`streams_dask.runner`), which costs a round trip, never a result.
"""

from __future__ import annotations

import builtins
import dis
import inspect
import pickle
import sys
import types
from collections.abc import Iterable
from typing import Any

from streams.spec import NodeSpec
from streams.stage import StagePlan

__all__ = ["PURE_BUILTINS", "pure_function", "pure_step", "replicable"]

#: Builtins whose result depends on their arguments alone, and that call no
#: function they are given (``sorted``, ``map``, ``filter`` take one; ``hash``
#: and ``id`` differ from process to process).
PURE_BUILTINS: frozenset[Any] = frozenset({
    abs, all, any, bool, chr, divmod, float, int, isinstance, issubclass, len, list,
    max, min, ord, range, round, str, sum, tuple, type,
})

# Opcodes that touch nothing but the frame's own stack and locals, read a
# value, or branch. Calls are judged apart (see _calls_only_pure_builtins).
_PLAIN_OPS = frozenset({
    "CACHE", "NOP", "RESUME", "EXTENDED_ARG", "POP_TOP", "COPY", "SWAP", "END_FOR", "TO_BOOL",
    "LOAD_CONST", "RETURN_CONST", "RETURN_VALUE", "LOAD_FAST", "LOAD_FAST_CHECK",
    "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST", "STORE_FAST", "STORE_FAST_LOAD_FAST",
    "STORE_FAST_STORE_FAST", "DELETE_FAST", "LOAD_DEREF", "COPY_FREE_VARS", "LOAD_GLOBAL",
    "LOAD_ATTR", "BINARY_OP", "BINARY_SUBSCR", "BINARY_SLICE", "COMPARE_OP", "IS_OP",
    "CONTAINS_OP", "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "UNARY_POSITIVE",
    "BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_MAP", "BUILD_CONST_KEY_MAP",
    "BUILD_STRING", "BUILD_SLICE", "LIST_APPEND", "MAP_ADD", "LIST_EXTEND",
    "DICT_UPDATE", "DICT_MERGE", "LIST_TO_TUPLE", "FORMAT_VALUE",
    "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "CONVERT_VALUE", "UNPACK_SEQUENCE", "UNPACK_EX",
    "GET_ITER", "FOR_ITER", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
    "JUMP", "JUMP_NO_INTERRUPT", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
    "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
    "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP", "PRECALL", "CALL", "RAISE_VARARGS",
    "RERAISE", "PUSH_EXC_INFO", "POP_EXCEPT", "CHECK_EXC_MATCH", "LOAD_ASSERTION_ERROR",
})

_NOT_PLAIN = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
              | inspect.CO_ITERABLE_COROUTINE)

# From 3.12, LOAD_ATTR's low bit says it loads a method to call.
_METHOD_ATTR = sys.version_info >= (3, 12)


def _immutable(value: Any) -> bool:
    if value is None or value is Ellipsis or isinstance(value, (bool, int, float, complex, str,
                                                                bytes, range, type)):
        return True
    return isinstance(value, (tuple, frozenset)) and all(_immutable(v) for v in value)


def _global(func: types.FunctionType, name: str) -> Any:
    """The value of the global ``name`` as ``func`` reads it (its module's, else a builtin)."""
    if name in func.__globals__:  # a module's own ``len`` shadows the builtin
        return func.__globals__[name]
    table = getattr(func, "__builtins__", builtins.__dict__)
    table = table if isinstance(table, dict) else vars(table)
    return table.get(name)


def _builtin_named(func: types.FunctionType, name: str) -> bool:
    """Whether the global ``name`` read by ``func`` is a builtin of :data:`PURE_BUILTINS`."""
    return _pure_builtin(_global(func, name))


def _pure_builtin(value: Any) -> bool:
    try:
        return value in PURE_BUILTINS
    except TypeError:  # unhashable
        return False


def _holds_set(value: Any) -> bool:
    if isinstance(value, (set, frozenset)):
        return True
    return isinstance(value, tuple) and any(_holds_set(v) for v in value)


def _loaded(func: types.FunctionType, ins: dis.Instruction) -> Any:
    """The value a ``LOAD_CONST``, ``LOAD_DEREF`` or ``LOAD_GLOBAL`` (not of a call) pushes."""
    if ins.opname == "LOAD_CONST":
        return ins.argval
    if ins.opname == "LOAD_DEREF":
        cells = dict(zip(func.__code__.co_freevars, func.__closure__ or (), strict=True))
        cell = cells.get(ins.argval)
        return None if cell is None else cell.cell_contents
    if ins.opname == "LOAD_GLOBAL" and not (ins.arg is not None and ins.arg & 1):
        return _global(func, ins.argval)
    return None


def _calls_only_pure_builtins(func: types.FunctionType) -> bool:
    instructions = list(dis.get_instructions(func))
    for i, ins in enumerate(instructions):
        op = ins.opname
        if op not in _PLAIN_OPS:
            return False  # a method call, a store, an import, a yield, a nested function...
        following = instructions[i + 1].opname if i + 1 < len(instructions) else ""
        if (op == "BUILD_SET" or _holds_set(_loaded(func, ins))) and following != "CONTAINS_OP":
            return False  # a set's order may differ by process (see the module's docstring)
        if op == "BINARY_OP" and ins.argrepr.endswith("="):
            return False  # in place: may mutate what a global or the element holds
        if op == "LOAD_ATTR" and _METHOD_ATTR and ins.arg is not None and ins.arg & 1:
            return False
        if op == "LOAD_GLOBAL" and not (ins.arg is not None and ins.arg & 1) and not (
                _immutable(_global(func, ins.argval))):
            # A global read as a value must be a constant or a class: a module
            # (``sys.modules``), a generator a builtin would iterate, a dict
            # another call changes, differ from process to process or call to call.
            return False
        if op == "LOAD_GLOBAL" and ins.arg is not None and ins.arg & 1 and (
                not _builtin_named(func, ins.argval) or following == "LOAD_ATTR"):
            # The global starts a call (a NULL is pushed before it): it must
            # be a pure builtin, called as it is (not ``random.random``, a
            # module's attribute: the same flag).
            return False
    return True


def pure_function(func: Any) -> bool:
    """Whether calling ``func`` again, anywhere, gives the same result and does nothing else.

    Conservative: see the module's docstring.

    Examples
    --------
    >>> import random
    >>> pure_function(abs), pure_function(lambda kv: (kv[0] % 8, len(kv[1])))
    (True, True)
    >>> pure_function(lambda x: (random.randrange(8), x)), pure_function(print)
    (False, False)
    >>> pure_function(lambda x: x in {"a", "b"}), pure_function(lambda x: list({x, "a"})[0])
    (True, False)
    >>> import sys
    >>> pure_function(lambda kv: (len(sys.modules) % 8, kv))  # a module's state: per process
    False
    """
    if _pure_builtin(func):
        return True
    if type(func) is not types.FunctionType:
        return False  # a bound method, a partial, a callable object: its state is unknown
    code = func.__code__
    if code.co_flags & _NOT_PLAIN or any(isinstance(c, types.CodeType) for c in code.co_consts):
        return False
    try:
        closure = [cell.cell_contents for cell in func.__closure__ or ()]
    except ValueError:  # an empty cell: a variable not yet bound
        return False
    return all(_immutable(v) for v in closure) and _calls_only_pure_builtins(func)


def _callables(values: Iterable[Any]) -> Iterable[Any]:
    for value in values:
        if isinstance(value, (tuple, list)):
            yield from _callables(value)
        elif isinstance(value, dict):
            yield from _callables(value.values())
        elif callable(value):
            yield value


def pure_step(spec: NodeSpec) -> bool:
    """Whether the node ``spec`` describes may run again, anywhere, with the same result.

    Its function, and any callable among its parameters, must be pure (see
    :func:`pure_function`); an operator that takes none is the core's own code.

    Examples
    --------
    >>> from streams import Stream
    >>> pure_step(Stream().pluck(0).describe()), pure_step(Stream().map(abs).describe())
    (True, True)
    >>> pure_step(Stream().map(print).describe())
    False
    """
    functions = [spec.func] if spec.func is not None else []
    return all(pure_function(f) for f in [*functions, *_callables(spec.params.values())])


def replicable(plan_bytes: bytes) -> bool:
    """Whether every step of the stage pickled in ``plan_bytes`` is pure (:func:`pure_step`).

    Such a stage may run in each part of a keyed round (see
    :meth:`streams_dask.chain.StateChain.runs_prefix`), and Dask may compute
    its output again for a stateful task that needs it; any other runs once
    per batch, in a task of its own whose output the client fetches (see
    :class:`streams_dask.worker.Drawn`).

    Examples
    --------
    >>> import cloudpickle
    >>> from streams import Stream
    >>> from streams.stage import StageOp
    >>> source = Stream()
    >>> step = source.filter(lambda x: x > 0).describe()
    >>> plan = StagePlan("pure-doc", source.describe().id, (step.id,), (StageOp(step),), step.id)
    >>> replicable(cloudpickle.dumps(plan))
    True
    """
    try:
        plan: StagePlan = pickle.loads(plan_bytes)
    except Exception:  # it loads on the workers, or fails there: either way, once
        return False
    return all(pure_step(op.spec) for op in plan.ops)

