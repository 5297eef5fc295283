"""The fused pass: a chain of element-wise and sequential steps as one function.

A maximal chain of ``map``, ``starmap``, ``filter``, ``remove``, ``pluck``,
``flatten`` (and, where a batch runs in one partition, the sequential steps
``accumulate``, ``frequencies``, ``partition``, ``sliding_window``,
``unique`` and processing-time ``timed_window``) becomes one Python
function that runs inside one ``mapInArrow`` task. Every user function runs
exactly once per element: runs of element-wise steps are compiled into one
generated function (:mod:`streams_spark.codegen`), sequential steps are
closures calling the next, so no step is ever re-evaluated (Spark never sees the functions, so it
cannot push a filter below a UDF and re-run it).

Errors do not escape the worker: a step that raises records an error row
``(node id, element, exception)`` in the output, in order, and the driver
applies that node's own policy (``raise``, ``skip`` or ``route``) when the
row's turn comes, exactly as in-process.
"""

from __future__ import annotations

import copy
import operator
import pickle
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .codegen import STATELESS, compile_steps

__all__ = ["SEQUENTIAL", "STATELESS", "Chain", "Step", "Sink", "carried_error", "pickled_output"]

#: Steps with one running state, in element order: one partition per batch.
SEQUENTIAL = frozenset({"accumulate", "frequencies", "partition", "sliding_window", "unique",
                        "timed_window"})

#: ``Sink`` receives ``(kind, value)``: a result, or an error record.
DATA, ERROR = 0, 1



class _Missing:
    """No state yet: the first element becomes the state (a picklable singleton)."""

    def __reduce__(self) -> str:
        return "_MISSING"


_MISSING: Any = _Missing()


@dataclass(frozen=True)
class Step:
    """One node of a Spark segment, as the worker runs it.

    Built on the driver from the node's ``NodeSpec``; pickled with the job.
    """

    node_id: int
    operator: str
    func: Callable[..., Any] | None
    params: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""


Sink = Callable[[int, Any], None]


def carried_error(step: Step, x: Any, exc: BaseException) -> bytes:
    """Pickle ``(node id, element, exception)``, degrading what cannot be."""
    try:
        return pickle.dumps((step.node_id, x, exc), protocol=5)
    except Exception:
        pass
    # The element or the exception cannot cross processes: keep their text.
    text = RuntimeError(f"{type(exc).__name__}: {exc}")
    for element, error in ((_Unpicklable(repr(x)), exc), (x, text),
                           (_Unpicklable(repr(x)), text)):
        try:
            return pickle.dumps((step.node_id, element, error), protocol=5)
        except Exception:
            continue
    raise AssertionError("unreachable: text always pickles")


def pickled_output(kind: int, value: Any, last: Step | None) -> tuple[int, bytes]:
    """Pickle a value leaving the chain, as ``(kind, bytes)``.

    A value Spark cannot carry becomes an error row of ``last``, the step
    that returned it, whose message says what to do; with no step (the input
    itself) the pickling error is raised.
    """
    try:
        return kind, pickle.dumps(value, protocol=5)
    except Exception as e:
        if last is None:
            raise
        return ERROR, carried_error(last, value, TypeError(
            f"{last.label} returned {value!r:.80}, which Spark cannot carry "
            f"(pickling failed: {e}); return plain data, or call gather() "
            f"before {last.operator}()"))


