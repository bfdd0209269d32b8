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

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Protocol

from aiogroup._fetch.decoding import Chunk
from aiogroup._fetch.native import (
    native_error,
    native_key_value_bytes,
    native_records_sized,
    record_template,
)
from aiogroup._fetch.young_records import YoungRecords
from aiogroup.errors import RecordDeserializationError
from aiogroup.structs import ConsumerRecord, TopicPartition

__all__ = ["BatchDeclined", "RecordSink", "Sink", "key_value_bytes", "walk"]


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

    def decode_raw(
        self, tp: TopicPartition, data: bytes, start: int, end: int
    ) -> tuple[list[Any], Sequence[int]] | None:
        """Every record of the v2 batch ``data[start:end]``, for ``add_records``, and
        their running key + value bytes (``len + 1`` entries, the first 0); or None.

        Only called when ``builds_records``; None: decode it the pure-Python way.
        """
        ...

    def add_batch(self, tp: TopicPartition, batch: Any, ts_type: int) -> int:
        """Take every record of a v2 batch; returns how many.  May raise BatchDeclined."""
        ...

    def add_records(
        self,
        tp: TopicPartition,
        records: list[Any],
        ts_type: int | None,
        nbytes: int | None = None,
    ) -> None:
        """Take decoded records, in order (``ts_type`` None: each record has its own).

        ``nbytes``: their key + value bytes when the walker knows them (``decode_raw``'s
        running sums), else None.  On a record it cannot take it raises
        RecordDeserializationError, having taken every record before it.
        """
        ...


def walk(chunk: Chunk, limit: int, sink: Sink) -> int:
    """Give up to ``limit`` records of ``chunk`` to ``sink``; returns how many it took."""
    tp = chunk.tp
    end = chunk.end_offset
    chunk.failure = None
    taken = 0
    while taken < limit:
        recs = chunk.pending
        if recs is None:
            batch = chunk.next_batch()
            if batch is None:
                break
            base = getattr(batch, "base_offset", None)
            records: list[Any] | None = None
            sizes: Sequence[int] | None = None  # running key + value bytes, if known
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
                    decoded = sink.decode_raw(tp, chunk.data, span[0], span[1])
                    if decoded is not None:
                        records, sizes = decoded
                if records is None:
                    records = list(batch)  # C batches cannot be re-entered
                chunk.ts_type = tst
            else:  # legacy message set: each record has its own timestamp type
                records = list(batch)
                chunk.ts_type = None
            chunk.pending_native = sizes is not None
            chunk.pending_sizes = sizes
            chunk.pending_pos = 0
            recs = chunk.pending = records
        # Part of a batch: the run of records to hand out is one slice of it, handed
        # over in one call (one comprehension in the sink, not a call per record).
        nxt = chunk.next_offset
        want = limit - taken
        n = len(recs)
        i = chunk.pending_pos
        while i < n and recs[i].offset < nxt:  # a fetch that starts inside the batch
            i += 1
        j = min(n, i + want)
        past_end = exhausted = False
        if j > i and recs[j - 1].offset >= end:  # the chunk ends inside the batch
            j = i
            while recs[j].offset < end:
                j += 1
            past_end = True
        elif n - i < want:
            exhausted = True
        if j > i:
            run = recs[i:j]
            sums = chunk.pending_sizes
            try:
                sink.add_records(
                    tp, run, chunk.ts_type, None if sums is None else sums[j] - sums[i]
                )
            except RecordDeserializationError as exc:
                k = next(k for k, r in enumerate(run) if r.offset == exc.offset)
                chunk.pending_pos = i + k  # read the refused one again next time
                chunk.next_offset = exc.offset
                chunk.failure = exc
                return taken + k
            taken += j - i
            nxt = run[-1].offset + 1
        chunk.pending_pos = j
        if past_end:
            nxt = end
            chunk.finish()
        elif exhausted:
            chunk.pending = chunk.pending_sizes = None
            batch = chunk.batches[chunk.batch_index - 1]
            nxt = max(nxt, min(batch.next_offset, end))
        chunk.next_offset = nxt
    if chunk.done:
        chunk.next_offset = max(chunk.next_offset, end)
    return taken


Deserializer = Callable[[bytes], Any]

_KEY_SIZE = attrgetter("serialized_key_size")
_VALUE_SIZE = attrgetter("serialized_value_size")


