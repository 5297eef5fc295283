"""streamz 0.6.6's ``tests/test_dask.py``, run against streams (see conftest.py)."""

from streams_compat import load_streamz_tests

load_streamz_tests("test_dask.py", globals())