class _Unpicklable:
    """Stands for an element that cannot be sent back to the driver."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _key(key: Any) -> Callable[[Any], Any]:
    return key if callable(key) else operator.itemgetter(key)


class Chain:
    """Compile ``steps`` into one push function with carried state.

    Parameters
    ----------
    steps : list of Step
        The steps, upstream first.
    states : dict, optional
        The states of sequential steps from the previous micro-batch,
        by position in ``steps``.

    Examples
    --------
    >>> out = []
    >>> chain = Chain([Step(1, "map", lambda x: x + 1), Step(2, "filter", bool),
    ...                Step(3, "accumulate", lambda a, b: a + b, {"start": 0})])
    >>> for x in [-1, 0, 1]:
    ...     chain.push(x, lambda kind, v: out.append(v))
    >>> out, chain.states
    ([1, 3], {2: 3})
    """

    def __init__(self, steps: list[Step], states: dict[int, Any] | None = None,
                 emit: Callable[[Any], None] | None = None,
                 fail: Callable[[bytes], None] | None = None) -> None:
        self.steps = steps
        self.states: dict[int, Any] = dict(states or {})
        self._sink: Sink = _drop
        self._flushers: list[Callable[[], None]] = []
        self._tickers: dict[int, Callable[[], None]] = {}
        if emit is not None and fail is not None:
            # Bound outputs: the last step calls ``emit`` itself, with no
            # per-element dispatch on a kind (the batch runner's hot path).
            self._terminal, self._on_error = emit, fail
            self.run: Callable[[Any], None] = self._compile(0)
        else:
            self._terminal, self._on_error = self._emit_to_sink, self._error_to_sink
            self.push = self._build(0)

    def _emit_to_sink(self, y: Any) -> None:
        self._sink(DATA, y)

    def _error_to_sink(self, p: bytes) -> None:
        self._sink(ERROR, p)

    def _build(self, i: int) -> Callable[[Any, Sink], None]:
        """The function running steps ``i..`` on one element."""
        after = self._compile(i)

        def push(x: Any, sink: Sink) -> None:
            self._sink = sink
            after(x)

        return push

    def flush(self, sink: Sink | None = None) -> None:
        """Emit what sequential steps hold (end of stream), upstream first.

        ``sink`` receives the outputs unless the chain was built with ``emit``.
        """
        if sink is not None:
            self._sink = sink
        for flush in self._flushers:
            flush()

    def tick(self, node_id: int) -> None:
        """Close one window of the processing-time ``timed_window`` ``node_id``."""
        self._tickers[node_id]()

    def _compile(self, i: int) -> Callable[[Any], None]:
        if i == len(self.steps):
            return self._terminal
        step = self.steps[i]
        if step.operator in STATELESS:
            # A run of element-wise steps becomes one generated function.
            j = i
            while j < len(self.steps) and self.steps[j].operator in STATELESS:
                j += 1
            return compile_steps(self.steps[i:j], self._compile(j), self._fail)
        nxt = self._compile(i + 1)
        make = getattr(self, "_op_" + step.operator)
        # States are keyed by position, not node id: ids change when a
        # restarted process rebuilds the graph, positions do not.
        self._slot = i
        fn: Callable[[Any], None] = make(step, nxt)
        return fn

    def _fail(self, step: Step, x: Any, exc: BaseException) -> None:
        self._on_error(carried_error(step, x, exc))

    # -- element-wise steps ------------------------------------------------

    # -- sequential steps: state carried from batch to batch ---------------

    def _op_accumulate(self, step: Step, nxt: Callable[[Any], None]) -> Callable[[Any], None]:
        p = step.params
        f, kwargs = step.func, p.get("kwargs", {})
        assert f is not None
        returns_state, with_state = p.get("returns_state", False), p.get("with_state", False)
        start = p.get("start", _MISSING)
        start = _MISSING if _is_no_default(start) else start
        states, nid, fail = self.states, self._slot, self._fail
        if nid not in states:
            states[nid] = copy.deepcopy(start)

        def run(x: Any) -> None:
            old = states[nid]
            try:
                if old is _MISSING:
                    new = out = x
                elif returns_state:
                    new, out = f(old, x, **kwargs)
                else:
                    new = out = f(old, x, **kwargs)
            except Exception as e:
                return fail(step, x, e)
            states[nid] = new
            nxt((new, out) if with_state else out)

        return run

    def _op_frequencies(self, step: Step, nxt: Callable[[Any], None]) -> Callable[[Any], None]:
        states, nid, fail = self.states, self._slot, self._fail
        states.setdefault(nid, {})

        def run(x: Any) -> None:
            counts = states[nid]
            try:
                counts[x] = counts.get(x, 0) + 1
            except Exception as e:
                return fail(step, x, e)
            nxt(dict(counts))

        return run

    def _op_partition(self, step: Step, nxt: Callable[[Any], None]) -> Callable[[Any], None]:
        n, key = step.params["n"], step.params.get("key")
        keyf = None if key is None else _key(key)
        states, nid, fail = self.states, self._slot, self._fail
        states.setdefault(nid, {})

        def run(x: Any) -> None:
            buffers = states[nid]
            try:
                k = None if keyf is None else keyf(x)
            except Exception as e:
                return fail(step, x, e)
            group = buffers.setdefault(k, [])
            group.append(x)
            if len(group) >= n:
                del buffers[k]
                nxt(tuple(group))

        def flush() -> None:
            buffers, states[nid] = states[nid], {}
            for group in buffers.values():
                if group:
                    nxt(tuple(group))

        self._flushers.append(flush)
        return run

    def _op_sliding_window(self, step: Step, nxt: Callable[[Any], None]) -> Callable[[Any], None]:
        n, partial = step.params["n"], step.params.get("return_partial", True)
        states, nid = self.states, self._slot
        states.setdefault(nid, [])

        def run(x: Any) -> None:
            buf: deque[Any] = deque(states[nid], maxlen=n)
            buf.append(x)
            states[nid] = list(buf)
            if partial or len(buf) == n:
                nxt(tuple(buf))

        def flush() -> None:
            buf = states[nid]
            if not partial and 0 < len(buf) < n:
                nxt(tuple(buf))

        self._flushers.append(flush)
        return run

    def _op_timed_window(self, step: Step, nxt: Callable[[Any], None]) -> Callable[[Any], None]:
        # Processing time: the driver owns the clock and sends ticks (see
        # streams.window_clock); a tick emits the open window, empty or not.
        states, nid = self.states, self._slot
        states.setdefault(nid, [])

        def run(x: Any) -> None:
            states[nid].append(x)

        def tick() -> None:
            window, states[nid] = states[nid], []
            nxt(window)

        def flush() -> None:
            if states[nid]:
                tick()

        self._tickers[step.node_id] = tick
        self._flushers.append(flush)
        return run

    def _op_unique(self, step: Step, nxt: Callable[[Any], None]) -> Callable[[Any], None]:
        maxsize, keyf = step.params.get("maxsize"), _key(step.params.get("key", _identity))
        hashable = step.params.get("hashable", True)
        states, nid, fail = self.states, self._slot, self._fail
        states.setdefault(nid, OrderedDict() if hashable else [])

        def run(x: Any) -> None:
            seen = states[nid]
            try:
                k = keyf(x)
                new = k not in seen
                if hashable:
                    if new:
                        seen[k] = True
                    else:
                        seen.move_to_end(k)
                else:
                    if not new:
                        seen.remove(k)
                    seen.append(k)
            except Exception as e:
                return fail(step, x, e)
            if maxsize is not None and len(seen) > maxsize:
                if hashable:
                    seen.popitem(last=False)
                else:
                    del seen[0]
            if new:
                nxt(x)

        return run


def _identity(x: Any) -> Any:
    return x


def _drop(kind: int, value: Any) -> None:
    return None


def _is_no_default(value: Any) -> bool:
    # Compared by repr so that the worker needs no import of the core.
    return type(value).__name__ == "_NoDefault"
