"""Run streamz 0.6.6's own test files against streams.

The test files are read from the installed streamz wheel at collection time
(never copied into this repository), their imports are rewritten to
``streams`` / ``streams_dask``, and the result is executed in the namespace of
a small shim module here (``test_streamz_core.py`` and so on), so pytest
collects streamz's tests under our paths. Tracebacks point at the original
lines: the rewrite keeps every line where it was.

``STREAMS_COMPAT_TARGET=streamz`` runs the same files unmodified against
streamz itself (no expected failures applied): that is how the tests that
pass on streamz were counted.

What streamz's tests need from outside the wheel is provided here: the
``asyncio`` marker (streamz runs pytest-asyncio), ``flaky`` (a small retrying
decorator honouring ``max_runs``), and ``streamz.utils_test``'s helpers
(:mod:`utils_test` here, rebuilt on streams where they touch the library).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import importlib.util
import inspect
import os
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
TARGET = os.environ.get("STREAMS_COMPAT_TARGET", "streams")
if TARGET not in ("streams", "streamz"):
    raise ValueError(f"STREAMS_COMPAT_TARGET must be streams or streamz, not {TARGET!r}")

streamz = pytest.importorskip("streamz")
if streamz.__version__ != "0.6.6":  # the expected failures are those of 0.6.6's tests
    pytest.skip(f"tests/compat runs streamz 0.6.6's tests, not {streamz.__version__}'s",
                allow_module_level=True)

STREAMZ_TESTS = Path(streamz.__file__).parent / "tests"


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# Import rewriting: module paths only, line by line, so line numbers hold.
_MODULES = [
    ("streamz.tests.py3_test_core", "streams_compat.py3_test_core"),
    ("streamz.utils_test", "streams_compat.utils_test"),
    ("streamz.dask", "streams_dask"),
    ("streamz", "streams"),
]
_RELATIVE = re.compile(r"^(\s*from\s+)\.\.(\w+)", re.M)  # ``from ..graph import``
# streamz's MQTT round trip talks to a public broker; this machine reaches
# none, so it talks to a mosquitto on loopback (see compat_mqtt_broker).
_PUBLIC_MQTT_BROKER = '"mqtt.eclipseprojects.io", 1883'


def rewrite(source: str, target: str = TARGET) -> str:
    """streamz's imports in ``source`` rewritten to streams.

    >>> rewrite("from streamz.dask import scatter\\nimport streamz as sz", "streams")
    'from streams_dask import scatter\\nimport streams as sz'
    >>> rewrite("from ..graph import _clean_text", "streams")
    'from streams.graph import _clean_text'
    """
    lines = []
    for line in source.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped.startswith(("import ", "from ")):
            if target == "streams":
                for old, new in _MODULES:
                    line = re.sub(rf"\b{re.escape(old)}\b(?![\w])", new, line)
            else:
                line = line.replace("streamz.utils_test", "streams_compat.utils_test")
                line = line.replace("streamz.tests.py3_test_core", "streams_compat.py3_test_core")
            lines.append(line)
        elif target == "streams" and "captured_logger('streamz')" in line:
            # The library's logger is named after the library (README: compared with streamz).
            lines.append(line.replace("captured_logger('streamz')", "captured_logger('streams')"))
        else:
            lines.append(line)
    source = "".join(lines).replace(_PUBLIC_MQTT_BROKER, "*compat_mqtt_broker()")
    if target == "streams":
        source = _RELATIVE.sub(r"\1streams.\2", source)
    else:
        source = _RELATIVE.sub(r"\1streamz.\2", source)
    return source


def _missing(module: str, name: str) -> type:
    """Stands for a name streams does not have: the tests using it fail, not the whole file."""

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ImportError(f"cannot import name {name!r} from {module!r} (streamz has it)")

    return type(name, (), {"__init__": fail, "__missing_name__": True})


class _TolerantModule(types.ModuleType):
    def __init__(self, module: types.ModuleType) -> None:
        super().__init__(module.__name__)
        self.__dict__["_module"] = module

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self.__dict__["_module"], name)
        except AttributeError:
            if name.startswith("__"):
                raise
            return _missing(self.__name__, name)


def _tolerant_import(name: str, globals: Any = None, locals: Any = None,
                     fromlist: Any = (), level: int = 0) -> Any:
    module = builtins.__import__(name, globals, locals, fromlist, level)
    if not name.startswith(("streams", "streamz")):
        return module
    if not fromlist:  # ``import streams as sz``: ``sz.absent`` fails where it is used
        return _TolerantModule(module)
    absent = [n for n in fromlist if n != "*" and not hasattr(module, n)]
    if not absent:
        return module
    proxy = types.ModuleType(module.__name__)
    proxy.__dict__.update(module.__dict__)
    for n in absent:
        try:  # a submodule not imported yet
            importlib.import_module(f"{module.__name__}.{n}")
            setattr(proxy, n, getattr(module, n))
        except ImportError:
            setattr(proxy, n, _missing(module.__name__, n))
    return proxy


def load_streamz_tests(filename: str, namespace: dict[str, Any]) -> None:
    """Execute streamz's ``tests/<filename>``, rewritten, in ``namespace``."""
    path = STREAMZ_TESTS / filename
    code = compile(rewrite(path.read_text()), str(path), "exec")
    namespace["__builtins__"] = {**builtins.__dict__, "__import__": _tolerant_import}
    namespace["compat_mqtt_broker"] = compat_mqtt_broker
    exec(code, namespace)


_mqtt_broker: Any = None


