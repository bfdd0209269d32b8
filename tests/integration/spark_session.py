"""The one way the Spark tests build a SparkSession.

PySpark starts its JVM once per process, with the first session's ``spark.jars`` on
the driver's class path; a later session's ``spark.jars`` reaches the executors but
not the driver, where ``format("kafka")`` is looked up.  So every Spark test module
builds its session here, with Spark's Kafka connector (``maven/fetch.sh`` puts it in
``.kafka/spark-sql-kafka-<version>/libs``) whenever it was fetched: whichever module
runs first, the peer tests find ``format("kafka")``.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def connector_jars() -> list[str]:
    """The spark-sql-kafka-0-10 jars and their dependencies ([] when not fetched)."""
    dirs = sorted(glob.glob(str(ROOT / ".kafka" / "spark-sql-kafka-*" / "libs")))
    return sorted(glob.glob(os.path.join(dirs[-1], "*.jar"))) if dirs else []


def new_session(app: str, **config: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    jars = connector_jars()
    if jars:
        builder = (
            builder.config("spark.jars", ",".join(jars))
            # Tasks fetch spark.jars from the driver's file server: keep it on loopback
            # (this host's name can resolve to an address tasks cannot reach).
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
        )
    for key, value in config.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
