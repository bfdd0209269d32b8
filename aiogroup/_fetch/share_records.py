"""Share-group records: what a ShareFetch brought, cut to what it acquired for us.

Why a module of its own: a ShareFetch answers whole record batches plus the offset
ranges it *acquired* for this consumer (with their delivery counts).  Only acquired
offsets are ours to hand out; the rest of a batch belongs to other consumers (or to
nobody yet).  And an acquired offset without a record to hand out - compacted away,
a control record - must be acknowledged all the same (as GAP), or it would be
redelivered until archived.  Batches are split and CRC-checked with the fetch wing's
own decoding (:func:`aiogroup._fetch.decoding.split_batches`).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar

from aiokafka.errors import CorruptRecordException

from aiogroup._fetch.decoding import split_batches
from aiogroup._fetch.native import native_crc, native_error, native_share_records
from aiogroup._fetch.share_acknowledgements import AcknowledgementTracker, AcquiredRun, Acquisition

__all__ = [
    "DELIVERY_COUNT_OF",
    "TOPIC_PARTITION_OF",
    "RecordBuffer",
    "ShareRecord",
    "acquired_records",
    "delivery_counts",
    "hand_out",
    "run_spans",
]


class ShareRecord(tuple[Any, ...]):
    """One record handed out by a share consumer.

    Shaped like aiokafka's ``ConsumerRecord`` (topic, partition, offset, timestamp,
    key, value, headers) plus ``delivery_count``: how many times the broker has
    delivered it, this time included (1 the first time; more after a RELEASE, a lock
    that ran out or a consumer that died holding it).  Immutable; equal (and hashed
    alike) when those fields are.

    Why a tuple underneath: a drain makes one per record, and a tuple is made in one C
    call, where a frozen slots dataclass took a call per field (measured: 2.7 us a
    record to decode and build, 0.5 us this way, of a client CPU of ~3.6 us a record in
    a 200,000-record drain).  The tuple also holds, after the public fields, the
    acquired run it came from and its acquisition id, which :attr:`acquisition`
    presents to the tracker; iterate or index it only through the named fields.
    """

    __slots__ = ()

    #: The public fields, in order (as a dataclass's or a namedtuple's).
    FIELDS: ClassVar[tuple[str, ...]] = (
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestamp_type",
        "key",
        "value",
        "headers",
        "delivery_count",
    )

    if TYPE_CHECKING:
        topic: str
        partition: int
        offset: int
        timestamp: int
        timestamp_type: int
        key: Any
        value: Any
        headers: tuple[tuple[str, bytes], ...]
        delivery_count: int
        #: The acquired run it came from (None: made outside the tracker).
        _run: AcquiredRun | None
        _acquisition_id: int
    else:
        topic = property(itemgetter(0))
        partition = property(itemgetter(1))
        offset = property(itemgetter(2))
        timestamp = property(itemgetter(3))
        timestamp_type = property(itemgetter(4))
        key = property(itemgetter(5))
        value = property(itemgetter(6))
        headers = property(itemgetter(7))
        delivery_count = property(itemgetter(8))
        _run = property(itemgetter(9))
        _acquisition_id = property(itemgetter(10))

    def __new__(
        cls,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: Any,
        value: Any,
        headers: tuple[tuple[str, bytes], ...],
        delivery_count: int,
        acquisition: Acquisition,
    ) -> ShareRecord:
        return tuple.__new__(
            cls,
            (
                topic,
                partition,
                offset,
                timestamp,
                timestamp_type,
                key,
                value,
                headers,
                delivery_count,
                acquisition.run,
                acquisition.id,
            ),
        )

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (*self[:9], self.acquisition)

    @property
    def acquisition(self) -> Acquisition:
        """The record's acquisition, which ``acknowledge()`` checks (not for applications)."""
        return Acquisition(self[0], self[1], self[2], self[10], self[9])

    # Not NotImplemented for other types: a plain tuple would then compare its items
    # with this one's (equal to a tuple of the same values), unlike a dataclass.
    def __eq__(self, other: object) -> bool:
        return other.__class__ is self.__class__ and self[:9] == other[:9]

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self[:9])

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={v!r}" for n, v in zip(self.FIELDS, self, strict=False))
        return f"ShareRecord({fields})"


