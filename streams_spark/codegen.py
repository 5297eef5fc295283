"""Element-wise steps of a chain compiled into one Python function.

A run of ``map``, ``starmap``, ``filter``, ``remove``, ``pluck`` and
``flatten`` steps becomes the source of a single function, one block per
step, so an element costs the user's calls and nothing else: no closure per
step, no call between steps. This is what makes a fused pass cheaper than
one ``mapInArrow`` per operator by more than the saved Spark passes.

Each step's call sits in its own ``try``: an exception is handed, with the
step and the element that step received, to ``fail`` and that element goes
no further (the same contract as in-process nodes and their error policy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["STATELESS", "compile_steps"]

#: The operators this module compiles.
STATELESS = frozenset({"map", "starmap", "filter", "remove", "pluck", "flatten"})


def compile_steps(steps: Sequence[Any], nxt: Callable[[Any], None],
                  fail: Callable[[Any, Any, BaseException], None]) -> Callable[[Any], None]:
    """One function running ``steps`` on an element, then ``nxt`` on each result.

    Parameters
    ----------
    steps : sequence of Step
        Element-wise steps (operators in :data:`STATELESS`), upstream first.
    nxt : callable
        Receives every element that leaves the last step.
    fail : callable
        ``fail(step, element, exception)`` for a step that raised.

    Examples
    --------
    >>> from streams_spark.chain import Step
    >>> out, errors = [], []
    >>> run = compile_steps([Step(1, "map", lambda x: range(10 // x)),
    ...                      Step(2, "flatten", None), Step(3, "filter", lambda x: 1 // x)],
    ...                     out.append, lambda s, x, e: errors.append((s.node_id, x)))
    >>> run(0)  # 10 // 0 raises in step 1
    >>> run(5)  # range(2): 1 // 0 raises in step 3, 1 // 1 passes
    >>> out, errors
    ([1], [(1, 0), (3, 0)])
    """
    ns: dict[str, Any] = {"nxt": nxt, "fail": fail}
    lines = ["def run(a0):"]
    depth = 1
    var = "a0"
    closers: list[list[str]] = []
    for k, step in enumerate(steps):
        pad = "    " * depth
        out = "continue" if depth > 1 else "return"
        ns[f"s{k}"] = step
        params = step.params
        ns[f"f{k}"] = step.func if step.func is not None else bool
        extra = ""
        if params.get("args"):
            ns[f"args{k}"] = tuple(params["args"])
            extra += f", *args{k}"
        if params.get("kwargs"):
            ns[f"kw{k}"] = dict(params["kwargs"])
            extra += f", **kw{k}"
        op = step.operator
        new = f"a{k + 1}"
        if op == "map":
            body = [f"{new} = f{k}({var}{extra})"]
        elif op == "starmap":
            body = [f"{new} = f{k}(*{var}{extra})"]
        elif op in ("filter", "remove"):
            test = "not " if op == "filter" else ""
            body = [f"if {test}f{k}({var}{extra}):", f"    {out}"]
            new = var
        elif op == "pluck":
            pick = params["pick"]
            ns[f"p{k}"] = tuple(pick) if isinstance(pick, list) else pick
            get = (f"tuple({var}[p] for p in p{k})" if isinstance(pick, list)
                   else f"{var}[p{k}]")
            body = [f"{new} = {get}"]
        elif op == "flatten":
            # Iterating can fail midway (a generator raising): the try spans
            # the loop; steps inside catch their own errors, so only the
            # iteration's reach it.
            lines.append(f"{pad}try:")
            lines.append(f"{pad}    for {new} in {var}:")
            closers.append([f"{pad}except Exception as e:", f"{pad}    fail(s{k}, {var}, e)"])
            depth += 2
            var = new
            continue
        else:
            raise ValueError(f"{step.label or op}: not an element-wise step")
        lines.append(f"{pad}try:")
        lines.extend(f"{pad}    {b}" for b in body)
        lines.append(f"{pad}except Exception as e:")
        lines.append(f"{pad}    fail(s{k}, {var}, e)")
        lines.append(f"{pad}    {out}")
        var = new
    lines.append("    " * depth + f"nxt({var})")
    for closer in reversed(closers):
        lines.extend(closer)
    exec(compile("\n".join(lines), "<streams_spark fused chain>", "exec"), ns)
    run: Callable[[Any], None] = ns["run"]
    return run