def compat_mqtt_broker() -> tuple[str, int]:
    """Host and port of a mosquitto on loopback, started on first use (a skip without one).

    Stopped at the end of the session by :func:`_stop_compat_mqtt_broker`.
    """
    global _mqtt_broker
    if _mqtt_broker is None:
        import tempfile

        from tests.mqtt_broker import start_broker

        _mqtt_broker = start_broker(Path(tempfile.mkdtemp(prefix="compat-mqtt-")))
    return _mqtt_broker.host, _mqtt_broker.port


@pytest.fixture(scope="session", autouse=True)
def _stop_compat_mqtt_broker() -> Any:
    yield
    global _mqtt_broker
    if _mqtt_broker is not None:
        import shutil

        _mqtt_broker.stop()
        shutil.rmtree(_mqtt_broker.directory, ignore_errors=True)
        _mqtt_broker = None


def _retrying(func: Callable[..., Any], max_runs: int,
              passed_late: Callable[[int, Exception], None] | None = None) -> Callable[..., Any]:
    """``func``, run up to ``max_runs`` times until it raises no exception.

    ``passed_late(attempt, first_failure)`` is called when it passes after failing.
    """

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        first: Exception | None = None
        for attempt in range(1, max_runs + 1):
            try:
                result = func(*args, **kwargs)
            except Exception as exc:
                if attempt == max_runs:
                    raise
                first = first or exc
                continue
            if first is not None and passed_late is not None:
                passed_late(attempt, first)
            return result
        return None

    return run


def flaky(max_runs: int = 2, min_passes: int = 1) -> Callable[[Any], Any]:
    """streamz's tests use the ``flaky`` plugin: retry up to ``max_runs`` times."""
    return lambda func: _retrying(func, max_runs)


def _retried(item: pytest.Function, reason: str, max_runs: int = 3) -> Callable[..., Any]:
    """``item``'s test, run up to ``max_runs`` times; a pass after a failure is recorded.

    The record (a ``passed_on_retry`` user property: the attempt, ``reason``
    and the first failure) is printed at the end of the run by the suite's
    ``pytest_terminal_summary`` (tests/conftest.py), so a timing margin that
    shrinks shows in CI's log before it fails a run.
    """

    def record(attempt: int, first: Exception) -> None:
        item.user_properties.append(("passed_on_retry", (
            f"passed on attempt {attempt} of {max_runs}; first failure: "
            f"{type(first).__name__}: {first}; on RETRY because it {reason}")))

    return _retrying(item.obj, max_runs, record)


# The support modules streamz's tests import, under the names the rewrite gives them.
_package = types.ModuleType("streams_compat")
_package.__path__ = []  # type: ignore[attr-defined]
_package.load_streamz_tests = load_streamz_tests  # type: ignore[attr-defined]
_package.rewrite = rewrite  # type: ignore[attr-defined]
sys.modules["streams_compat"] = _package
_package.utils_test = _load("streams_compat.utils_test", HERE / "utils_test.py")  # type: ignore[attr-defined]
_flaky = types.ModuleType("flaky")
_flaky.flaky = flaky  # type: ignore[attr-defined]
sys.modules.setdefault("flaky", _flaky)
_py3 = types.ModuleType("streams_compat.py3_test_core")
sys.modules["streams_compat.py3_test_core"] = _py3
load_streamz_tests("py3_test_core.py", _py3.__dict__)
_known = _load("streams_compat.known_failures", HERE / "known_failures.py")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "asyncio: a coroutine test (streamz runs pytest-asyncio)")
    # distributed's test harness (gen_cluster) can leave its own RPC coroutines
    # unawaited when a streamz test fails inside it; they are reported when the
    # session ends, outside any test: not the library's, so not an error here.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:Exception ignored in. <coroutine object PooledRPCCall"
        ":pytest.PytestUnraisableExceptionWarning")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests on a fresh asyncio loop, as pytest-asyncio does."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {n: pyfuncitem.funcargs[n] for n in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark streamz's tests that fail on streamz itself, the slow ones, and our known failures."""
    for item in items:
        if item.path.parent != HERE or not item.path.name.startswith("test_streamz_"):
            continue
        key = f"{item.path.name}::{item.name}"
        # streamz's tests close loops under running subprocesses and
        # transports: what those leave behind is collected in the test's own
        # teardown (see _fresh_event_loop_policy) and is theirs, not ours.
        item.add_marker(pytest.mark.filterwarnings(
            "ignore::pytest.PytestUnraisableExceptionWarning"))
        reason = _known.SKIP.get(key)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
            continue
        if key in _known.RETRY and isinstance(item, pytest.Function):
            item.obj = _retried(item, _known.RETRY[key])
        if TARGET == "streams":
            cause = _known.cause_of(key)
            if cause is not None:
                item.add_marker(pytest.mark.xfail(strict=True, reason=cause))
                # A test failing half-way may leave coroutines never awaited.
                item.add_marker(pytest.mark.filterwarnings(
                    "ignore::pytest.PytestUnraisableExceptionWarning"))


@pytest.fixture(autouse=True)
def _fresh_event_loop_policy() -> Any:
    """After each streamz test, a fresh asyncio policy for whatever runs next.

    Some of streamz's tests close their loop while a subprocess they started
    is still registered with the policy's child watcher; the next
    ``asyncio.run`` anywhere in the session would then fail with "Event loop
    is closed" when the watcher reports that child to the dead loop.
    """
    yield
    import asyncio
    import gc

    gc.collect()  # what the test left behind is reported here, not in a later test
    asyncio.set_event_loop_policy(None)
