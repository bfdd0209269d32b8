"""One partition's fetched record batches: split on arrival, filtered as they are read.

Batches are split (headers only) when the response arrives and records are decoded
only when the application asks for them, so a chunk dropped unread (a seek, a
revocation) costs nothing beyond its bytes.  Reading a batch decides three things,
all here: whether its CRC holds, whether it is a control batch, and (read_committed)
whether its producer's transaction was aborted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka.errors import CorruptRecordException
from aiokafka.record.control_record import ABORT_MARKER, ControlRecord
from aiokafka.record.memory_records import MemoryRecords

from aiogroup._fetch.native import native_crc
from aiogroup._state.subscription import PartitionState
from aiogroup.errors import RecordDeserializationError
from aiogroup.structs import TopicPartition

__all__ = ["Chunk", "split_batches"]


def split_batches(data: bytes) -> list[Any]:
    """The complete record batches in a fetched record set (a trailing partial one is cut)."""
    records = MemoryRecords(data)
    batches = []
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        batches.append(batch)
    return batches


class Chunk:
    """The record batches one Fetch returned for one partition, and how far they were read.

    The walker (``aiogroup._fetch.walker.walk``) is the only reader: it takes batches
    from ``next_batch()`` and keeps a partly read batch's records in ``pending``.
    """

    __slots__ = (
        "_aborted",
        "_aborted_pids",
        "batch_index",
        "batches",
        "check_crcs",
        "crc_ok",
        "data",
        "end_offset",
        "epoch",
        "failure",
        "next_offset",
        "pending",
        "pending_native",
        "pending_pos",
        "pending_sizes",
        "size",
        "spans",
        "state",
        "tp",
        "ts_type",
    )

    def __init__(
        self,
        state: PartitionState,
        epoch: int,
        fetch_offset: int,
        batches: list[Any],
        size: int,
        *,
        end_offset: int,
        check_crcs: bool,
        aborted: list[tuple[int, int]] | None,
        data: bytes | None = None,
    ) -> None:
        self.state = state
        self.tp: TopicPartition = state.tp
        self.epoch = epoch
        #: Next offset to hand out; equals the partition position while deliverable.
        self.next_offset = fetch_offset
        #: Position after the whole chunk (past control and aborted batches, capped
        #: at the last stable offset for read_committed).
        self.end_offset = end_offset
        self.batches = batches
        self.size = size
        self.check_crcs = check_crcs
        #: read_committed only: aborted transactions (first_offset, producer_id) sorted.
        self._aborted = sorted((first, pid) for pid, first in aborted) if aborted else []
        self._aborted_pids: set[int] | None = set() if aborted is not None else None
        #: Index of the next batch ``next_batch`` looks at.
        self.batch_index = 0
        #: Records of a partly read batch (C batches cannot be iterated twice); the
        #: next one to look at is ``pending[pending_pos]``.
        self.pending: list[Any] | None = None
        self.pending_pos = 0
        #: The running key + value bytes of ``pending`` when the native builder made
        #: them (``len(pending) + 1`` entries): a slice ``pending[i:j]`` holds
        #: ``pending_sizes[j] - pending_sizes[i]`` bytes, for the delivered-bytes
        #: metric without reading each record's sizes back.  None: count them.
        self.pending_sizes: Sequence[int] | None = None
        #: True when ``pending`` holds ``ConsumerRecord`` objects the native module
        #: built (they weigh more than aiokafka's records: the memory budget's count).
        self.pending_native = False
        #: Timestamp type of the pending batch; None for the legacy format, where
        #: each record carries its own.
        self.ts_type: int | None = 0
        #: Set by the walker when the sink refused the record at ``next_offset``.
        self.failure: RecordDeserializationError | None = None
        #: The fetched record set the batches were split from (for the native decoder).
        self.data = data
        #: Each batch's (start, end) in ``data``, or None when not a v2 batch; built
        #: on the first ``raw_span`` call (only the Arrow path asks).
        self.spans: list[tuple[int, int] | None] | None = None
        #: The native CRC-32C check, when the native module is there and data known.
        self.crc_ok = native_crc() if check_crcs and data is not None else None

    @property
    def done(self) -> bool:
        return self.pending is None and self.batch_index >= len(self.batches)

    @property
    def pending_left(self) -> int:
        """How many records of the partly read batch are not handed out yet."""
        pending = self.pending
        return 0 if pending is None else len(pending) - self.pending_pos

    def next_batch(self) -> Any:
        """The next batch with deliverable records, skipping control and aborted ones.

        Returns None when the chunk is used up, having moved ``next_offset`` to its end.
        """
        batches = self.batches
        while self.batch_index < len(batches):
            batch = batches[self.batch_index]
            self.batch_index += 1
            if batch.next_offset <= self.next_offset:
                continue  # wholly before the requested offset
            if self.check_crcs and not self._crc_holds(batch):
                raise CorruptRecordException(
                    f"record batch of {self.tp.topic}-{self.tp.partition} at offset "
                    f"{getattr(batch, 'base_offset', self.next_offset)} failed its CRC check"
                )
            pids = self._aborted_pids
            if pids is not None and batch.producer_id is not None and batch.producer_id >= 0:
                last = batch.next_offset - 1
                aborted = self._aborted
                while aborted and aborted[0][0] <= last:
                    pids.add(aborted.pop(0)[1])
                if batch.is_control_batch:
                    if _is_abort_marker(batch):
                        pids.discard(batch.producer_id)
                    self.skip_to(batch.next_offset)
                    continue
                if batch.is_transactional and batch.producer_id in pids:
                    self.skip_to(batch.next_offset)
                    continue
            if batch.is_control_batch:
                self.skip_to(batch.next_offset)
                continue
            return batch
        self.next_offset = max(self.next_offset, self.end_offset)
        return None

    def _crc_holds(self, batch: Any) -> bool:
        crc_ok = self.crc_ok
        if crc_ok is not None:
            span = self.raw_span(self.batch_index - 1)
            if span is not None:
                assert self.data is not None
                return crc_ok(self.data, span[0], span[1])
        return bool(batch.validate_crc())

    def raw_span(self, index: int) -> tuple[int, int] | None:
        """Where batch ``index`` lies in ``data``: (start, end), or None (no data, not v2).

        A record set is a sequence of ``base_offset int64, batch_length int32, ...``
        entries, so the spans follow from the 12-byte prefixes.  A span whose base
        offset is not the batch's own is not trusted (None: the batch is decoded in
        Python).
        """
        spans = self.spans
        if spans is None:
            spans = self.spans = _spans(self.data, self.batches)
        return spans[index]

    def skip_to(self, offset: int) -> None:
        if offset > self.next_offset:
            self.next_offset = min(offset, self.end_offset)

    def finish(self) -> None:
        """Stop reading: the rest of the chunk lies past its end offset."""
        self.pending = self.pending_sizes = None
        self.batch_index = len(self.batches)


def _spans(data: bytes | None, batches: list[Any]) -> list[tuple[int, int] | None]:
    spans: list[tuple[int, int] | None] = [None] * len(batches)
    if type(data) is not bytes:  # the native decoder reads bytes only
        return spans
    from_bytes = int.from_bytes
    pos = 0
    size = len(data)
    for i, batch in enumerate(batches):
        if pos + 17 > size:
            break
        end = pos + 12 + from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        if end <= pos + 12:
            break  # a nonsensical length: leave the rest to the Python path
        if (
            data[pos + 16] == 2
            and end <= size
            and from_bytes(data[pos : pos + 8], "big", signed=True)
            == getattr(batch, "base_offset", None)
        ):
            spans[i] = (pos, end)
        pos = end
    return spans


def _is_abort_marker(batch: Any) -> bool:
    for rec in batch:
        key = rec.key
        return key is not None and ControlRecord.parse(key) == ABORT_MARKER
    return False
