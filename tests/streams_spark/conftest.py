"""The Spark tests run on a real local SparkSession.

The shared SparkSession fixture and the by-value pickling of test functions
are in tests/conftest.py.
"""

import streams_spark  # noqa: F401 - registers to_spark() for the tests here
