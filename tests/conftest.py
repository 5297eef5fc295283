"""Shared fixtures: a virtual clock for anything timed, the Spark session, the Dask cluster."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from streams import VirtualClock, use_clock
from tests.dask_threads import dask_threads, open_now

pytest_plugins = ["tests.kafka_broker", "tests.mqtt_broker"]  # the broker fixtures

# No deadline: Hypothesis's per-example deadline (200 ms) is a wall-clock
# assertion, and this suite runs on shared, loaded machines. What a property
# checks is the result, never the time it took.
settings.register_profile("streams", deadline=None)
settings.load_profile("streams")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The slow tests first, in their order: pytest-xdist's worksteal gives
    # each worker a contiguous share and steals from a share's end, so the
    # run ends on short tests, not with a worker idle while the other
    # finishes a test of two minutes.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


#: Tests that passed only on a retry (``passed_on_retry``, see tests/compat), by node id.
_RETRIED: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, text in report.user_properties:
        if name == "passed_on_retry" and report.passed:
            _RETRIED[report.nodeid] = str(text)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _RETRIED:
        terminalreporter.section("passed on a retry")
        for nodeid, text in sorted(_RETRIED.items()):
            terminalreporter.line(f"{nodeid}: {text}")


@pytest.fixture
def clock() -> Iterator[VirtualClock]:
    """A virtual clock installed for the test: time moves only by ``advance``."""
    with use_clock(VirtualClock()) as c:
        yield c


# The suite's Spark JVMs (the shared session, and those test processes start,
# which inherit the variable) run many small queries and few long ones: C1's
# quick compiles pay off there, C2's do not. On the 2-core CI machine C2
# compiler threads took a third of the shared JVM's CPU; without them the
# JVM used about 40% less CPU over the same Spark tests (see the commit).
# The serial collector, for heaps this small, used about a tenth less (two
# test files, 2 paired runs: 119 and 102 CPU-seconds against 121 and 126).
# Benchmarks keep the JVM's defaults; a user's own setting wins here.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# Hypothesis's warning about the random module while Dask's threads draw
# from it (see tests/dask_threads.py).
_DASK_RANDOM = ("ignore:Do not use the `random` module inside strategies"
                ":hypothesis.errors.HypothesisDeprecationWarning")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # Before pytest's warnings plugin reads the test's filterwarnings marks.
    if open_now() or item.get_closest_marker("dask") is not None:
        item.add_marker(pytest.mark.filterwarnings(_DASK_RANDOM))
    yield


# Test directories whose tests run functions on Spark.
SPARK_TEST_DIRS = ("streams_spark", "equivalence")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The shared local SparkSession (UI off, Arrow on, 2 shuffle partitions).

    Starting the JVM costs seconds (more on a loaded 2-core machine), so one
    session serves the whole run of a test process (each pytest-xdist worker
    has its own): the one ``to_spark()`` uses when given none.
    """
    # PySpark imports IPython when it first names a call site for its errors,
    # and IPython's jedi raises the recursion limit: import it now, not under
    # a Hypothesis test, which warns when the limit changes while it runs.
    import IPython  # noqa: F401

    from streams_spark.session import default_session

    yield default_session()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    """A Dask ``LocalCluster`` of two single-threaded worker processes on loopback.

    Shared by the session: starting one costs seconds.
    """
    from distributed import LocalCluster

    with dask_threads(), LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      host="127.0.0.1", dashboard_address=":0") as c:
        yield c


@pytest.fixture(scope="session")
def client(cluster: Any) -> Iterator[Any]:
    """A client of :func:`cluster`, not installed as the default client."""
    from distributed import Client

    with dask_threads(), Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(autouse=True)
def _spark_functions_by_value(request: pytest.FixtureRequest) -> None:
    # Spark's Python workers cannot import test modules: the functions they
    # define travel by value. PySpark ships its own copy of cloudpickle and
    # the build-time check uses the installed one: register with both.
    if request.path.parent.name not in SPARK_TEST_DIRS:
        return
    import cloudpickle
    from pyspark import cloudpickle as spark_cloudpickle

    module = sys.modules.get(request.module.__name__)
    if module is None:
        return
    for pickler in (cloudpickle, spark_cloudpickle):
        if module.__name__ not in pickler.list_registry_pickle_by_value():
            pickler.register_pickle_by_value(module)


class Crash(Exception):
    """Stands for the process dying: raised from inside a pipeline."""


#: build(out, ckpt, tap) -> (source, checkpointer, durable file sink): a
#: pipeline writing to the file ``out``, checkpointed to ``ckpt``, that sends
#: each output element to ``tap`` too.
Build = Any


def crash_and_restart(build: Build, tmp: Any, crashes: list[int]) -> None:
    """Assert that runs dying and restarting from their checkpoint give the uninterrupted output.

    A run dies (raises :class:`Crash` from ``tap``) after ``k`` output
    elements, for each ``k`` in ``crashes``, after handing its writes to the
    kernel; the next run restarts from the checkpoint. The final file must
    equal that of a run that never died.
    """
    from streams import NodeError

    def run(out: Any, ckpt: Any, crash_after: int | None) -> bool:
        seen = 0

        def tap(_: Any) -> None:
            nonlocal seen
            seen += 1
            if crash_after is not None and seen >= crash_after:
                raise Crash

        source, cp, sink = build(out, ckpt, tap)
        try:
            source.start()
        except NodeError as e:
            assert isinstance(e.__cause__, Crash)
            # A dead process writes no more checkpoints; this one's writer
            # must not write after the next run has started.
            cp.wait()
            if sink._fp is not None:
                sink._fp.close()  # what it wrote reaches the file: the worst case
            return False
        return True

    run(tmp / "clean.txt", tmp / "clean", None)
    for k in crashes:
        if run(tmp / "out.txt", tmp / "ckpt", k):
            break
    else:
        run(tmp / "out.txt", tmp / "ckpt", None)
    assert (tmp / "out.txt").read_text() == (tmp / "clean.txt").read_text()


@pytest.fixture(name="crash_and_restart", scope="session")
def _crash_and_restart() -> Any:
    """:func:`crash_and_restart`, for tests in any directory."""
    return crash_and_restart


def record_checkpoints(cp: Any, what: Any) -> list[Any]:
    """Record ``what(nodes)`` (``nodes`` in walk order) as each checkpoint of ``cp`` is taken."""
    taken: list[Any] = []
    original = cp._take

    def spy(nodes: Any, *args: Any) -> None:
        taken.append(what(nodes))
        original(nodes, *args)

    cp._take = spy
    return taken


@pytest.fixture(name="record_checkpoints", scope="session")
def _record_checkpoints() -> Any:
    """:func:`record_checkpoints`, for tests in any directory."""
    return record_checkpoints
