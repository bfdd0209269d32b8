"""Build an Arrow RecordBatch from per-record objects, as an aiokafka user would have to.

This is the comparison point for aiogroup's columnar API: the same columns, built
the straightforward way (one Python list per column, then ``pa.array``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
            ("timestamp_type", pa.int8()),
            ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ]
    )


def from_records(records: Iterable[Any], schema_: Any) -> Any:
    """``records`` have aiokafka ConsumerRecord attributes."""
    import pyarrow as pa

    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    topics: list[str] = []
    partitions: list[int] = []
    offsets: list[int] = []
    timestamps: list[int] = []
    ts_types: list[int] = []
    headers: list[list[dict[str, Any]]] = []
    for r in records:
        keys.append(r.key)
        values.append(r.value)
        topics.append(r.topic)
        partitions.append(r.partition)
        offsets.append(r.offset)
        timestamps.append(r.timestamp)
        ts_types.append(r.timestamp_type)
        headers.append([{"key": k, "value": v} for k, v in r.headers] if r.headers else [])
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(topics, pa.string()),
            pa.array(partitions, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, pa.int64()),
            pa.array(ts_types, pa.int8()),
            pa.array(headers, schema_.field("headers").type),
        ],
        schema=schema_,
    )


def value_bytes(batch: Any) -> int:
    """Total value bytes of a batch without touching rows one by one."""
    import pyarrow.compute as pc

    total = pc.sum(pc.binary_length(batch.column("value"))).as_py()
    return int(total or 0)
