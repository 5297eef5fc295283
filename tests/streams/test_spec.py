"""The graph is data: every registered operator's description builds it back, and pickles.

Backends run the core's own nodes, rebuilt from their descriptions
(``streams.spec.build``); this checks, for every operator the packages
register, that a node built from ``describe()`` describes itself the same
way, and that the description crosses processes. An operator added without
an example below fails ``test_every_registered_operator_has_an_example``.
"""

from __future__ import annotations

import operator
import pickle
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import cloudpickle
import pytest
from hypothesis import given
from hypothesis import strategies as st

import streams_dask  # noqa: F401 - registers scatter(), to_dask()
import streams_spark  # noqa: F401 - registers to_spark(), from_spark()
from streams import Stream, VirtualClock, use_clock
from streams.spec import NodeSpec, _registry, build, operator_class


def double(x: int) -> int:
    return 2 * x


def positive(x: int) -> bool:
    return x > 0


def keep_state(n: int, x: int) -> tuple[int, list[int]]:
    return n, [x]


async def slow(x: int) -> int:
    return x


class FakeDataFrame:
    """Stands for a streaming DataFrame: from_spark() only keeps it."""

    isStreaming = True

    def mapInArrow(self, *args: Any) -> Any:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeDataFrame)

    __hash__ = object.__hash__


