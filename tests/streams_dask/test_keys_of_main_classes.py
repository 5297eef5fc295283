"""Keys of a class a script defines (``__main__``): one key group everywhere, times kept.

Such a class reaches the workers by value (cloudpickle), where pickle cannot
write its instances by reference, so ``key_bytes`` fails there. Its keys go
to key group 0, in every process; a keyed event-time window still takes
such an element's time, which closes the windows of every key.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from typing import Any

import pytest
from distributed import Client

import streams_dask  # noqa: F401
from streams import Stream
from streams.operators.timed import LateElementError
from streams_dask.key_groups import group_of

# As a script would define them: their module is __main__.
Kind = enum.Enum("Kind", {"SPECIAL": "x"}, module="__main__")  # type: ignore[misc]
Region = dataclasses.make_dataclass("Region", ["code"], frozen=True)
Region.__module__ = "__main__"


def groups_here(keys: list[Any]) -> list[int]:
    return [group_of(k) for k in keys]


@pytest.mark.dask
def test_keys_of_main_classes_are_in_group_0_in_every_process(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [Kind.SPECIAL, Region("eu"), ("a", Kind.SPECIAL), (1, (Region(2),))]
    assert client.submit(groups_here, keys, pure=False).result() == [0, 0, 0, 0]
    assert groups_here(keys) == [0, 0, 0, 0]
    # Where the classes are __main__'s own (the script's process, threads),
    # pickle writes such keys by reference: still group 0.
    main = sys.modules["__main__"]
    monkeypatch.setattr(main, "Kind", Kind, raising=False)
    monkeypatch.setattr(main, "Region", Region, raising=False)
    assert groups_here(keys) == [0, 0, 0, 0]
    # Other keys keep their groups; a string "__main__" is no class.
    assert group_of("__main__") == group_of("".join(["__", "main__"])) != 0


def show(window: tuple[Any, list[dict[str, Any]]]) -> tuple[str, list[float]]:
    key, items = window
    return (str(key), [e["t"] for e in items])


def run(items: list[dict[str, Any]], client: Client | None = None
        ) -> tuple[list[Any], list[str]]:
    source: Stream[Any] = Stream()
    head = source if client is None else source.scatter(client=client)
    node = head.timed_window(3, time="t", key="k")
    out = (node if client is None else node.gather()).map(show).sink_to_list()
    log = []
    for x in items:
        try:
            source.emit(x)
        except LateElementError:
            log.append(f"late: {x['t']}")
        log.append(f"after {x['t']}: {len(out)} windows")
    source.close()
    return out, log


@pytest.mark.dask
def test_an_element_of_a_main_class_key_moves_the_watermark(client: Client) -> None:
    items = [{"k": "ab"[i % 2], "t": float(i)} for i in range(6)]
    items += [{"k": Kind.SPECIAL, "t": 100.0},  # closes every window of "a" and "b"
              {"k": "a", "t": 4.5}]  # so this one is late
    expected = run(items)
    assert "late: 4.5" in expected[1]
    assert run(items, client) == expected
