"""Elements of classes defined in ``__main__`` (a script, a notebook) cross to Spark and back."""

from __future__ import annotations

import dataclasses
import enum
import sys
from typing import Any

import pytest

from streams import Stream
from tests.streams_spark.spark_plans import both

pytestmark = pytest.mark.spark


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> tuple[type, type]:
    """A dataclass and an IntEnum as a script defines them: in ``__main__``, found there."""
    point = dataclasses.dataclass(type("Point", (), {
        "__annotations__": {"x": int, "y": int}, "__module__": "__main__"}))
    color = enum.IntEnum("Color", {"RED": 1}, module="__main__")  # type: ignore[misc]
    for cls in (point, color):
        monkeypatch.setattr(sys.modules["__main__"], cls.__name__, cls, raising=False)
    return point, color


def test_main_class_elements_go_to_spark_and_come_back(
        spark: Any, script: tuple[type, type]) -> None:
    point, color = script
    xs = [point(1, 2), color.RED, (color.RED, point(3, 4))]

    def build(s: Stream) -> Stream:
        return s.map(lambda x: (type(x).__name__, x if isinstance(x, point) else x[1]
                                if isinstance(x, tuple) else point(int(x), 0)))

    out, expected = both(xs, build)
    assert out == expected == [("Point", point(1, 2)), ("Color", point(1, 0)),
                               ("tuple", point(3, 4))]
    assert all(type(v) is point for _, v in out)  # the driver's own class again


@pytest.mark.timeout(900)
def test_main_class_elements_through_a_keyed_scan(spark: Any, script: tuple[type, type]) -> None:
    point, _ = script
    xs = [point(1, 2), point(2, 3), point(1, 5)]

    def build(s: Stream) -> Stream:
        return s.scan(lambda a, p: point(p.x, a.y + p.y), key=lambda p: p.x)

    out, expected = both(xs, build, batch_size=2)
    assert out == expected == [(1, point(1, 2)), (2, point(2, 3)), (1, point(1, 7))]