def acquired_records(
    data: bytes | None,
    runs: Sequence[AcquiredRun],
    *,
    check_crcs: bool = True,
    key_deserializer: Callable[[bytes | None], Any] | None = None,
    value_deserializer: Callable[[bytes | None], Any] | None = None,
) -> list[ShareRecord]:
    """The records of ``data`` at the offsets ``runs`` acquired, in order, as
    :class:`ShareRecord` s; each acquired offset without a record is marked a gap in
    its run (:meth:`AcquiredRun.gap`).  One pass: the records of a batch come in
    offset order and so do the runs, so a record finds its run by moving forward.

    A v2 batch that lies wholly inside the current run with no offset missing (its
    record count one more than its last offset delta: what a fetch brings, bar
    compaction) is built in one comprehension, without the per-record checks; its CRC
    is checked natively where ``aiogroup_native`` is installed (in place, with the
    CPU's CRC-32C instruction).  Measured (issue 28, 592 records of 100 B in four
    batches): 501 ns a record before, the rest of a drain's client CPU ~2.4 us."""
    if not runs:
        return []
    runs = sorted(runs, key=_first)
    out: list[ShareRecord] = []
    append = out.append
    ri = 0
    run = runs[0]
    tp = run.tp
    topic, partition = tp
    high = max(r.last for r in runs)
    #: Offsets below ``nxt`` are settled (a record handed out, or a gap).
    nxt = run.first
    count, idbase = run.delivery_count, run.base - run.first
    kd, vd = key_deserializer, value_deserializer
    plain = kd is None and vd is None
    crc_ok = native_crc() if check_crcs and data else None
    build = native_share_records() if plain and type(data) is bytes else None
    done = False
    end = 0
    for batch in split_batches(data) if data else ():
        # Where the batch lies in ``data`` (split_batches walks the same lengths).
        start = end
        end = start + 12 + _INT32.unpack_from(data, start + 8)[0]  # type: ignore[arg-type]
        if batch.next_offset <= nxt or getattr(batch, "base_offset", 0) > high:
            continue
        v2 = batch.magic == 2
        if check_crcs and not (
            crc_ok(data, start, end) if crc_ok is not None and v2 else batch.validate_crc()  # type: ignore[arg-type]
        ):
            raise CorruptRecordException(
                f"record batch at offset {getattr(batch, 'base_offset', '?')} failed its CRC check"
            )
        if getattr(batch, "is_control_batch", False):
            continue
        ts_type = getattr(batch, "timestamp_type", 0) or 0
        # Every offset of the batch has its record (its record count one more than its
        # last offset delta): record i is at offset base + i.
        complete = (
            plain and v2 and _INT32.unpack_from(data, start + 57)[0] == batch.last_offset_delta + 1  # type: ignore[arg-type]
        )
        if (
            complete
            and batch.base_offset >= nxt
            and batch.base_offset >= run.first
            and batch.next_offset - 1 <= run.last
        ):
            # Every offset of the batch has its record, all inside the current run.
            if batch.base_offset > nxt:
                _gaps(run, nxt, batch.base_offset - 1)
            nxt = batch.next_offset
            if build is not None:
                try:
                    out += build(
                        data, start, end, ShareRecord, topic, partition, count, run, idbase
                    )
                    continue
                except native_error():
                    pass  # the pure path below decodes it (and raises what it finds)
            out += [
                make(
                    ShareRecord,
                    (
                        topic,
                        partition,
                        offset,
                        r.timestamp,
                        ts_type,
                        r.key,
                        r.value,
                        tuple(h) if (h := r.headers) else (),
                        count,
                        run,
                        idbase + offset,
                    ),
                )
                for r in batch
                for offset in (r.offset,)
            ]
            continue
        if complete and build is not None:
            # A batch the acquired runs cut (a strict record-limit acquisition cuts most:
            # it ends inside a batch, and the next fetch starts there): built whole,
            # natively, once per run it meets, and sliced to that run's offsets.
            # Measured (issue 28, runs 500-592 and 593-999 over batches of 593 and 592
            # records of 100 B): the pure path below took 574 ns a record.
            base, last = batch.base_offset, batch.next_offset - 1
            whole: list[ShareRecord] | None = None
            built_for: AcquiredRun | None = None
            lo = max(nxt, base)
            while lo <= last:
                # The run of offset ``lo`` or the next one (as the pure path moves on).
                while lo > run.last:
                    _gaps(run, nxt, run.last)
                    ri += 1
                    if ri == len(runs):
                        done = True
                        break
                    run = runs[ri]
                    count, idbase = run.delivery_count, run.base - run.first
                    nxt = max(nxt, run.first)
                if done or run.first > last:
                    break  # the rest of the batch is not ours
                if built_for is not run:
                    try:
                        whole = build(
                            data, start, end, ShareRecord, topic, partition, count, run, idbase
                        )
                    except native_error():
                        whole = None  # the pure path decodes it (and raises what it finds)
                        break
                    built_for = run
                lo = max(lo, run.first)
                if lo > nxt:
                    _gaps(run, nxt, lo - 1)
                hi = min(run.last, last)
                out += whole[lo - base : hi - base + 1]  # type: ignore[index]
                nxt = lo = hi + 1
            if done:
                break
            if whole is not None or lo > last or run.first > last:
                continue
        for r in batch:
            offset = r.offset
            if offset < nxt:
                continue
            while offset > run.last:
                _gaps(run, nxt, run.last)
                ri += 1
                if ri == len(runs):
                    done = True
                    break
                run = runs[ri]
                count, idbase = run.delivery_count, run.base - run.first
                nxt = max(nxt, run.first)
            if done:
                break
            if offset < run.first:
                continue  # between two acquired ranges: another consumer's
            if offset > nxt:
                _gaps(run, nxt, offset - 1)
            key, value, headers = r.key, r.value, r.headers
            append(
                make(
                    ShareRecord,
                    (
                        topic,
                        partition,
                        offset,
                        r.timestamp,
                        ts_type,
                        kd(key) if kd else key,
                        vd(value) if vd else value,
                        tuple(headers) if headers else (),
                        count,
                        run,
                        idbase + offset,
                    ),
                )
            )
            nxt = offset + 1
        if done:
            break
    if not done:
        _gaps(run, nxt, run.last)
        for run in runs[ri + 1 :]:
            _gaps(run, max(nxt, run.first), run.last)
    return out


