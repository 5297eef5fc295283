"""The equivalence tests run pipelines in-process and on Spark.

The shared SparkSession fixture and the by-value pickling of test functions
are in tests/conftest.py.
"""

import streams_spark  # noqa: F401 - registers to_spark() for the tests here
