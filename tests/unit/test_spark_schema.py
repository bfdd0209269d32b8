"""The Arrow schema must be exactly what PySpark expects from a Python data source."""

from __future__ import annotations

import pyarrow as pa
import pyspark  # noqa: F401
import pytest
from aiokafka.structs import ConsumerRecord
from pyspark.sql.pandas.types import to_arrow_schema

from aiogroup._fetch.arrow import arrow_schema
from aiogroup.spark.schema import (
    ARROW_SCHEMA,
    COLUMNS,
    conform,
    records_to_arrow,
    spark_schema,
)


def test_arrow_schema_matches_pyspark_conversion() -> None:
    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(ARROW_SCHEMA)
    assert tuple(spark_schema().fieldNames()) == COLUMNS


def _record(offset: int, ts: int = 1_700_000_000_123) -> ConsumerRecord:
    return ConsumerRecord(
        "t", 3, offset, ts, 1, b"k", "välue", None, 1, 6, [("h", b"x"), ("n", None)]
    )


def test_records_to_arrow_values() -> None:
    batch = records_to_arrow([_record(7), _record(8, ts=-1)])
    assert batch.schema.equals(ARROW_SCHEMA)
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [7, 8]
    assert rows[0]["value"] == "välue".encode()
    assert rows[0]["partition"] == 3
    assert rows[0]["timestampType"] == 1
    assert int(rows[0]["timestamp"].timestamp() * 1000) == 1_700_000_000_123
    assert rows[1]["timestamp"] is None
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]


def test_records_to_arrow_rejects_deserialized_objects() -> None:
    rec = ConsumerRecord("t", 0, 0, 0, 0, None, {"a": 1}, None, 0, 0, [])
    with pytest.raises(TypeError, match="deserializer"):
        records_to_arrow([rec])


def test_conform_turns_consumer_columns_into_spark_columns() -> None:
    source = pa.RecordBatch.from_pylist(
        [
            {
                "key": None,
                "value": b"v",
                "topic": "t",
                "partition": 1,
                "offset": 9,
                "timestamp": 1_700_000_000_000,
                "timestamp_type": 0,
                "headers": [],
            }
        ],
        schema=arrow_schema(),
    )
    out = conform(source)
    assert out.schema.equals(ARROW_SCHEMA)
    assert out.to_pylist()[0]["offset"] == 9
    assert out.to_pylist()[0]["topic"] == "t"
    # As Spark's Kafka source: no headers is a null array, not an empty one.
    assert out.to_pylist()[0]["headers"] is None


def test_both_spark_paths_agree_on_a_missing_timestamp() -> None:
    # getmany_arrow + conform and records_to_arrow are one conversion: Kafka's -1
    # ("no timestamp") is a null TIMESTAMP either way.
    from aiogroup._fetch.arrow import records_to_arrow as consumer_columns

    records = [_record(7), _record(8, ts=-1)]
    via_columns = conform(consumer_columns(records))
    assert [r["timestamp"] is None for r in via_columns.to_pylist()] == [False, True]
    assert (
        via_columns.to_pylist()[1]["timestamp"]
        == records_to_arrow(records).to_pylist()[1]["timestamp"]
    )