#: A v2 batch's length (at byte 8) and record count (at byte 57).
_INT32 = struct.Struct(">i")


#: A record's (topic, partition) and its delivery count, read in C (for grouping and
#: counting a poll's records without a Python call per record).
TOPIC_PARTITION_OF = itemgetter(0, 1)
DELIVERY_COUNT_OF = itemgetter(8)

#: ``tuple.__new__``: a :class:`ShareRecord` in one C call.
make = tuple.__new__


def hand_out(
    tracker: AcknowledgementTracker, records: list[ShareRecord], now: float
) -> list[ShareRecord]:
    """The ``records`` (in buffer order) that may be handed to the application now,
    marked handed out: :meth:`AcknowledgementTracker.hand_out_many`, a span at a time.
    Records of one run with consecutive offsets - what a fetch brings, bar compacted
    offsets - are checked and marked together (:meth:`AcknowledgementTracker.
    hand_out_span`); anything else, one by one."""
    out: list[ShareRecord] = []
    n = len(records)
    i = 0
    while i < n:
        first = records[i]
        run = first[9]
        if run is not None:
            # At most the rest of the run follows; all of it when nothing is missing.
            k = min(n, i + run.last - first[2] + 1)
            last = records[k - 1]
            if last[9] is run and last[2] - first[2] == k - 1 - i:
                lo = first[2] - run.first
                if tracker.hand_out_span(run, lo, lo + k - 1 - i, now):
                    out += records[i:k]
                    i = k
                    continue
        out += tracker.hand_out_many(records[i : i + 1], now)
        i += 1
    return out


