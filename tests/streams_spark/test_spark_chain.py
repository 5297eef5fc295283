"""The fused chain, run directly (no Spark): exactly once, in order, errors as rows."""

from __future__ import annotations

import pickle
from typing import Any

from streams_spark.chain import DATA, Chain, Step


def run(steps: list[Step], xs: list[Any], flush: bool = False) -> list[Any]:
    chain = Chain(steps)
    out: list[Any] = []

    def sink(kind: int, v: Any) -> None:
        out.append(v if kind == DATA else ("error", pickle.loads(v)[1]))

    for x in xs:
        chain.push(x, sink)
    if flush:
        chain.flush(sink)
    return out


def test_every_function_runs_once_per_element() -> None:
    calls: list[Any] = []

    def f(x: int) -> int:
        calls.append(("f", x))
        return x + 1

    def keep(x: int) -> bool:
        calls.append(("keep", x))
        return x % 2 == 0

    out = run([Step(1, "map", f), Step(2, "filter", keep), Step(3, "map", f)], [0, 1, 2, 3])
    assert out == [3, 5]
    assert sorted(calls) == sorted([("f", 0), ("f", 1), ("f", 2), ("f", 3), ("keep", 1),
                                    ("keep", 2), ("keep", 3), ("keep", 4), ("f", 2), ("f", 4)])


def test_flatten_pluck_starmap_remove() -> None:
    steps = [Step(1, "flatten", None), Step(2, "pluck", None, {"pick": [1, 0]}),
             Step(3, "starmap", lambda a, b: a * b), Step(4, "remove", lambda x: x == 0)]
    assert run(steps, [[(1, 2), (0, 5)], [(3, 4)]]) == [2, 12]


def test_error_becomes_a_row_in_order() -> None:
    out = run([Step(7, "map", lambda x: 10 // x)], [5, 0, 2])
    assert out == [2, ("error", 0), 5]


def test_sequential_state_and_flush() -> None:
    steps = [Step(1, "accumulate", lambda a, b: a + b, {"start": 0}),
             Step(2, "partition", None, {"n": 2})]
    assert run(steps, [1, 2, 3], flush=True) == [(1, 3), (6,)]


def test_flatten_iteration_error_is_the_flatten_nodes() -> None:
    def items(n: int) -> Any:
        yield n
        raise ValueError("broken generator")

    out: list[Any] = []
    chain = Chain([Step(1, "map", items), Step(2, "flatten", None),
                   Step(3, "map", lambda x: x * 10)],
                  emit=out.append, fail=lambda p: out.append(pickle.loads(p)))
    chain.run(1)
    chain.run(2)
    assert [x if isinstance(x, int) else (x[0], type(x[2]).__name__) for x in out] == [
        10, (2, "ValueError"), 20, (2, "ValueError")]


def test_arguments_and_pick_lists_reach_the_generated_code() -> None:
    steps = [Step(1, "map", lambda x, a, b=0: x + a + b, {"args": (1,), "kwargs": {"b": 2}}),
             Step(2, "filter", lambda x, m: x % m, {"args": (2,)}),
             Step(3, "map", lambda x: (x, -x, x * 2)), Step(4, "pluck", None, {"pick": [2, 0]})]
    assert run(steps, [0, 1, 2]) == [(6, 3), (10, 5)]
