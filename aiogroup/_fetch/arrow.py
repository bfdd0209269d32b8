"""Columnar hand-over: fetched records as one ``pyarrow.RecordBatch``.

The point is to skip the per-record Python object.  ``ColumnBuilder`` is a sink of
the fetcher's record walker (``aiogroup._fetch.walker``): decoded batches are read
field by field into plain lists, and each list becomes an Arrow array in a single
call at the end.  This module knows nothing of the fetcher, which imports it lazily.

Schema (``ARROW_SCHEMA``)::

    key: binary, value: binary, topic: dictionary<int32, string>, partition: int32,
    offset: int64, timestamp: timestamp[ms], timestamp_type: int32,
    headers: list<struct<key: string, value: binary>>

pyarrow is optional (extras ``spark`` / ``bench``); it is imported on first use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from aiokafka.errors import CorruptRecordException

from aiogroup._fetch.native import native_decoder, native_error, record_batch
from aiogroup.structs import ConsumerRecord, TopicPartition

if TYPE_CHECKING:
    import pyarrow

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
    """Columns filled from decoded record batches, turned into Arrow at the end.

    Only ``key``, ``value`` and ``timestamp`` need a value read from every record.
    The rest is known per run of records: topic, partition and timestamp type are
    constant over a batch, and a batch without gaps has offsets ``base .. base+n``.
    Those columns are kept run-length (``_runs``, ``_offsets``) and expanded in C
    by numpy when the batch is built, which is where most of the win over building
    the same RecordBatch from ``ConsumerRecord`` objects comes from.  Without numpy
    they expand through Python lists (same result, slower).
    """

    __slots__ = (
        "_headers",
        "_native",
        "_offsets",
        "_other",
        "_parts",
        "_rows",
        "_runs",
        "_tail",
        "keys",
        "takes_raw",
        "timestamps",
        "values",
        "whole_batches",
    )

    require_pyarrow = staticmethod(require_pyarrow)
    #: Partly read batches go through aiokafka's records (``add_records``).
    builds_records = False

    def __init__(self, *, whole_batches: bool = False) -> None:
        #: Take a record batch whole even where that passes the walker's limit (by less
        #: than one batch): a batch cut in two takes the per-record path for both of
        #: its parts, and the parts must then be concatenated, a copy of the columns.
        self.whole_batches = whole_batches
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.timestamps: list[int] = []
        #: offset segments: ``range`` for a gap-free batch, else a list of offsets
        self._offsets: list[range | list[int]] = []
        #: offsets of records added one by one, not yet closed into a segment
        self._tail: list[int] = []
        #: header lists, only once some record had headers (earlier rows get [])
        self._headers: list[Any] | None = None
        #: (topic, partition, timestamp_type, count) runs
        self._runs: list[tuple[str, int, int, int]] = []
        #: rows in the Python lists above
        self._rows = 0
        #: the native decoder (``aiogroup._fetch.native``), when installed: whole v2 batches
        #: go to it as bytes (``add_raw_batch``), the rest to the lists above
        self._native = native_decoder()
        self.takes_raw = self._native is not None
        #: finished RecordBatches, in walk order: the lists and the native decoder are
        #: flushed here whenever rows switch from one to the other
        self._parts: list[Any] = []
        #: rows in ``_parts`` and the native decoder
        self._other = 0

    def __len__(self) -> int:
        return self._rows + self._other

    def decode_raw(
        self, tp: TopicPartition, data: bytes, start: int, end: int
    ) -> tuple[list[Any], Sequence[int]] | None:
        """Not used: ``builds_records`` is False."""
        return None

    def add_raw_batch(self, tp: TopicPartition, data: bytes, start: int, end: int) -> int:
        """Append every record of the v2 batch ``data[start:end]`` (native decoder)."""
        native = self._native
        assert native is not None
        if self._rows:
            self._other += self._rows
            self._parts.append(self._python_batch(reset=True))
        try:
            # The walker's Chunk.next_batch checked the CRC already (when asked to).
            n = native.add_batch(data, start, end, tp.topic, tp.partition, False)
        except native_error() as exc:
            raise CorruptRecordException(str(exc)) from None
        self._other += n
        return n

    def _flush_native(self) -> None:
        native = self._native
        if native is not None and len(native):
            # (its rows stay counted in _other)
            self._parts.append(record_batch(native.finish(), arrow_schema()))

    def _run(self, topic: str, partition: int, ts_type: int, n: int) -> None:
        runs = self._runs
        if runs:
            last = runs[-1]
            if last[0] == topic and last[1] == partition and last[2] == ts_type:
                runs[-1] = (topic, partition, ts_type, last[3] + n)
                self._rows += n
                return
        runs.append((topic, partition, ts_type, n))
        self._rows += n

    def _add_headers(self, hs: list[Any]) -> None:
        if self._headers is None:
            if not any(hs):
                return
            self._headers = [[]] * (self._rows - len(hs))
        self._headers.extend(hs)

    def add_batch(self, tp: TopicPartition, batch: Any, ts_type: int) -> int:
        """Append every record of a decoded v2 batch; returns how many (walker sink)."""
        self._flush_native()
        recs = list(batch)
        n = len(recs)
        if not n:
            return 0
        # map(attrgetter) runs the per-record loop in C; no per-record tuple is built.
        self.keys.extend(map(_get_key, recs))
        self.values.extend(map(_get_value, recs))
        self.timestamps.extend(map(_get_timestamp, recs))
        if self._tail:
            self._offsets.append(self._tail)
            self._tail = []
        if n == batch.last_offset_delta + 1:
            base = batch.base_offset  # no gaps (not compacted): the offsets are a range
            self._offsets.append(range(base, base + n))
        else:
            self._offsets.append(list(map(_get_offset, recs)))
        self._run(tp.topic, tp.partition, ts_type, n)
        self._add_headers(list(map(_get_headers, recs)))
        return n

    def add_records(
        self,
        tp: TopicPartition,
        records: list[Any],
        ts_type: int | None,
        nbytes: int | None = None,
    ) -> None:
        """Append decoded records: part of a batch, or the legacy format (walker sink).

        ``nbytes`` is not used: the consumer counts the columns' bytes.
        """
        self._flush_native()
        if ts_type is None:  # legacy format: each record has its own timestamp type
            for r in records:
                self._append(
                    tp.topic,
                    tp.partition,
                    r.key,
                    r.value,
                    r.offset,
                    r.timestamp,
                    r.timestamp_type,
                    r.headers,
                )
            return
        self.keys.extend(map(_get_key, records))
        self.values.extend(map(_get_value, records))
        self.timestamps.extend(map(_get_timestamp, records))
        self._tail.extend(map(_get_offset, records))
        self._run(tp.topic, tp.partition, ts_type, len(records))
        self._add_headers(list(map(_get_headers, records)))

    def add_consumer_record(self, rec: ConsumerRecord) -> None:
        """Append an already built ConsumerRecord (``records_to_arrow``)."""
        self._flush_native()
        self._append(
            rec.topic,
            rec.partition,
            _as_bytes(rec.key),
            _as_bytes(rec.value),
            rec.offset,
            rec.timestamp,
            rec.timestamp_type,
            [(k, _as_bytes(v)) for k, v in rec.headers or ()],
        )

    def _append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        offset: int,
        timestamp: int,
        ts_type: int,
        headers: Any,
    ) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.timestamps.append(timestamp)
        self._tail.append(offset)
        self._run(topic, partition, ts_type, 1)
        self._add_headers([headers])

    def to_record_batch(self) -> pyarrow.RecordBatch:
        """Every row added, in order, as one RecordBatch (``arrow_schema()``)."""
        self._flush_native()
        parts = self._parts
        if not parts:
            return self._python_batch(reset=False)
        if self._rows:
            self._other += self._rows
            parts.append(self._python_batch(reset=True))
        if len(parts) > 1:
            pa = require_pyarrow()
            # Each part has its own topic dictionary: unify them, then one chunk per column.
            table = pa.Table.from_batches(parts).unify_dictionaries().combine_chunks()
            self._parts = parts = table.to_batches()[:1]
        return parts[0]

    def _python_batch(self, *, reset: bool) -> pyarrow.RecordBatch:
        """The rows in the Python lists as a RecordBatch (``reset``: empty the lists)."""
        pa = require_pyarrow()
        schema = arrow_schema()
        n = self._rows
        if self._tail:
            self._offsets.append(self._tail)
            self._tail = []
        topics: dict[str, int] = {}
        runs = [(topics.setdefault(t, len(topics)), p, tst, c) for t, p, tst, c in self._runs]
        topic_idx, partitions, ts_types, offsets = _expand(runs, self._offsets)
        topic_arr = pa.DictionaryArray.from_arrays(
            pa.array(topic_idx, pa.int32()), pa.array(list(topics), pa.string())
        )
        header_type = schema.field("headers").type
        if self._headers is not None:
            headers = pa.array(
                [[{"key": k, "value": v} for k, v in hs] for hs in self._headers],
                header_type,
            )
        else:
            headers = pa.ListArray.from_arrays(
                pa.array(_zeros(n + 1), pa.int32()),
                pa.array([], header_type.value_type),
            )
        keys, values, timestamps = self.keys, self.values, self.timestamps
        if reset:
            self.keys, self.values, self.timestamps = [], [], []
            self._offsets, self._headers, self._runs, self._rows = [], None, [], 0
        return pa.RecordBatch.from_arrays(
            [
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
                topic_arr,
                pa.array(partitions, pa.int32()),
                pa.array(offsets, pa.int64()),
                pa.array(timestamps, pa.int64()).view(pa.timestamp("ms")),
                pa.array(ts_types, pa.int32()),
                headers,
            ],
            schema=schema,
        )


def _zeros(n: int) -> Any:
    try:
        import numpy as np
    except ImportError:
        return [0] * n
    return np.zeros(n, np.int32)


def _expand(
    runs: list[tuple[int, int, int, int]], offsets: list[range | list[int]]
) -> tuple[Any, Any, Any, Any]:
    """The run-length columns as full columns: topic index, partition, ts type, offset."""
    try:
        import numpy as np
    except ImportError:
        topic_idx: list[int] = []
        partitions: list[int] = []
        ts_types: list[int] = []
        for t, p, tst, c in runs:
            topic_idx.extend([t] * c)
            partitions.extend([p] * c)
            ts_types.extend([tst] * c)
        return topic_idx, partitions, ts_types, [o for seg in offsets for o in seg]
    counts = np.fromiter((r[3] for r in runs), np.int64, len(runs))
    cols = [
        np.repeat(np.fromiter((r[i] for r in runs), np.int32, len(runs)), counts) for i in range(3)
    ]
    segs = [
        np.arange(seg.start, seg.stop, dtype=np.int64)
        if isinstance(seg, range)
        else np.asarray(seg, np.int64)
        for seg in offsets
    ]
    flat = np.concatenate(segs) if segs else np.zeros(0, np.int64)
    return cols[0], cols[1], cols[2], flat


def records_to_arrow(records: Iterable[Any]) -> pyarrow.RecordBatch:
    """The batch ``getmany_arrow`` would give, built from ConsumerRecord-like objects.

    The one conversion from records to Arrow (the Spark source conforms its result to
    Spark's columns).  Keys and values must be bytes, or str (stored as UTF-8): a
    record decoded into other objects by a deserializer cannot become a binary column.
    """
    cols = ColumnBuilder()
    for rec in records:
        cols.add_consumer_record(rec)
    return cols.to_record_batch()


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(
        f"record key/value must be bytes or str to become a binary column, got "
        f"{type(value).__name__}; drop the consumer's key/value_deserializer"
    )
