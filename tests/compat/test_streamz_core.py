"""streamz 0.6.6's ``tests/test_core.py``, run against streams (see conftest.py)."""

from streams_compat import load_streamz_tests

load_streamz_tests("test_core.py", globals())
