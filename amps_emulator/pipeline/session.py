"""The Spark session every job and test uses: UTC session time zone, the data sources
registered, the UI off in tests; ``--master`` decides where it runs (``local[*]`` or a cluster)."""

from __future__ import annotations

import os
import sys


def make_session(master: str = "local[*]", app: str = "amps-pipeline", *, progress: bool = True,
                 conf: dict | None = None):
    from pyspark.sql import SparkSession

    from . import register

    # executors run this same interpreter locally; on a cluster, Spark's own settings decide
    local = master.startswith("local")
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local job stays on loopback
    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.ui.showConsoleProgress", "true" if progress else "false")
         .config("spark.sql.shuffle.partitions", "8")
         .config("spark.ui.enabled", "true" if progress else "false"))
    if local:
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
