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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import CorruptRecordException

from aiogroup._fetch.decoding import split_batches
from aiogroup._fetch.share_acknowledgements import Acquisition

__all__ = ["AcquiredRecord", "ShareRecord", "acquired_records"]


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One record handed out by a share consumer.

    Shaped like aiokafka's ``ConsumerRecord`` (topic, partition, offset, timestamp,
    key, value, headers) plus ``delivery_count``: how many times the broker has
    delivered it, this time included (1 the first time; more after a RELEASE, a lock
    that ran out or a consumer that died holding it).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes], ...]
    delivery_count: int
    #: The record's acquisition, which ``acknowledge()`` checks (not for applications).
    acquisition: Acquisition = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class AcquiredRecord:
    """A decoded record at an acquired offset, before it becomes a :class:`ShareRecord`."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    delivery_count: int


def acquired_records(
    data: bytes | None,
    ranges: Sequence[tuple[int, int, int]],
    *,
    check_crcs: bool = True,
) -> tuple[list[AcquiredRecord], list[int]]:
    """The records of ``data`` at offsets ``ranges`` acquired ((first, last, delivery
    count) each), and the acquired offsets without a record (gaps), both in order."""
    counts = _counts(ranges)
    if not counts:
        return [], []
    records: list[AcquiredRecord] = []
    seen: set[int] = set()
    low, high = min(counts), max(counts)
    for batch in split_batches(data) if data else ():
        if batch.next_offset <= low or getattr(batch, "base_offset", 0) > high:
            continue
        if check_crcs and not batch.validate_crc():
            raise CorruptRecordException(
                f"record batch at offset {getattr(batch, 'base_offset', '?')} failed its CRC check"
            )
        if getattr(batch, "is_control_batch", False):
            continue
        ts_type = getattr(batch, "timestamp_type", 0) or 0
        for r in batch:
            count = counts.get(r.offset)
            if count is None or r.offset in seen:
                continue
            seen.add(r.offset)
            records.append(
                AcquiredRecord(
                    r.offset,
                    r.timestamp,
                    ts_type,
                    r.key,
                    r.value,
                    tuple(r.headers) if r.headers else (),
                    count,
                )
            )
    gaps = sorted(o for o in counts if o not in seen)
    return records, gaps


def _counts(ranges: Sequence[tuple[int, int, int]]) -> dict[int, int]:
    return {o: count for first, last, count in ranges for o in _span(first, last)}


def _span(first: int, last: int) -> Iterator[int]:
    return iter(range(first, last + 1))
