"""What executors get: the library's zip, and the user's own functions by value.

The cluster test (test_spark_cluster.py) runs both on executors that lack
``streams``; these check the parts, without a cluster.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
from pyspark import cloudpickle

import streams_spark  # noqa: F401
from streams import Stream
from streams_spark.shipping import by_value, library_zip


def test_the_library_zip_runs_a_pipeline_in_a_python_without_streams(tmp_path: Path) -> None:
    # -S: no site, so the editable install's .pth is never read; the
    # third-party packages stay reachable through PYTHONPATH.
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, sys.argv[1])
        import streams, streams_spark
        from streams import Stream
        s = Stream()
        out = s.map(lambda x: x + 1).scan(lambda a, b: a + b).sink_to_list()
        for i in range(4):
            s.emit(i)
        print(streams.__file__, out)
    """)
    env = {"PYTHONPATH": sysconfig.get_paths()["purelib"], "PATH": "/usr/bin:/bin"}
    without = subprocess.run([sys.executable, "-S", "-c", "import streams"], env=env,
                             cwd=tmp_path, capture_output=True, text=True)
    assert "No module named 'streams'" in without.stderr
    done = subprocess.run([sys.executable, "-S", "-c", code, library_zip()], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    where, out = done.stdout.split(" ", 1)
    assert where.startswith(library_zip()) and out.strip() == "[1, 3, 6, 10]"


def test_a_function_of_a_users_module_travels_by_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_helpers_for_spark.py").write_text("def double(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    helpers = importlib.import_module("my_helpers_for_spark")
    registry = cloudpickle.list_registry_pickle_by_value
    assert "my_helpers_for_spark" not in registry()
    Stream().to_spark().map(helpers.double).gather()  # registered when the graph is built
    assert "my_helpers_for_spark" in registry()
    # By value: the function's code, which an executor without the module can load.
    payload = cloudpickle.dumps(helpers.double)
    del sys.modules["my_helpers_for_spark"]
    sys.path.remove(str(tmp_path))  # as on an executor (monkeypatch restores sys.path)
    importlib.invalidate_caches()
    with pytest.raises(ImportError):
        importlib.import_module("my_helpers_for_spark")
    assert cloudpickle.loads(payload)(21) == 42


def test_the_users_modules_a_users_module_imports_travel_by_value_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pipeline_ imports parsing_ (a module and a name from it), which imports
    # units_: none of them is installed, so an executor can import none.
    (tmp_path / "units_.py").write_text(
        "class Metres:\n    def __init__(self, v):\n        self.v = v\n")
    (tmp_path / "parsing_.py").write_text(
        "from units_ import Metres\n\ndef parse(s):\n    return Metres(int(s))\n")
    (tmp_path / "pipeline_.py").write_text(
        "import json\nimport parsing_\nfrom parsing_ import parse\n\n"
        "def double(s):\n    return json.dumps(2 * parsing_.parse(s).v + 0 * parse(s).v)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    pipeline = importlib.import_module("pipeline_")
    names = {"pipeline_", "parsing_", "units_"}
    Stream().to_spark().map(pipeline.double).gather()
    assert names <= set(cloudpickle.list_registry_pickle_by_value())
    assert "json" not in cloudpickle.list_registry_pickle_by_value()
    payload = cloudpickle.dumps(pipeline.double)
    for name in names:
        del sys.modules[name]
    sys.path.remove(str(tmp_path))  # as on an executor (monkeypatch restores sys.path)
    importlib.invalidate_caches()
    for name in names:
        with pytest.raises(ImportError):
            importlib.import_module(name)
    assert cloudpickle.loads(payload)("21") == "42"


def test_installed_and_library_functions_stay_by_reference() -> None:
    import json

    by_value(json.dumps)
    by_value(Stream.map)
    by_value(sysconfig.get_paths)
    assert not {"json", "streams.core", "sysconfig"} & set(
        cloudpickle.list_registry_pickle_by_value())
