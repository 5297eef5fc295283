"""``streamz.utils_test`` for streamz's tests run against streams.

The helpers that do not touch the library (``inc``, ``tmpfile``,
``gen_test``, ``wait_for``...) are streamz's own; ``clean`` and ``metadata``
are rebuilt on streams. Under ``STREAMS_COMPAT_TARGET=streamz`` this is
streamz's module unchanged.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from streamz.utils_test import (  # noqa: F401 - re-exported for streamz's tests
    await_for,
    captured_logger,
    double,
    free_port,
    gen_test,
    inc,
    pristine_loop,
    tmpfile,
    wait_for,
)

if os.environ.get("STREAMS_COMPAT_TARGET", "streams") == "streamz":
    from streamz.utils_test import clean, metadata
else:
    import streams
    from streams import Stream

    @pytest.fixture
    def clean() -> None:
        """Stop the loop thread streams started, as streamz's stops its loops."""
        stop = getattr(streams, "_stop_loop_thread", None)
        if stop is not None:
            stop()

    class metadata(Stream):
        """Emit the metadata each element arrives with, instead of the element."""

        def update(self, x: Any, who: Any = None, metadata: Any = None) -> Any:
            if metadata:
                return self._emit(metadata)
            return None
