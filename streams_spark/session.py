"""The embedded SparkSession used when ``to_spark()`` is given none.

One local session per process, created on first use and reused: starting
the JVM costs seconds, so a pipeline (or a test suite) pays it once.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

__all__ = ["LOCAL_CONF", "default_session"]

#: Settings of the embedded session: no UI, Arrow on, few shuffle partitions
#: (micro-batches are small; 200 partitions would cost 200 tasks per shuffle).
LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    "spark.python.worker.reuse": "true",
}

_lock = threading.Lock()
_session: Any = None


def default_session(master: str | None = None) -> Any:
    """The reused local SparkSession (``local[*]``, UI off, Arrow on).

    An already active session (for instance one a user built for a cluster)
    is returned as is.

    Examples
    --------
    >>> spark = default_session()
    >>> spark.conf.get("spark.sql.execution.arrow.pyspark.enabled")
    'true'
    """
    global _session
    with _lock:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        if _session is not None and not _session.sparkContext._jsc.sc().isStopped():
            return _session
        # Workers must run this interpreter (same packages); loopback keeps a
        # laptop or CI machine from binding a public interface.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = SparkSession.builder.master(master or "local[2]").appName("streams")
        for k, v in LOCAL_CONF.items():
            builder = builder.config(k, v)
        # Errors only from the JVM's log, from its start on (setLogLevel comes
        # too late for the start-up warnings); a user's own settings win.
        if "log4j" not in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
            config = os.path.join(os.path.dirname(__file__), "log4j2.properties")
            builder = builder.config("spark.driver.extraJavaOptions",
                                     f"-Dlog4j2.configurationFile=file:{config}")
        _session = builder.getOrCreate()
        _session.sparkContext.setLogLevel("ERROR")
        return _session
