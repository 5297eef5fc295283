"""A Spark query killed (process group, SIGKILL) in the middle of a micro-batch.

Run by ``test_datasource_kills.py``::

    python datasource_kill_child.py BOOTSTRAP TOPIC OUT CHECKPOINT KILL_AT

reads ``TOPIC`` with the ``streams_kafka`` data source, ten messages a
micro-batch, doubles each value in a Python UDF and writes JSON files with
Spark's file sink. When the UDF meets the message at offset ``KILL_AT``
(-1: never), it kills the whole process group (driver, JVM and Python
workers) with SIGKILL, as a lost machine would.
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    bootstrap, topic, out, checkpoint, kill_at = sys.argv[1:6]
    # The driver's process group, inherited by the JVM; Spark's Python
    # workers put themselves in groups of their own, so they are told it.
    os.environ["STREAMS_TEST_KILL_GROUP"] = str(os.getpgid(0))
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, udf

    from streams_spark import register_data_sources

    spark = (SparkSession.builder.master("local[1]").appName("datasource-kill")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    target = int(kill_at)

    @udf("long")
    def double(offset: int, value: str) -> int:
        if offset == target:
            os.killpg(int(os.environ["STREAMS_TEST_KILL_GROUP"]), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        return 2 * int(value)

    source = (spark.readStream.format("streams_kafka").option("bootstrap.servers", bootstrap)
              .option("topic", topic).option("maxOffsetsPerTrigger", "10").load())
    doubled = source.select(col("offset"),
                            double(col("offset"), col("value").cast("string")).alias("doubled"))
    query = (doubled.writeStream.format("json").option("checkpointLocation", checkpoint)
             .option("path", out).start())
    query.processAllAvailable()
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