def key_value_bytes(records: list[ConsumerRecord]) -> int:
    """The key + value bytes of ``records`` (a missing one, size -1, counts 0).

    Read back from each record's sizes: for records whose builder did not count them
    (the pure path, a batch the native module declined, a deserializer's refusal).
    The sums run in C (``attrgetter``, ``sum``, ``list.count``), or in one native
    call per list (``key_value_bytes``) when the module has it.
    """
    native_sum = native_key_value_bytes()
    if native_sum is not None:
        return native_sum(records)
    keys: list[int] = list(map(_KEY_SIZE, records))
    values: list[int] = list(map(_VALUE_SIZE, records))
    return sum(keys) + keys.count(-1) + sum(values) + values.count(-1)


class RecordSink:
    """Builds ``ConsumerRecord`` objects, applying the key and value deserializers.

    ``result`` maps each partition to its records, in the order they were added, and
    ``sizes`` each partition to their key + value bytes (the delivered-bytes metric).

    With the native module (``aiogroup._fetch.native.native_records_sized``) a whole
    v2 batch becomes its records in one native call, the deserializers applied there
    too (one call of each per record, no Python loop around them); a deserializer
    that raises stops the batch before its record, which is then read again through
    the pure path (``add_records``), where the refusal is raised as
    ``RecordDeserializationError`` exactly as without the module.  The native call
    also returns the batch's key + value bytes (and, for a batch read in part, their
    running sums), so ``sizes`` costs nothing per record there; elsewhere the sizes
    are read back from the records built (``key_value_bytes``).

    ``young``: where natively built records go to be kept out of the cyclic collector
    while the fetcher holds them (``aiogroup._fetch.young_records``); None: they stay
    tracked.
    """

    __slots__ = (
        "_kd",
        "_native",
        "_templates",
        "_vd",
        "_young",
        "builds_records",
        "result",
        "sizes",
        "takes_raw",
    )

    whole_batches = False

    def __init__(
        self,
        key_deserializer: Deserializer | None,
        value_deserializer: Deserializer | None,
        young: YoungRecords | None = None,
    ) -> None:
        self._kd = key_deserializer
        self._vd = value_deserializer
        self._young = young
        self.result: dict[TopicPartition, list[ConsumerRecord]] = {}
        #: Per partition: the key + value bytes of its records in ``result``.
        self.sizes: dict[TopicPartition, int] = {}
        self._native = native_records_sized()
        self.takes_raw = self.builds_records = self._native is not None
        #: Per partition: the attribute dict the native builder copies per record.
        self._templates: dict[TopicPartition, dict[str, Any]] = {}

    @property
    def nbytes(self) -> int:
        """The key + value bytes of every record in ``result``."""
        return sum(self.sizes.values())

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
            recs, stopped, nbytes, _ = build(
                data, start, end, ConsumerRecord, self._template(tp), self._kd, self._vd
            )
        except native_error():
            raise BatchDeclined(None) from None  # the pure path decodes it (or says why not)
        if recs:
            if self._young is not None:
                self._young.adopt(recs)
            self._out(tp).extend(recs)
            sizes = self.sizes
            sizes[tp] = sizes.get(tp, 0) + nbytes
        if stopped:  # a deserializer refused the record after these: the pure path reads it
            raise BatchDeclined(None, len(recs), recs[-1].offset + 1 if recs else None)
        return len(recs)

    def decode_raw(
        self, tp: TopicPartition, data: bytes, start: int, end: int
    ) -> tuple[list[ConsumerRecord], Sequence[int]] | None:
        build = self._native
        assert build is not None
        try:
            recs, _, _, sums = build(
                data, start, end, ConsumerRecord, self._template(tp), prefix=True
            )
        except native_error():
            return None
        assert sums is not None
        if self._young is not None:
            self._young.adopt(recs)
        return recs, memoryview(sums).cast("q")

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
            sizes = self.sizes
            sizes[tp] = sizes.get(tp, 0) + key_value_bytes(recs)
        return len(recs)

    def add_records(
        self,
        tp: TopicPartition,
        records: list[Any],
        ts_type: int | None,
        nbytes: int | None = None,
    ) -> None:
        out = self._out(tp)
        before = len(out)
        try:
            self._add_records(out, tp, records, ts_type)
        finally:
            added = len(out) - before
            if nbytes is None or added != len(records):  # not given, or refused part-way
                nbytes = key_value_bytes(out[before:]) if added else 0
            if added:
                sizes = self.sizes
                sizes[tp] = sizes.get(tp, 0) + nbytes

    def _add_records(
        self, out: list[ConsumerRecord], tp: TopicPartition, records: list[Any], ts_type: int | None
    ) -> None:
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
