"""The row shape of Kafka records in Spark, and the one place records become Arrow.

The columns and types are those of Spark's built-in Kafka source, so a query can switch
between ``format("kafka")`` and ``format("aiogroup")`` without touching its transforms.

The Arrow schema must match, field for field, what PySpark derives from the Spark
schema (``to_arrow_schema(..., timezone="UTC")``): the Python data source runner
rejects a record batch whose schema differs, even in a list's child-field name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

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


def _as_bytes(value: Any) -> bytes | None:
    # Records arrive undeserialized (bytes) unless the consumer was given deserializers;
    # a str from a value_deserializer is stored as UTF-8 rather than rejected.
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(
        f"record key/value must be bytes or str to become a BINARY column, got "
        f"{type(value).__name__}; drop the consumer's key/value_deserializer"
    )


def records_to_arrow(records: Iterable[Any]) -> pa.RecordBatch:
    """Build one Arrow record batch from ConsumerRecord-like objects (column by column)."""
    rows: Sequence[Any] = records if isinstance(records, Sequence) else list(records)
    headers = [[{"key": k, "value": _as_bytes(v)} for k, v in (r.headers or ())] for r in rows]
    # Kafka timestamps are epoch milliseconds; Spark's TIMESTAMP is microseconds.
    arrays = [
        pa.array([_as_bytes(r.key) for r in rows], pa.binary()),
        pa.array([_as_bytes(r.value) for r in rows], pa.binary()),
        pa.array([r.topic for r in rows], pa.string()),
        pa.array([r.partition for r in rows], pa.int32()),
        pa.array([r.offset for r in rows], pa.int64()),
        pa.array(
            [None if r.timestamp is None or r.timestamp < 0 else r.timestamp * 1000 for r in rows],
            pa.timestamp("us", tz="UTC"),
        ),
        pa.array([r.timestamp_type for r in rows], pa.int32()),
        pa.array(headers, ARROW_SCHEMA.field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


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
        columns.append(column if column.type.equals(field.type) else column.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
