"""The row shape of Kafka records in Spark: the consumer's Arrow columns, conformed.

The columns and types are those of Spark's built-in Kafka source, so a query can switch
between ``format("kafka")`` and ``format("aiogroup")`` without touching its transforms.

The Arrow schema must match, field for field, what PySpark derives from the Spark
schema (``to_arrow_schema(..., timezone="UTC")``): the Python data source runner
rejects a record batch whose schema differs, even in a list's child-field name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from aiogroup._fetch import arrow as _arrow

__all__ = [
    "ARROW_SCHEMA",
    "COLUMNS",
    "SPARK_SCHEMA_DDL",
    "records_to_arrow",
    "spark_schema",
]

COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
)

SPARK_SCHEMA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)

_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        # PySpark names a list's child "element"; pa.list_(type) would call it "item".
        pa.field("headers", pa.list_(pa.field("element", _HEADER))),
    ]
)


def spark_schema() -> Any:
    """The Spark StructType of the columns (imported lazily: pyspark is an optional extra)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField("headers", ArrayType(header)),
        ]
    )


def records_to_arrow(records: Iterable[Any]) -> pa.RecordBatch:
    """Build one Arrow record batch in Spark's columns from ConsumerRecord-like objects.

    The records become the consumer's columns (``aiogroup._fetch.arrow.records_to_arrow``, the
    one conversion), which ``conform`` turns into Spark's as for ``getmany_arrow``.
    """
    return conform(_arrow.records_to_arrow(records))


def conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Rename/cast a columnar batch from the consumer (``timestamp_type`` etc.) to ARROW_SCHEMA."""
    if batch.schema.equals(ARROW_SCHEMA):
        return batch
    renamed = {"timestamp_type": "timestampType"}
    columns = []
    names = [renamed.get(n, n) for n in batch.schema.names]
    for field in ARROW_SCHEMA:
        try:
            column = batch.column(names.index(field.name))
        except ValueError:
            raise ValueError(
                f"columnar batch has no column {field.name!r} (has {batch.schema.names})"
            ) from None
        if not column.type.equals(field.type):
            column = column.cast(field.type)
        if field.name == "timestamp":
            column = _null_if_negative(column)
        elif field.name == "headers":
            column = _null_if_empty(column)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _null_if_empty(column: Any) -> Any:
    # Spark's Kafka source gives a record without headers a null array, not an empty
    # one; the same offsets must give the same rows from either source.
    lengths = pc.list_value_length(column)
    empty = pc.sum(pc.equal(lengths, 0)).as_py() or 0
    if empty == 0:
        return column
    if empty == len(column):
        return pa.nulls(len(column), column.type)
    return pc.if_else(pc.equal(lengths, 0), pa.scalar(None, column.type), column)


def _null_if_negative(column: Any) -> Any:
    # Kafka's -1 means "no timestamp"; Spark's TIMESTAMP has null for that.
    as_int = column.cast(pa.int64())
    low = pc.min(as_int).as_py()
    if low is None or low >= 0:
        return column
    return pc.if_else(pc.less(as_int, 0), pa.scalar(None, column.type), column)