def run_spans(records: Sequence[ShareRecord]) -> Iterator[tuple[int, int]]:
    """``(i, j)`` spans of ``records`` (in buffer order) whose records all come from one
    acquired run - so share its partition and delivery count - covering them in order.

    Why: a poll's grouping by partition and the acquired metric's count by delivery
    count cost a Python step per record (``itertools.groupby``, ``Counter``: ~1,700
    instructions a record of ~10,000 in a drain, issue 28); a run's records are one
    block of the list (runs do not overlap and records come in offset order), and
    nothing is missing in the common case, so its span is found from the run's
    bounds with one look.  A record outside the tracker, or a run whose records are
    not all there, is a span of its own (one record), which is still right."""
    n = len(records)
    i = 0
    while i < n:
        first = records[i]
        run = first[9]
        j = i + 1
        if run is not None:
            k = min(n, i + run.last - first[2] + 1)
            if k > j and records[k - 1][9] is run:
                j = k
        yield i, j
        i = j


def delivery_counts(records: Sequence[ShareRecord]) -> dict[int, int]:
    """How many of ``records`` have each delivery count (a span of one run at a time)."""
    counts: dict[int, int] = {}
    for i, j in run_spans(records):
        count = records[i][8]
        counts[count] = counts.get(count, 0) + j - i
    return counts


def _gaps(run: AcquiredRun, first: int, last: int) -> None:
    for offset in range(max(first, run.first), last + 1):
        run.owner.gap(run, offset)


def _first(run: AcquiredRun) -> int:
    return run.first


class RecordBuffer:
    """Decoded records waiting to be handed out, in order: the lists decoding made,
    taken from by slicing (a deque of records cost a ``popleft`` call per record)."""

    __slots__ = ("_chunks", "_head", "_n")

    def __init__(self) -> None:
        self._chunks: deque[list[ShareRecord]] = deque()
        #: Index of the first record not taken in ``_chunks[0]``.
        self._head = 0
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self) -> Iterator[ShareRecord]:
        for i, chunk in enumerate(self._chunks):
            yield from (chunk[self._head :] if i == 0 else chunk)

    def first(self) -> ShareRecord:
        return self._chunks[0][self._head]

    def extend(self, records: list[ShareRecord]) -> None:
        """Append ``records`` (the buffer keeps the list: the caller lets go of it)."""
        if records:
            self._chunks.append(records)
            self._n += len(records)

    def take(self, n: int) -> list[ShareRecord]:
        """The first ``n`` records (fewer if fewer are buffered), removed."""
        out: list[ShareRecord] = []
        chunks = self._chunks
        while n > 0 and chunks:
            chunk, head = chunks[0], self._head
            left = len(chunk) - head
            if left <= n:
                out += chunk[head:] if head else chunk
                chunks.popleft()
                self._head = 0
                self._n -= left
                n -= left
            else:
                out += chunk[head : head + n]
                self._head = head + n
                self._n -= n
                n = 0
        return out

    def clear(self) -> None:
        self._chunks.clear()
        self._head = 0
        self._n = 0

    def drop_partitions(self, gone: Collection[tuple[str, int]]) -> None:
        """Forget the records of the partitions in ``gone``."""
        kept = [r for r in self if (r[0], r[1]) not in gone]
        self.clear()
        self.extend(kept)
