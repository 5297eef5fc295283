"""Checkpoint and inbox storage at Hadoop-compatible paths.

A checkpoint or inbox path means what it means to Spark: a plain path is
resolved by Hadoop against the default file system (``fs.defaultFS``: the
local disk, or HDFS on a cluster), and ``file://``, ``hdfs://``, ``s3a://``
... name their file system. Every path is qualified once, on the driver,
through Hadoop (``Path.getFileSystem(conf).makeQualified``), so the files the
driver writes are the ones Spark's executors read, on any node.

A ``file:`` location is written with the operating system's calls (fast,
fsync'ed); any other through Hadoop's ``FileSystem`` over the JVM gateway.
Writes are atomic on both: a hidden temporary file (Spark's file sources
skip names that start with ``.``) renamed into place, or for states a new
numbered file, since a rename onto an existing file is not atomic on every
Hadoop file system.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = ["Location", "location", "scratch_location"]


class Location:
    """A directory at a qualified URI, read and written from the driver.

    Parameters
    ----------
    uri : str
        A qualified URI (``file:/tmp/ckpt``, ``hdfs://nn:8020/ckpt``).
    fs : Hadoop FileSystem (py4j), optional
        Used for anything but ``file:``, and for ``file:`` when given.
    jvm : py4j JVM view, optional
        Needed with ``fs``.

    Examples
    --------
    >>> import tempfile
    >>> d = Location("file://" + tempfile.mkdtemp())
    >>> d.child("inbox").write_atomic("a.bin", b"x")
    >>> d.child("inbox").names(), d.child("inbox").read("a.bin")
    (['a.bin'], b'x')
    """

    def __init__(self, uri: str, fs: Any = None, jvm: Any = None) -> None:
        self.uri = uri.rstrip("/") or uri
        parsed = urlparse(self.uri)
        self.local: str | None = None
        if parsed.scheme in ("", "file") and fs is None:
            self.local = unquote(parsed.path) or "/"
        elif fs is None or jvm is None:
            raise ValueError(f"{uri}: a location outside the local file system needs "
                             "a Spark session (Hadoop's FileSystem) to be written")
        self.fs = fs
        self.jvm = jvm

    def __repr__(self) -> str:
        return f"Location({self.uri!r})"

    def __str__(self) -> str:
        return self.uri

    def child(self, name: str) -> Location:
        """The location ``name`` under this one."""
        return Location(f"{self.uri}/{name}", self.fs, self.jvm)

    def _path(self, name: str | None = None) -> Any:
        return self.jvm.org.apache.hadoop.fs.Path(
            self.uri if name is None else f"{self.uri}/{name}")

    def makedirs(self) -> None:
        """Create the directory (and its parents) if missing."""
        if self.local is not None:
            os.makedirs(self.local, exist_ok=True)
        else:
            self.fs.mkdirs(self._path())

    def names(self) -> list[str]:
        """The names of the entries in the directory (none if it is missing), sorted."""
        if self.local is not None:
            return sorted(os.listdir(self.local)) if os.path.isdir(self.local) else []
        if not self.fs.exists(self._path()):
            return []
        return sorted(s.getPath().getName() for s in self.fs.listStatus(self._path()))

    def read(self, name: str) -> bytes:
        """The bytes of the file ``name``."""
        if self.local is not None:
            with open(os.path.join(self.local, name), "rb") as f:
                return f.read()
        stream = self.fs.open(self._path(name))
        try:
            # A Java byte[] crosses the gateway as a copy: read it whole there.
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write_atomic(self, name: str, data: bytes, fsync: bool = True) -> None:
        """Write the file ``name``: whole or not at all (temporary file, then rename)."""
        self.makedirs()
        tmp = f".{name}.{uuid.uuid4().hex[:8]}.tmp"
        if self.local is not None:
            path = os.path.join(self.local, tmp)
            with open(path, "wb") as f:
                f.write(data)
                if fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(path, os.path.join(self.local, name))
            return
        src, dst = self._path(tmp), self._path(name)
        out = self.fs.create(src, True)
        try:
            out.write(bytearray(data))
            if fsync:
                out.hsync()
        finally:
            out.close()
        if self.fs.exists(dst):
            self.fs.delete(dst, False)
        if not self.fs.rename(src, dst):
            raise OSError(f"could not rename {src} to {dst}")

    def delete(self, name: str | None = None) -> None:
        """Remove the entry ``name`` (or the whole directory), recursively."""
        if self.local is not None:
            path = self.local if name is None else os.path.join(self.local, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.remove(path)
            return
        self.fs.delete(self._path(name), True)

    # -- numbered states: a new file per save, the highest number wins -------

    _STATE = re.compile(r"^state-(\d{12})\.pickle$")

    def save_state(self, data: bytes, fsync: bool = True) -> None:
        """Save ``data`` as the newest state, then remove the older ones.

        A new name per save: a reader sees the previous state or this one,
        never a half-written file, on file systems whose rename cannot
        replace a file atomically (HDFS, object stores).
        """
        numbers = self._state_numbers()
        n = numbers[-1] + 1 if numbers else 0
        self.write_atomic(f"state-{n:012d}.pickle", data, fsync)
        for old in numbers:  # a crash before this leaves them: the newest still wins
            self.delete(f"state-{old:012d}.pickle")

    def load_state(self) -> bytes | None:
        """The newest state saved, or None."""
        numbers = self._state_numbers()
        if numbers:
            return self.read(f"state-{numbers[-1]:012d}.pickle")
        if "state.pickle" in self.names():  # written before numbered states
            return self.read("state.pickle")
        return None

    def _state_numbers(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(self._STATE.match, self.names()) if m)


def _hadoop(session: Any) -> tuple[Any, Any] | None:
    """The session's JVM view and Hadoop configuration (None on Spark Connect)."""
    try:
        return session._jvm, session._jsc.hadoopConfiguration()
    except AttributeError:
        return None


def location(path: str, session: Any = None, hadoop: bool = False) -> Location:
    """The :class:`Location` of ``path`` as Spark understands it.

    A plain path is qualified by Hadoop against the session's default file
    system; ``file:`` locations are then written directly unless ``hadoop``
    (which writes them through Hadoop's local ``FileSystem`` too).

    Examples
    --------
    >>> import os, tempfile, streams_spark
    >>> spark = streams_spark.default_session()
    >>> d = tempfile.mkdtemp()
    >>> loc = location("file://" + d + "/ckpt", spark)
    >>> loc.uri == "file:" + d + "/ckpt", loc.local == d + "/ckpt"
    (True, True)
    """
    gateway = _hadoop(session) if session is not None else None
    if gateway is None:
        scheme = urlparse(path).scheme
        if scheme not in ("", "file"):
            raise ValueError(f"{path}: a {scheme}:// location needs a Spark session with a "
                             "JVM (Hadoop's FileSystem) to be written")
        local = unquote(urlparse(path).path) if scheme else path
        return Location("file:" + os.path.abspath(local))
    jvm, conf = gateway
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(conf)
    uri = str(fs.makeQualified(hpath).toString())
    if urlparse(uri).scheme == "file":
        if not urlparse(path).scheme:
            # Relative to this process's directory, as a Python user means it
            # (the JVM's stays where the session started).
            uri = "file:" + os.path.abspath(path)
        if not hadoop:
            return Location(uri)
    return Location(uri, fs, jvm)


def scratch_location(session: Any) -> Location:
    """A fresh directory for a query's files when no checkpoint is given.

    Executors on other nodes read the inbox, so the driver's temporary
    directory serves only a local master. Elsewhere: the SparkContext's
    checkpoint directory (``sc.setCheckpointDir``), else a ``tmp`` folder of a
    default file system that is not the local disk (HDFS); else there is no
    place every executor reaches, and it says so.
    """
    name = f"streams-spark-{uuid.uuid4().hex[:12]}"
    sc = getattr(session, "sparkContext", None)
    master = str(sc.master) if sc is not None else "local"
    if master.startswith("local"):
        return location("file://" + tempfile.mkdtemp(prefix="streams-spark-"), session)
    base = sc._jsc.sc().getCheckpointDir() if sc is not None else None
    if base is not None and base.isDefined():
        return location(f"{base.get()}/{name}", session)
    gateway = _hadoop(session)
    if gateway is not None:
        default_fs = str(gateway[1].get("fs.defaultFS", "file:///"))
        if not default_fs.startswith("file:"):
            return location(f"{default_fs.rstrip('/')}/tmp/{name}", session)
    raise ValueError(
        f"a Spark segment in stream mode on {master} needs a directory every executor can "
        "read: give to_spark(checkpoint=...) an hdfs://, s3a:// or shared path, or set "
        "one for the session with spark.sparkContext.setCheckpointDir(...)")
