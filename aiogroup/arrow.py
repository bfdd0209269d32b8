"""Columnar hand-over: fetched records as one ``pyarrow.RecordBatch``.

The point is to skip the per-record Python object.  The fetcher's decoded batches
are read field by field into plain lists (one comprehension per batch, then a
transpose in C), and each list becomes an Arrow array in a single call at the end.

Schema (``ARROW_SCHEMA``)::

    key: binary, value: binary, topic: dictionary<int32, string>, partition: int32,
    offset: int64, timestamp: timestamp[ms], timestamp_type: int32,
    headers: list<struct<key: string, value: binary>>

pyarrow is optional (extras ``spark`` / ``bench``); it is imported on first use.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from aiogroup.structs import ConsumerRecord, TopicPartition

if TYPE_CHECKING:
    import pyarrow

    from aiogroup.fetcher import Chunk

__all__ = ["ColumnBuilder", "arrow_schema", "records_to_arrow", "require_pyarrow"]

_INSTALL_HINT = (
    "the Arrow path needs pyarrow, which is an optional dependency: pip install 'aiogroup[spark]'"
)


def require_pyarrow() -> Any:
    """Import pyarrow, or raise an ImportError that says how to install it."""
    try:
        import pyarrow
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return pyarrow


_schema: Any = None
_get_key = attrgetter("key")
_get_value = attrgetter("value")
_get_offset = attrgetter("offset")
_get_timestamp = attrgetter("timestamp")
_get_headers = attrgetter("headers")


def arrow_schema() -> pyarrow.Schema:
    """The schema of every batch this module builds."""
    global _schema
    if _schema is None:
        pa = require_pyarrow()
        _schema = pa.schema(
            [
                ("key", pa.binary()),
                ("value", pa.binary()),
                ("topic", pa.dictionary(pa.int32(), pa.string())),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("timestamp", pa.timestamp("ms")),
                ("timestamp_type", pa.int32()),
                (
                    "headers",
                    pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
                ),
            ]
        )
    return _schema


class ColumnBuilder:
    """Column lists filled from decoded record batches, turned into Arrow at the end."""

    __slots__ = (
        "_has_headers",
        "_runs",
        "headers",
        "keys",
        "offsets",
        "timestamp_types",
        "timestamps",
        "values",
    )

    require_pyarrow = staticmethod(require_pyarrow)

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[Any] = []
        self._has_headers = False
        #: (topic, partition, count) runs: topic and partition columns are run-length.
        self._runs: list[tuple[str, int, int]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def take_from(self, chunk: Chunk, limit: int) -> int:
        """Fetcher delivery hook: take up to ``limit`` records of ``chunk``."""
        return chunk.take_columns(limit, self)

    def _run(self, tp: TopicPartition, n: int) -> None:
        runs = self._runs
        if runs and runs[-1][0] == tp.topic and runs[-1][1] == tp.partition:
            last = runs[-1]
            runs[-1] = (last[0], last[1], last[2] + n)
        else:
            runs.append((tp.topic, tp.partition, n))

    def add_batch(self, tp: TopicPartition, partition: int, batch: Any, ts_type: int) -> int:
        """Append every record of a decoded v2 batch; returns how many."""
        recs = list(batch)
        n = len(recs)
        if not n:
            return 0
        # map(attrgetter) runs the per-record loop in C; no per-record tuple is built.
        self.keys.extend(map(_get_key, recs))
        self.values.extend(map(_get_value, recs))
        if n == batch.last_offset_delta + 1:
            # No gaps (not compacted): the offsets are a range.
            base = batch.base_offset
            self.offsets.extend(range(base, base + n))
        else:
            self.offsets.extend(map(_get_offset, recs))
        self.timestamps.extend(map(_get_timestamp, recs))
        self.timestamp_types.extend([ts_type] * n)
        start = len(self.headers)
        self.headers.extend(map(_get_headers, recs))
        if not self._has_headers and any(self.headers[start:]):
            self._has_headers = True
        self._run(tp, n)
        return n

    def add_record(self, tp: TopicPartition, partition: int, r: Any, ts_type: int) -> None:
        """Append one decoded record (partial batches and the legacy format)."""
        self.keys.append(r.key)
        self.values.append(r.value)
        self.offsets.append(r.offset)
        self.timestamps.append(r.timestamp)
        self.timestamp_types.append(ts_type)
        hs = r.headers
        self.headers.append(hs)
        if hs:
            self._has_headers = True
        self._run(tp, 1)

    def add_consumer_record(self, rec: ConsumerRecord) -> None:
        """Append an already built ConsumerRecord (the comparison path)."""
        self.keys.append(rec.key)
        self.values.append(rec.value)
        self.offsets.append(rec.offset)
        self.timestamps.append(rec.timestamp)
        self.timestamp_types.append(rec.timestamp_type)
        hs = rec.headers
        self.headers.append(hs)
        if hs:
            self._has_headers = True
        self._run(TopicPartition(rec.topic, rec.partition), 1)

    def to_record_batch(self) -> pyarrow.RecordBatch:
        pa = require_pyarrow()
        schema = arrow_schema()
        n = len(self.offsets)
        topics: dict[str, int] = {}
        topic_idx: list[int] = []
        partitions: list[int] = []
        for topic, partition, count in self._runs:
            idx = topics.setdefault(topic, len(topics))
            topic_idx.extend([idx] * count)
            partitions.extend([partition] * count)
        topic_arr = pa.DictionaryArray.from_arrays(
            pa.array(topic_idx, pa.int32()), pa.array(list(topics), pa.string())
        )
        header_type = schema.field("headers").type
        if self._has_headers:
            headers = pa.array(
                [[{"key": k, "value": v} for k, v in hs] for hs in self.headers],
                header_type,
            )
        else:
            headers = pa.ListArray.from_arrays(
                pa.array([0] * (n + 1), pa.int32()),
                pa.array([], header_type.value_type),
            )
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                topic_arr,
                pa.array(partitions, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, pa.timestamp("ms")),
                pa.array(self.timestamp_types, pa.int32()),
                headers,
            ],
            schema=schema,
        )


def records_to_arrow(records: Iterable[ConsumerRecord]) -> pyarrow.RecordBatch:
    """The same RecordBatch built from ConsumerRecords (keys/values must be bytes)."""
    cols = ColumnBuilder()
    for rec in records:
        cols.add_consumer_record(rec)
    return cols.to_record_batch()
