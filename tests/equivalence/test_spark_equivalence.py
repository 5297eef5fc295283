"""Same results in-process and on Spark, for generated pipelines and inputs.

Pipelines are drawn from the operators a Spark segment lowers; functions
come from a fixed menu of deterministic ones. The micro-batch size is drawn
too, so state must carry across batch boundaries. Spark is slow to run, so
example counts are small; the menu makes each example cover many steps.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams import Stream

pytestmark = pytest.mark.spark

Build = Callable[[Stream], Stream]

#: Element-wise steps on ints that keep ints flowing.
STATELESS: dict[str, Build] = {
    "map(+1)": lambda s: s.map(operator.add, 1),
    "map(2x-3)": lambda s: s.map(lambda x: 2 * x - 3),
    "filter(even)": lambda s: s.filter(lambda x: x % 2 == 0),
    "filter(None)": lambda s: s.filter(None),
    "remove(3|x)": lambda s: s.remove(lambda x: x % 3 == 0),
    "flatten": lambda s: s.map(lambda x: [x, -x] if x % 2 else [x]).flatten(),
    "pluck": lambda s: s.map(lambda x: (x, x + 1)).pluck(1),
    "pluck[list]": lambda s: s.map(lambda x: (x, 7, x)).pluck([2, 0]).starmap(operator.sub),
    "starmap": lambda s: s.map(lambda x: (x, 3)).starmap(operator.mul),
}
#: Steps with running state, in element order.
SEQUENTIAL: dict[str, Build] = {
    "scan(add)": lambda s: s.scan(operator.add),
    "scan(max, start)": lambda s: s.scan(max, start=-5),
    "partition(3)": lambda s: s.partition(3).map(sum),
    "sliding_window(2)": lambda s: s.sliding_window(2, return_partial=False).map(sum),
    "unique": lambda s: s.unique(maxsize=4),
    "frequencies": lambda s: s.map(lambda x: x % 4).frequencies().map(len),
}
#: The keyed scan, emitting (key, state); mapped back to ints.
KEYED: Build = lambda s: (s.scan(lambda a, x: a + x, start=0, key=lambda x: x % 3)
                          .starmap(lambda k, total: 10 * total + k))


def run(pipeline: list[Build], xs: list[int], spark: bool, batch_size: int) -> list[Any]:
    source = Stream()
    node = source.to_spark(batch_size=batch_size) if spark else source
    for step in pipeline:
        node = step(node)
    out = (node.gather() if spark else node).sink_to_list()
    for x in xs:
        source.emit(x)
    source.close()
    return list(out)


names = st.sampled_from(sorted(STATELESS))
steps = st.lists(st.one_of(names, st.sampled_from(sorted(SEQUENTIAL))), min_size=1, max_size=6)
inputs = st.lists(st.integers(-20, 20), max_size=14)


@pytest.mark.timeout(900)
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(chosen=steps, xs=inputs, batch_size=st.integers(3, 8))
def test_batch_mode_pipelines_agree(spark: Any, chosen: list[str], xs: list[int],
                                    batch_size: int) -> None:
    pipeline = [STATELESS.get(n) or SEQUENTIAL[n] for n in chosen]
    assert run(pipeline, xs, True, batch_size) == run(pipeline, xs, False, batch_size)


@pytest.mark.timeout(900)
@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(before=st.lists(names, max_size=2), after=st.lists(names, max_size=2),
       xs=st.lists(st.integers(-20, 20), min_size=1, max_size=12),
       batch_size=st.integers(4, 8))
def test_keyed_scan_pipelines_agree(spark: Any, before: list[str], after: list[str],
                                    xs: list[int], batch_size: int) -> None:
    pipeline = [*(STATELESS[n] for n in before), KEYED, *(STATELESS[n] for n in after)]
    assert run(pipeline, xs, True, batch_size) == run(pipeline, xs, False, batch_size)