class FakeQueue:
    """Stands for a queue.Queue (which holds locks, and does not pickle): from_q() keeps it."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        raise NotImplementedError

    get_nowait = get

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeQueue)

    __hash__ = object.__hash__


Make = Callable[[Stream[Any]], Stream[Any]]

#: One example per registered operator, built below an upstream (ignored by sources).
EXAMPLES: dict[str, Make] = {
    "stream": lambda s: Stream(s),
    "map": lambda s: s.map(operator.add, 3),
    "starmap": lambda s: s.starmap(operator.mul, stream_name="product"),
    "filter": lambda s: s.filter(positive),
    "remove": lambda s: s.remove(positive),
    "pluck": lambda s: s.pluck([1, 0]),
    "flatten": lambda s: s.flatten(),
    "accumulate": lambda s: s.scan(operator.add, start=0, key=0, with_state=True),
    "frequencies": lambda s: s.frequencies(),
    "stateful_map": lambda s: s.stateful_map(keep_state, start=0, key=1),
    "slice": lambda s: s.slice(1, 9, 2),
    "unique": lambda s: s.unique(maxsize=3, hashable=False),
    "collect": lambda s: s.collect(),
    "zip": lambda s: s.zip(Stream(), "literal", maxsize=4),
    "combine_latest": lambda s: s.combine_latest(Stream()),
    "zip_latest": lambda s: s.zip_latest(Stream()),
    "union": lambda s: s.union(Stream()),
    "join": lambda s: s.join(Stream(), key=(0, "id"), within="2s", time=1, lateness=0.5),
    "lookup": lambda s: s.lookup(Stream(), key=0, table_key="id", default=None),
    "buffer": lambda s: s.buffer(5),
    "latest": lambda s: s.latest(),
    "map_async": lambda s: s.map_async(slow, parallelism=2),
    "gather": lambda s: s.scatter().gather(),
    "timed_window": lambda s: s.timed_window(10, time=0, lateness=2),
    "session_window": lambda s: s.session_window(30, time=1, lateness=5, key=0),
    "timed_window_unique": lambda s: s.timed_window_unique(1.0, keep="last"),
    "delay": lambda s: s.delay(0.5),
    "rate_limit": lambda s: s.rate_limit(0.5),
    "partition": lambda s: s.partition(3, key=0),
    "partition_unique": lambda s: s.partition_unique(2, keep="last"),
    "sliding_window": lambda s: s.sliding_window(3, return_partial=False),
    "sink": lambda s: s.sink(print),
    "sink_to_list": lambda s: _sink_to_list(s),
    "sink_to_textfile": lambda s: s.sink_to_textfile("/dev/null", end="\r\n"),
    "sink_to_durable_textfile": lambda s: s.sink_to_durable_textfile("/tmp/x.txt", fsync=False),
    "sink_to_redis": lambda s: s.sink_to_redis("events", maxlen=10),
    "sink_to_stdout": lambda s: s.sink_to_stdout(format="text"),
    "progress": lambda s: s.progress(total=10, desc="items"),
    "to_dask": lambda s: s.to_dask(),
    "scatter": lambda s: s.scatter(batch_size=7, ordered=False),
    "to_spark": lambda s: s.to_spark(batch_size=7, interval=2.0),
    "from_iterable": lambda s: Stream.from_iterable([1, 2]),
    "from_textfile": lambda s: Stream.from_textfile("/dev/null", delimiter=";"),
    "from_tcp": lambda s: Stream.from_tcp(9999),
    "from_http_server": lambda s: Stream.from_http_server(8080, path="/in"),
    "from_periodic": lambda s: Stream.from_periodic(int, poll_interval=2.0),
    "from_q": lambda s: Stream.from_q(FakeQueue(), sleep_time=0.5),
    "from_process": lambda s: Stream.from_process(["cat"], with_stderr=True),
    "from_redis": lambda s: Stream.from_redis("events", group="g", consumer="c"),
    "from_stdin": lambda s: Stream.from_stdin(format="text"),
    "filenames": lambda s: Stream.filenames("/tmp/*.csv", poll_interval=2.0),
    "from_spark": lambda s: Stream.from_spark(FakeDataFrame(), checkpoint="/tmp/cp"),
    "from_kafka": lambda s: Stream.from_kafka(["events"], {"bootstrap.servers": "127.0.0.1:1",
                                                          "group.id": "g"}, batch=10),
    "from_kafka_batched": lambda s: Stream.from_kafka_batched(
        "events", {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"},
        max_batch_size=5).upstreams[0],
    "to_kafka": lambda s: s.to_kafka("out", {"bootstrap.servers": "127.0.0.1:1"}),
    "from_mqtt": lambda s: Stream.from_mqtt("localhost", 1883, "a/#", keepalive=30, qos=1),
    "to_mqtt": lambda s: s.to_mqtt("localhost", 1883, "a/b", qos=1, retain=True),
    "from_websocket": lambda s: Stream.from_websocket("localhost", 0, {"max_size": 2**16},
                                                      max_connections=8),
    "to_websocket": lambda s: s.to_websocket("ws://localhost:1/in", {"open_timeout": 5}),
}


def _sink_to_list(s: Stream[Any]) -> Stream[Any]:
    s.sink_to_list()
    return s.downstreams[-1]


def _ours(name: str) -> bool:
    return operator_class(name).__module__.split(".")[0] in ("streams", "streams_dask",
                                                            "streams_spark")


def _comparable(spec: NodeSpec) -> dict[str, Any]:
    # Ids and neighbours belong to the graph a node sits in, not to the node.
    skip = {"id", "upstream_ids", "downstream_ids", "errors_id", "backend"}
    out = {f.name: getattr(spec, f.name) for f in fields(spec) if f.name not in skip}
    out["params"] = dict(spec.params)
    return out


def test_every_registered_operator_has_an_example() -> None:
    missing = sorted(n for n in _registry if _ours(n) and n not in EXAMPLES)
    assert not missing, f"add an example to EXAMPLES for {missing}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_build_from_describe_gives_the_same_description(name: str) -> None:
    node = EXAMPLES[name](Stream())
    spec = node.describe()
    assert spec.operator == name
    ups: list[Stream[Any]] = [Stream() for _ in spec.upstream_ids]
    if name == "gather":
        ups = [Stream().scatter()]  # gather() ends a segment
    rebuilt = build(spec, ups)
    assert type(rebuilt) is type(node)
    assert _comparable(rebuilt.describe()) == _comparable(spec)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_descriptions_pickle(name: str) -> None:
    spec = EXAMPLES[name](Stream()).describe()
    again = cloudpickle.loads(cloudpickle.dumps(spec))
    assert _comparable(again) == _comparable(spec)
    assert again.params == spec.params  # a read-only mapping again


def test_a_description_of_module_level_functions_pickles_with_the_standard_pickle() -> None:
    spec = Stream().map(double).describe()
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec
    with pytest.raises(TypeError):
        again.params["args"] = ()  # type: ignore[index]


@given(n=st.integers(1, 50), key=st.one_of(st.none(), st.integers(0, 3)),
       start=st.integers(), returns_state=st.booleans(), with_state=st.booleans(),
       lateness=st.floats(0, 100), size=st.floats(0.001, 100))
def test_parameters_survive_the_round_trip(n: int, key: Any, start: int, returns_state: bool,
                                           with_state: bool, lateness: float,
                                           size: float) -> None:
    # On a virtual clock: a processing-time window on the real one would keep
    # its timer on the loop thread for the rest of the run (every 20 us for
    # the smallest slide here).
    with use_clock(VirtualClock()):
        s = Stream()
        nodes = [s.partition(n, key=key), s.sliding_window(n, return_partial=with_state),
                 s.scan(operator.add, start=start, key=key, returns_state=returns_state,
                        with_state=with_state),
                 s.timed_window(size, time=key if key is not None else 0, lateness=lateness),
                 s.timed_window(size, slide=size / n, time=0, lateness=lateness, key=key),
                 s.timed_window(size, slide=size / n, key=key),  # processing time
                 s.session_window(size, time=0, lateness=lateness, key=key),
                 s.scan(operator.add, start=start, key=0, ttl=size, time=1),
                 s.stateful_map(keep_state, key=0, ttl=size, time=1, on_expire=keep_state),
                 s.unique(maxsize=n, key=key if key is not None else (lambda x: x))]
        for node in nodes:
            spec = node.describe()
            rebuilt = build(spec, [Stream()])
            assert type(rebuilt) is type(node)
            assert _comparable(rebuilt.describe()) == _comparable(spec)


def test_a_rebuilt_node_computes_what_the_original_computes() -> None:
    source = Stream()
    original = source.scan(lambda a, x: a + x, start=10, key=lambda x: x % 2)
    expected = original.sink_to_list()
    copy_source = Stream()
    got = build(original.describe(), [copy_source]).sink_to_list()
    for x in range(6):
        source.emit(x)
        copy_source.emit(x)
    assert got == expected == [(0, 10), (1, 11), (0, 12), (1, 14), (0, 16), (1, 19)]


def test_an_undeclared_plugin_is_local_only_until_it_says_otherwise() -> None:
    @Stream.register_api()
    class Halve(Stream[Any]):
        def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
            return self._emit(x / 2)

    spec = Stream().halve().describe()  # type: ignore[attr-defined]
    assert spec.operator == "halve"
    assert spec.traits.local_only is not None and "Halve" in spec.traits.local_only
    with pytest.raises(TypeError, match=r"halve\(\) cannot run on a Dask segment.*Halve"):
        Stream().scatter().halve()  # type: ignore[attr-defined]

    class Third(Halve):
        _local_only = None

        def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
            return self._emit(x / 3)

    Stream.register_api()(Third)
    assert Stream().third().describe().traits.local_only is None  # type: ignore[attr-defined]


def test_an_unknown_operator_name_says_what_to_import() -> None:
    with pytest.raises(LookupError, match=r"no operator named 'nope'.*import"):
        operator_class("nope")
