"""Spark integration (``pip install 'aiogroup[spark]'``).

* :func:`ingest` - driver-side asyncio loop: a GroupConsumer feeds Spark DataFrames to
  your batch function and commits each batch after it returned.
* ``format("aiogroup")`` - a PySpark streaming data source whose planning member is
  part of a consumer group; call :func:`register` once per SparkSession.
"""

from aiogroup.spark.schema import ARROW_SCHEMA, COLUMNS, records_to_arrow, spark_schema
from aiogroup.spark.source import AiogroupDataSource, AiogroupStreamReader, register

__all__ = [
    "ARROW_SCHEMA",
    "COLUMNS",
    "AiogroupDataSource",
    "AiogroupStreamReader",
    "records_to_arrow",
    "register",
    "spark_schema",
]
