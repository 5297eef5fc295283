"""Build-time refusals: they name the operator and say what to do."""

from __future__ import annotations

import threading

import pytest

import streams_spark  # noqa: F401
from streams import Stream


def test_unsupported_operator_is_refused_at_build_time() -> None:
    s = Stream().to_spark().map(abs)
    with pytest.raises(TypeError, match=r"zip\(\) cannot run in a Spark segment.*gather\(\)"):
        s.zip(Stream())
    with pytest.raises(TypeError, match=r"sink\(\) cannot run in a Spark segment"):
        s.sink(print)
    with pytest.raises(TypeError, match=r"partition\(\) cannot run.*timeout is wall-clock time"):
        s.partition(3, timeout=1.0)


def test_unpicklable_function_is_refused_at_build_time() -> None:
    lock = threading.Lock()

    class Holder:
        def __call__(self, x: int) -> int:
            with lock:
                return x

    with pytest.raises(TypeError, match=r"map\(Holder\).*cannot be pickled.*gather\(\)"):
        Stream().to_spark().map(Holder())


def test_branching_inside_a_segment_is_refused() -> None:
    s = Stream().to_spark()
    s.map(abs)
    with pytest.raises(ValueError, match="one linear chain"):
        s.map(str)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        Stream().to_spark(batch_size=0)


def test_the_embedded_session_starts_without_log_lines() -> None:
    import subprocess
    import sys

    script = ("import streams_spark\n"
              "spark = streams_spark.default_session()\n"
              "print(spark.range(3).count())\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, check=True)
    assert run.stdout.strip() == "3"
    # Spark's default log4j profile printed these at every start.
    for line in ("log4j profile", "Setting default log level", "NativeCodeLoader"):
        assert line not in run.stderr
