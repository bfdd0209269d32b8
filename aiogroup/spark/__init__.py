"""Spark integration (``pip install 'aiogroup[spark]'``).

* :func:`ingest` - driver-side asyncio loop: a GroupConsumer feeds Spark DataFrames to
  your batch function and commits each batch after it returned.
* ``format("aiogroup")`` - a PySpark streaming data source whose planning member is
  part of a consumer group; call :func:`register` once per SparkSession.
"""

from aiogroup.spark.ingest import BatchInfo, IngestProgress, SparkIngest, ingest
from aiogroup.spark.options import SourceOptions, parse_options
from aiogroup.spark.schema import ARROW_SCHEMA, COLUMNS, records_to_arrow, spark_schema
from aiogroup.spark.source import AiogroupDataSource, AiogroupStreamReader, register

__all__ = [
    "ARROW_SCHEMA",
    "COLUMNS",
    "AiogroupDataSource",
    "AiogroupStreamReader",
    "BatchInfo",
    "IngestProgress",
    "SourceOptions",
    "SparkIngest",
    "ingest",
    "parse_options",
    "records_to_arrow",
    "register",
    "spark_schema",
]
