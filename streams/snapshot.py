"""Snapshots: the state of every node of a graph, taken between two elements.

A snapshot holds scan totals, window buffers, ``unique``'s memory, zip
buffers, source offsets... and the graph's identity (one entry per node in
:func:`streams.graph.walk` order), which a restore compares with the running
graph. :mod:`streams.state` writes snapshots to disk as checkpoints.

A node that only shows the stream (a Jupyter live view, a live plot: its
class sets ``_checkpointed = False``) is no part of the pipeline's identity
or state: its entry is marked and skipped on restore, so showing a stream or
not never changes whether a checkpoint restores.

Examples
--------
>>> from streams import Stream
>>> source = Stream()
>>> totals = source.scan(lambda s, x: s + x, start=0).sink_to_list()
>>> source.emit(5)
>>> snapshot_graph(source).states[1]
{'state': 5}
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import operator
import os
import pickle
import sys
import types
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from ._checkpoint_io import CheckpointError
from .core import Stream
from .display_nodes import checkpointed, display_identity, pipeline_entries
from .fusion import invalidate as _invalidate
from .graph import walk

__all__ = ["GraphSnapshot", "restore_graph", "snapshot_graph"]


@dataclass(frozen=True)
class GraphSnapshot:
    """The state of every node of a graph, in :func:`~streams.graph.walk` order.

    Attributes
    ----------
    nodes : tuple of dict
        One ``{"index", "operator", "name", "state"}`` entry per node: the
        graph's identity, compared on restore. A display-only node's entry
        has ``"checkpointed": False`` and is not compared (see :func:`identities`).
    states : tuple
        One state dict per node (None for a stateless node).
    sequence : int
        How many checkpoints were taken before this one (0 for a bare snapshot).
    """

    nodes: tuple[dict[str, Any], ...]
    states: tuple[dict[str, Any] | None, ...]
    sequence: int = 0


def identities(nodes: list[Stream[Any]]) -> list[dict[str, Any]]:
    """The identity of each node of a graph (in :func:`~streams.graph.walk` order).

    Nodes are numbered (``index``, ``upstreams``) among the checkpointed
    ones only; a display-only node has an entry, so that the entries line up
    with the states, but marked ``"checkpointed": False`` and with no index.

    >>> from streams import Stream
    >>> from streams.jupyter import LiveView
    >>> source = Stream()
    >>> view = LiveView(source, widget=False)  # shown before the rest was built
    >>> _ = source.scan(max).sink_to_list()
    >>> [(e["index"], e["operator"]) for e in identities(walk(source))]
    [(0, 'stream'), (None, 'live_view'), (1, 'accumulate'), (2, 'sink_to_list')]
    >>> unshown = Stream()
    >>> _ = unshown.scan(max).sink_to_list()
    >>> shown = [e for e in identities(walk(source)) if e.get("checkpointed", True)]
    >>> shown == identities(walk(unshown))
    True
    """
    kept = checkpointed(nodes)
    order = {id(n): i for i, n in enumerate(kept)}
    return [_identity(order[id(n)], n, order) if id(n) in order else display_identity(n)
            for n in nodes]


def _identity(index: int, node: Stream[Any], order: dict[int, int]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "index": index,
        "operator": node._operator,
        "name": node.stream_name,
        "state": list(node._state),
    }
    source = _source_identity(node)
    if source is not None:
        entry["source"] = source
    func = getattr(node, "func", None)
    if node._state and callable(func):
        entry["function"] = _function_identity(func)
    if node._state and not getattr(node, "_replayable", False):  # a source: its input
        # State kept under other parameters (a window's length, a key), or
        # per upstream in another order (zip's buffers), means something else.
        entry["params"] = _param_identity(node)
        entry["upstreams"] = [order.get(id(u)) for u in node.upstreams]
    return entry


#: Parameter values whose text is the same in every process (others are not compared).
_PLAIN = (type(None), bool, int, float, str, bytes, datetime.timedelta)
#: Callables whose text (``operator.itemgetter(0)``) says all they do.
_SAID_BY_REPR = (operator.itemgetter, operator.attrgetter, operator.methodcaller)
#: Longer texts of a function's bound arguments are recorded as a digest.
_LONGEST = 120


def _param_identity(node: Stream[Any]) -> dict[str, Any]:
    """What a stateful node's state means something under: its plain parameters' text,
    its functions' identities (as :func:`_function_identity`), and the text of the
    arguments its function is given (``args``, ``kwargs``: see :func:`_arguments_text`).

    Functions were recorded by name only, and arguments not at all, before
    this release: :func:`_same_param` compares such a record as it was.
    """
    found: dict[str, Any] = {}
    names = node._params if node._state_params is None else node._state_params
    for name in names:
        value = _text_of_path(getattr(node, name, None))
        if isinstance(value, _PLAIN) or (
                isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value)):
            found[name] = repr(value)  # as earlier versions recorded it
        elif isinstance(value, type):
            found[name] = _name_of(value)
        elif callable(value):
            found[name] = _function_identity(value)
        elif name in ("args", "kwargs") and isinstance(value, (tuple, dict)):
            # The node's own container of the arguments its function is given.
            found[name] = _arguments_text(value)
    return found


def _value_text(value: Any, depth: int = 0) -> str:
    """A value's text, the same in every process, never failing (for an identity).

    Plain values (numbers, strings, None, timedeltas) are their ``repr``,
    tuples and frozensets their items'; a function is its name, an
    ``operator.itemgetter`` its ``repr``. Anything else is only its type: a
    list, a dict or an object may change as the pipeline runs (a cache the
    function fills), and must not make a restore of an unchanged pipeline
    fail.

    >>> _value_text(("a", 2.5, len, [1]))
    "('a', 2.5, builtins.len, <builtins.list>)"
    """
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, _SAID_BY_REPR) and " at 0x" not in repr(value):
        return repr(value)
    if depth < 3 and isinstance(value, (tuple, frozenset)) and len(value) <= 100:
        texts = [_value_text(v, depth + 1) for v in value]
        if isinstance(value, frozenset):
            return "frozenset({" + ", ".join(sorted(texts)) + "})"
        return "(" + ", ".join(texts) + ("," if len(texts) == 1 else "") + ")"
    if callable(value):
        return _name_of(getattr(value, "func", value))
    return f"<{_name_of(type(value))}>"


def _arguments_text(arguments: tuple[Any, ...] | dict[str, Any]) -> str:
    """The text of the arguments given to a function (a node's ``args`` or ``kwargs``...).

    >>> _arguments_text({"factor": 1, "cache": {}})
    "{'cache': <builtins.dict>, 'factor': 1}"
    """
    if isinstance(arguments, dict):
        return "{" + ", ".join(sorted(f"{k!r}: {_value_text(v)}"
                                      for k, v in arguments.items())) + "}"
    return _value_text(arguments)


def _name_of(obj: Any) -> str:
    qualname = getattr(obj, "__qualname__", type(obj).__name__)
    return f"{getattr(obj, '__module__', '')}.{qualname}"


def _source_identity(node: Stream[Any]) -> dict[str, Any] | None:
    """What a source reads (its file, stream, group...): a checkpoint holds offsets into it.

    A source names the parameters that say it (``_identity_params``); by
    default every text parameter of a replayable source (a path, an
    encoding: offsets into another file, or into the same one read
    differently, are meaningless).
    """
    if not getattr(node, "_replayable", False):
        return None
    names = getattr(node, "_identity_params", None)
    if names is None:
        names = [n for n in node._params
                 if isinstance(getattr(node, n, None), (str, bytes, os.PathLike))]
    found = {n: _text_of_path(getattr(node, n, None)) for n in names}
    return {n: v.decode("latin-1") if isinstance(v, bytes) else v for n, v in found.items()
            if v is None or isinstance(v, (str, bytes, int, float))}


def _text_of_path(value: Any) -> Any:
    """A path as its text (``Path("a")`` and ``"a"`` name one file); anything else as is."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _function_identity(func: Any) -> dict[str, Any]:
    """The name and a digest of the code of a stateful node's function, and what is bound to it.

    State built by one function fed to another (a scan whose function
    changed) gives results neither would. The code digest depends on the
    Python version, so it is compared only between equal versions. What is
    bound (``functools.partial``'s arguments, the defaults of the function's
    parameters, an ``operator.itemgetter``'s items) is recorded as the text
    of :func:`_value_text`, or its digest when long.
    """
    inner = getattr(func, "func", func)  # functools.partial
    name = _name_of(inner)
    code = getattr(inner, "__code__", None)
    digest = None
    if code is not None:
        h = hashlib.sha256()
        for c in _code_objects(code):
            h.update(c.co_code)
            h.update(repr([_stable(k) for k in c.co_consts
                           if not isinstance(k, types.CodeType)]).encode())
            h.update(repr(c.co_names).encode())
        digest = h.hexdigest()[:16]
    return {"name": name, "code": digest, "python": "{}.{}".format(*sys.version_info[:2]),
            "bound": _bound_text(func)}


def _bound_text(func: Any) -> str:
    parts = []
    if isinstance(func, functools.partial):
        parts.append(f"args={_arguments_text(func.args)}, "
                     f"keywords={_arguments_text(func.keywords)}")
        func = func.func
    if isinstance(func, _SAID_BY_REPR):
        parts.append(_value_text(func))
    defaults = getattr(func, "__defaults__", None)
    kwdefaults = getattr(func, "__kwdefaults__", None)
    if isinstance(defaults, tuple) and defaults:
        parts.append(f"defaults={_value_text(defaults)}")
    if isinstance(kwdefaults, dict) and kwdefaults:
        parts.append(f"keyword defaults={_arguments_text(kwdefaults)}")
    text = "; ".join(parts)
    if len(text) > _LONGEST:
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return text


def _stable(const: Any) -> Any:
    # A frozenset's repr follows string hashing, which varies between processes.
    return sorted(map(repr, const)) if isinstance(const, frozenset) else const


def _code_objects(code: types.CodeType) -> list[types.CodeType]:
    found = [code]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            found.extend(_code_objects(c))
    return found


def _same_function(got: dict[str, Any], want: dict[str, Any] | None) -> bool:
    if want is None:
        return True  # a checkpoint of an earlier version: nothing recorded
    if got["name"] != want.get("name"):
        return False
    if "bound" in want and got.get("bound") != want["bound"]:  # (older ones record none)
        return False
    return bool(got["python"] != want.get("python") or got["code"] == want.get("code"))


def _same_param(got: Any, want: Any) -> bool:
    """Whether a parameter's identity now (``got``) is the one recorded (``want``)."""
    if isinstance(want, dict):  # a function, compared as the node's function is
        return isinstance(got, dict) and _same_function(got, want)
    if isinstance(got, dict):  # a function that earlier versions recorded by name only
        return bool(want == got["name"])
    return bool(got == want)


def _function_change(got: dict[str, Any], want: dict[str, Any]) -> str:
    """What differs between two function identities (:func:`_same_function` said they do)."""
    if got["name"] != want.get("name"):
        return f"{want.get('name')} then, {got['name']} now"
    if "bound" in want and got.get("bound") != want["bound"]:
        return (f"{got['name']} bound to {want['bound'] or 'nothing'} then, "
                f"to {got['bound'] or 'nothing'} now")
    return f"{got['name']}, its code changed"


def _older_state(names: list[str], taken: Any, added: tuple[str, ...]) -> bool:
    """Whether a checkpoint's state ``taken`` is ``names`` without some of those ``added`` since.

    >>> _older_state(["a", "b", "c"], ["a", "c"], ("b", "c"))
    True
    >>> _older_state(["a", "b"], ["b"], ("b",))
    False
    """
    if not added or not isinstance(taken, list):
        return False
    return (all(name in added for name in names if name not in taken)
            and [name for name in names if name in taken] == taken)


def _describe_entry(entry: dict[str, Any]) -> str:
    text = str(entry["operator"])
    if entry.get("name"):
        text += f" {entry['name']!r}"
    return text


def _node_state(node: Stream[Any], fds: list[int] | None = None) -> dict[str, Any] | None:
    """The state of ``node`` to save; ``fds`` collects files to fsync before the save.

    With ``fds``, a node with a file to make durable (``sink_to_durable_textfile``)
    hands over a duplicate of its descriptor instead of fsyncing it here:
    the background writer fsyncs it before it writes the checkpoint.
    """
    if not node._state:
        return None
    if fds is not None and hasattr(node, "_checkpoint_state"):
        state, fd = node._checkpoint_state()
        if fd is not None:
            fds.append(fd)
        return state  # type: ignore[no-any-return]
    if type(node).snapshot is not Stream.snapshot:
        # A node with side effects to settle (a file sink records its length).
        return node.snapshot()
    # No deep copy: the caller serialises at once, between two elements.
    return {name: getattr(node, name) for name in node._state}


def snapshot_graph(node: Stream[Any], copy: bool = True) -> GraphSnapshot:
    """Snapshot every node of the graph ``node`` belongs to.

    Take it between elements (not from inside a node's function). With
    ``copy=False`` the states share objects with the live nodes; serialise
    them before the next element.
    """
    nodes = walk(node)
    states = tuple(_node_state(n) for n in nodes)
    if copy:
        states = tuple(pickle.loads(_dump_states(nodes, states)))
    return GraphSnapshot(tuple(identities(nodes)), states)


#: What a refusal of a bare snapshot (not a Checkpointer's) says to do.
AFRESH = "do not restore it, to start afresh"


def _check_match(nodes: list[Stream[Any]], entries: tuple[dict[str, Any], ...],
                 where: str, afresh: str = AFRESH) -> None:
    found = first_difference(nodes, entries)
    if found is not None:
        what, why = found
        raise CheckpointError(f"{where} {what}; {why} ({afresh})")


def first_difference(nodes: list[Stream[Any]], entries: tuple[dict[str, Any], ...] | list[Any],
                     then: str = "the checkpoint") -> tuple[str, str] | None:
    """How the graph of ``nodes`` first differs from the identity ``entries`` recorded
    (by ``then``), and why it matters; None if it does not.

    Display-only nodes, in the graph or in the record, are left out of the comparison.
    """
    got_all = [e for e in identities(nodes) if e.get("checkpointed", True)]
    nodes = checkpointed(nodes)
    entries = pipeline_entries(entries)[1]
    changed = "a changed pipeline cannot resume from an old checkpoint"
    for i, n in enumerate(nodes):
        if i >= len(entries):
            return (f"does not match the graph: the graph has {len(nodes)} nodes, {then} "
                    f"{len(entries)}; node {i} ({n._label()}) is not in {then}", changed)
        got, want = got_all[i], entries[i]
        if _older_state(got["state"], want.get("state"), n._state_added):
            got = {**got, "state": want["state"]}  # taken before some were kept: restored
        at = f"does not match the graph at node {i}:"
        if {k: got[k] for k in ("operator", "name")} != {
                k: want.get(k) for k in ("operator", "name")}:
            return (f"{at} the graph has {n._label()}, {then} has {_describe_entry(want)}",
                    changed)
        if got["state"] != want.get("state"):
            return (f"{at} {n._label()} keeps {got['state']} here, {then} "
                    f"{want.get('state')}: the node changed (its parameters, or the "
                    "library's version of it)", changed)
        if "source" in want and not _recorded_equal(got.get("source") or {}, want["source"]):
            return (f"was taken over another input: node {i} ({n._label()}) reads "
                    f"{got.get('source')}, {then}'s read {want['source']}",
                    "its offsets mean nothing here; point the source at the input it was "
                    "taken over")
        if "function" in got and not _same_function(got["function"], want.get("function")):
            return (f"{at} {n._label()}'s function changed "
                    f"({_function_change(got['function'], want['function'])})",
                    "state built by the old function would feed the new one")
        params, recorded = got.get("params", {}), want.get("params", {})
        if not all(k in params and _same_param(params[k], v) for k, v in recorded.items()):
            return (f"{at} {n._label()}'s parameters changed ({_changes(params, recorded)})",
                    "state kept under the old ones means something else under these")
        if "upstreams" in want and got.get("upstreams") != want["upstreams"]:
            return (f"{at} {n._label()} has its upstreams {got.get('upstreams')} (nodes in "
                    f"graph order), {then} {want['upstreams']}",
                    "its state is kept per upstream")
    if len(entries) > len(nodes):
        return (f"does not match the graph: the graph has {len(nodes)} nodes, {then} "
                f"{len(entries)}; {then.removeprefix('the ')} node {len(nodes)} "
                f"({_describe_entry(entries[len(nodes)])}) is not in the graph", changed)
    return None


def _recorded_equal(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """Whether every value ``want`` recorded is ``got``'s (older checkpoints record fewer)."""
    return all(k in got and got[k] == v for k, v in want.items())


def _changes(got: dict[str, Any], want: dict[str, Any]) -> str:
    return ", ".join(_change(k, got.get(k), v) for k, v in want.items()
                     if not _same_param(got.get(k), v))


def _change(name: str, got: Any, want: Any) -> str:
    if isinstance(got, dict) and isinstance(want, dict):
        return f"{name}: {_function_change(got, want)}"
    return f"{name} {_shown(want)} then, {_shown(got)} now"


def _shown(identity: Any) -> str:
    return str(identity.get("name")) if isinstance(identity, dict) else str(identity)


def restore_graph(node: Stream[Any], snapshot: GraphSnapshot, where: str = "snapshot",
                  copy: bool = True, afresh: str = AFRESH) -> None:
    """Restore every node of the graph ``node`` belongs to from ``snapshot``.

    The nodes get a copy of its states, so one snapshot restores any number
    of times, or into several graphs; with ``copy=False`` they take its
    objects over (a snapshot used once, as one read from a checkpoint).
    Raises :class:`CheckpointError`, naming the node, if the graph differs
    from the one the snapshot was taken of (ending with ``afresh``: what to
    do to start afresh instead).
    """
    nodes = checkpointed(walk(node))
    _check_match(nodes, snapshot.nodes, where, afresh)
    # Display-only nodes' entries (and states: None) are skipped, as _check_match did.
    kept = tuple(snapshot.states[p] for p in pipeline_entries(snapshot.nodes)[0])
    # One copy of all the states: objects the nodes shared stay shared.
    states = deepcopy(kept) if copy else kept
    for n, state in zip(nodes, states, strict=True):
        if state is not None:
            try:
                n.restore(state)
            except Exception as e:
                raise CheckpointError(f"{where}: restoring {n._label()} failed: {e}") from e
    _invalidate(node)  # compiled code may hold references to replaced state


def _dump_states(nodes: list[Stream[Any]], states: Any) -> bytes:
    try:
        return pickle.dumps(list(states), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        for n, s in zip(nodes, states, strict=True):
            try:
                pickle.dumps(s)
            except Exception as e:
                raise CheckpointError(
                    f"the state of {n._label()} cannot be saved: {type(e).__name__}: {e}"
                ) from e
        raise
