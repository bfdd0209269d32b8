"""The one record walker: hands a chunk's records, in offset order, to a sink.

Every read path shares it (``getone``, ``getmany``, ``async for`` and
``getmany_arrow``), so where a read starts and stops, what is skipped and how far the
position moves are decided once.  The sink decides only what a record becomes: a
``ConsumerRecord`` (``RecordSink``) or a row of Arrow columns
(``aiogroup._fetch.arrow.ColumnBuilder``).

A batch that lies wholly inside the read is handed to the sink in one call (one
comprehension per batch: most of getmany's speed); the rest goes record by record.
A sink that ``takes_raw`` (the Arrow columns or the records, with the native decoder
installed) gets such a v2 batch as its bytes instead: the Arrow columns are filled
without record objects, the records are built by the native module without
aiokafka's.  A sink that ``builds_records`` natively also decodes a batch that is
read only in part (a fetch starting inside it, a limit cutting it) into its
``ConsumerRecord`` objects at once; they wait in ``chunk.pending`` like aiokafka's
records do on the pure path.  Whatever the native module declines (legacy message
sets, a batch it finds malformed) takes the pure path, so errors read as before.

One deserialization rule (Java's KIP-334): when the sink refuses a record, the walk
stops *before* it.  Every earlier record stays delivered, ``next_offset`` (and so the
partition's position) stays on the refused record, and the refusal is left in
``chunk.failure`` for the fetcher to raise.  The record is read again on the next
walk, so it is refused again until the application seeks past it; nothing is
skipped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any, Protocol

from aiogroup._fetch.decoding import Chunk
from aiogroup._fetch.native import native_error, native_records, record_template
from aiogroup.errors import RecordDeserializationError
from aiogroup.structs import ConsumerRecord, TopicPartition

__all__ = ["BatchDeclined", "RecordSink", "Sink", "walk"]


class BatchDeclined(Exception):
    """A sink could not take a batch whole: walk its records one by one.

    ``records``: the batch's records, already decoded, or None (the walker decodes
    the batch the pure-Python way).  ``taken``: how many of the batch's first records
    the sink took before it declined; ``next_offset`` is then the offset after them.
    """

    def __init__(
        self, records: list[Any] | None, taken: int = 0, next_offset: int | None = None
    ) -> None:
        super().__init__("batch declined")
        self.records = records
        self.taken = taken
        self.next_offset = next_offset


class Sink(Protocol):
    """Where the walker puts records."""

    #: True when the sink decodes whole v2 batches from their bytes (``add_raw_batch``).
    takes_raw: bool
    #: True when ``decode_raw`` turns a v2 batch into records ``add_records`` takes.
    builds_records: bool
    #: True when the sink would rather take a batch whole than stop exactly at the
    #: walker's limit: the limit is then passed by less than one batch (never inside
    #: the chunk's end, never splitting a batch that was already started).
    whole_batches: bool

    def add_raw_batch(self, tp: TopicPartition, data: bytes, start: int, end: int) -> int:
        """Take every record of the v2 batch ``data[start:end]``; returns how many.

        Only called when ``takes_raw``; the batch's CRC was checked already (if asked).
        May raise BatchDeclined (the walker then walks the batch record by record).
        """
        ...

    def decode_raw(self, tp: TopicPartition, data: bytes, start: int, end: int) -> list[Any] | None:
        """Every record of the v2 batch ``data[start:end]``, for ``add_records``; or None.

        Only called when ``builds_records``; None: decode it the pure-Python way.
        """
        ...

    def add_batch(self, tp: TopicPartition, batch: Any, ts_type: int) -> int:
        """Take every record of a v2 batch; returns how many.  May raise BatchDeclined."""
        ...

    def add_records(self, tp: TopicPartition, records: list[Any], ts_type: int | None) -> None:
        """Take decoded records, in order (``ts_type`` None: each record has its own).

        On a record it cannot take it raises RecordDeserializationError, having taken
        every record before it.
        """
        ...


def walk(chunk: Chunk, limit: int, sink: Sink) -> int:
    """Give up to ``limit`` records of ``chunk`` to ``sink``; returns how many it took."""
    tp = chunk.tp
    end = chunk.end_offset
    chunk.failure = None
    taken = 0
    while taken < limit:
        it = chunk.pending
        if it is None:
            batch = chunk.next_batch()
            if batch is None:
                break
            base = getattr(batch, "base_offset", None)
            records: list[Any] | None = None
            built = False  # records are ConsumerRecords the native module built
            if base is not None:
                tst = batch.timestamp_type
                if (
                    base >= chunk.next_offset
                    and batch.next_offset <= end
                    and (sink.whole_batches or batch.last_offset_delta + 1 <= limit - taken)
                ):
                    if sink.takes_raw and (span := chunk.raw_span(chunk.batch_index - 1)):
                        # The native decoder reads the batch's bytes: no aiokafka records.
                        assert chunk.data is not None
                        try:
                            taken += sink.add_raw_batch(tp, chunk.data, span[0], span[1])
                        except BatchDeclined as declined:
                            taken += declined.taken
                            if declined.next_offset is not None:
                                chunk.next_offset = declined.next_offset
                            records = declined.records
                        else:
                            chunk.next_offset = batch.next_offset
                            continue
                    else:
                        try:
                            taken += sink.add_batch(tp, batch, tst)
                        except BatchDeclined as declined:
                            records = declined.records
                        else:
                            chunk.next_offset = batch.next_offset
                            continue
                elif sink.builds_records and (span := chunk.raw_span(chunk.batch_index - 1)):
                    assert chunk.data is not None
                    records = sink.decode_raw(tp, chunk.data, span[0], span[1])
                    built = records is not None
                if records is None:
                    records = list(batch)  # C batches cannot be re-entered
                chunk.ts_type = tst
            else:  # legacy message set: each record has its own timestamp type
                records = list(batch)
                chunk.ts_type = None
            chunk.pending_native = built
            it = chunk.pending = iter(records)
        # Part of a batch: collect the run of records to hand out, then hand it over
        # in one call (one comprehension in the sink, not a call per record).
        nxt = chunk.next_offset
        want = limit - taken
        run: list[Any] = []
        past_end = exhausted = False
        for r in it:
            off = r.offset
            if off < nxt:
                continue
            if off >= end:
                past_end = True
                break
            run.append(r)
            if len(run) >= want:
                break
        else:
            exhausted = True
        if run:
            try:
                sink.add_records(tp, run, chunk.ts_type)
            except RecordDeserializationError as exc:
                i = next(i for i, r in enumerate(run) if r.offset == exc.offset)
                chunk.pending = chain(run[i:], it)  # read the refused one again next time
                chunk.next_offset = exc.offset
                chunk.failure = exc
                return taken + i
            taken += len(run)
            nxt = run[-1].offset + 1
        if past_end:
            nxt = end
            chunk.finish()
        elif exhausted:
            chunk.pending = None
            batch = chunk.batches[chunk.batch_index - 1]
            nxt = max(nxt, min(batch.next_offset, end))
        chunk.next_offset = nxt
    if chunk.done:
        chunk.next_offset = max(chunk.next_offset, end)
    return taken


Deserializer = Callable[[bytes], Any]


class RecordSink:
    """Builds ``ConsumerRecord`` objects, applying the key and value deserializers.

    ``result`` maps each partition to its records, in the order they were added.

    With the native module (``aiogroup._fetch.native.native_records``) a whole v2
    batch becomes its records in one native call, the deserializers applied there
    too (one call of each per record, no Python loop around them); a deserializer
    that raises stops the batch before its record, which is then read again through
    the pure path (``add_records``), where the refusal is raised as
    ``RecordDeserializationError`` exactly as without the module.
    """

    __slots__ = ("_kd", "_native", "_templates", "_vd", "builds_records", "result", "takes_raw")

    whole_batches = False

    def __init__(
        self, key_deserializer: Deserializer | None, value_deserializer: Deserializer | None
    ) -> None:
        self._kd = key_deserializer
        self._vd = value_deserializer
        self.result: dict[TopicPartition, list[ConsumerRecord]] = {}
        self._native = native_records()
        self.takes_raw = self.builds_records = self._native is not None
        #: Per partition: the attribute dict the native builder copies per record.
        self._templates: dict[TopicPartition, dict[str, Any]] = {}

    def _out(self, tp: TopicPartition) -> list[ConsumerRecord]:
        out = self.result.get(tp)
        if out is None:
            out = self.result[tp] = []
        return out

    def _template(self, tp: TopicPartition) -> dict[str, Any]:
        template = self._templates.get(tp)
        if template is None:
            template = self._templates[tp] = record_template(tp)
        return template

    def add_raw_batch(self, tp: TopicPartition, data: bytes, start: int, end: int) -> int:
        build = self._native
        assert build is not None
        try:
            recs, stopped = build(
                data, start, end, ConsumerRecord, self._template(tp), self._kd, self._vd
            )
        except native_error():
            raise BatchDeclined(None) from None  # the pure path decodes it (or says why not)
        if recs:
            self._out(tp).extend(recs)
        if stopped:  # a deserializer refused the record after these: the pure path reads it
            raise BatchDeclined(None, len(recs), recs[-1].offset + 1 if recs else None)
        return len(recs)

    def decode_raw(
        self, tp: TopicPartition, data: bytes, start: int, end: int
    ) -> list[ConsumerRecord] | None:
        build = self._native
        assert build is not None
        try:
            recs, _ = build(data, start, end, ConsumerRecord, self._template(tp))
        except native_error():
            return None
        return recs

    def add_batch(self, tp: TopicPartition, batch: Any, ts_type: int) -> int:
        topic, partition = tp.topic, tp.partition
        kd, vd = self._kd, self._vd
        CR = ConsumerRecord
        if kd is None and vd is None:
            recs = [
                CR(
                    topic,
                    partition,
                    r.offset,
                    r.timestamp,
                    ts_type,
                    k,
                    v,
                    None,
                    -1 if k is None else len(k),
                    -1 if v is None else len(v),
                    tuple(h) if (h := r.headers) else (),
                )
                for r in batch
                for k, v in ((r.key, r.value),)
            ]
        else:
            raw = list(batch)  # kept: a refused record is looked for one by one
            try:
                recs = [
                    CR(
                        topic,
                        partition,
                        r.offset,
                        r.timestamp,
                        ts_type,
                        k if kd is None or k is None else kd(k),
                        v if vd is None or v is None else vd(v),
                        None,
                        -1 if k is None else len(k),
                        -1 if v is None else len(v),
                        tuple(h) if (h := r.headers) else (),
                    )
                    for r in raw
                    for k, v in ((r.key, r.value),)
                ]
            except Exception:
                raise BatchDeclined(raw) from None
        if recs:
            self._out(tp).extend(recs)
        return len(recs)

    def add_records(self, tp: TopicPartition, records: list[Any], ts_type: int | None) -> None:
        out = self._out(tp)
        kd, vd = self._kd, self._vd
        if type(records[0]) is ConsumerRecord:  # built natively (``decode_raw``): raw bytes
            if kd is None and vd is None:
                out.extend(records)
            else:
                for r in records:
                    out.append(self._one(tp, r, r.timestamp_type))
            return
        if len(records) == 1:  # getone: no comprehension for a single record
            r = records[0]
            out.append(self._one(tp, r, r.timestamp_type if ts_type is None else ts_type))
            return
        if ts_type is not None and kd is None and vd is None:
            topic, partition = tp.topic, tp.partition
            CR = ConsumerRecord
            out.extend(
                [
                    CR(
                        topic,
                        partition,
                        r.offset,
                        r.timestamp,
                        ts_type,
                        k,
                        v,
                        r.checksum,
                        -1 if k is None else len(k),
                        -1 if v is None else len(v),
                        tuple(h) if (h := r.headers) else (),
                    )
                    for r in records
                    for k, v in ((r.key, r.value),)
                ]
            )
            return
        for r in records:  # deserializers or the legacy format: one at a time
            out.append(self._one(tp, r, r.timestamp_type if ts_type is None else ts_type))

    def _one(self, tp: TopicPartition, r: Any, ts_type: int) -> ConsumerRecord:
        k = r.key
        v = r.value
        kd, vd = self._kd, self._vd
        key, value = k, v
        if kd is not None and k is not None:
            try:
                key = kd(k)
            except Exception as exc:
                raise RecordDeserializationError(tp, r.offset, "key", exc) from exc
        if vd is not None and v is not None:
            try:
                value = vd(v)
            except Exception as exc:
                raise RecordDeserializationError(tp, r.offset, "value", exc) from exc
        hs = r.headers
        return ConsumerRecord(
            tp.topic,
            tp.partition,
            r.offset,
            r.timestamp,
            ts_type,
            key,
            value,
            r.checksum,
            -1 if k is None else len(k),
            -1 if v is None else len(v),
            tuple(hs) if hs else (),
        )
