"""One partition's fetched record batches: split on arrival, filtered as they are read.

Batches are split (headers only) when the response arrives and records are decoded
only when the application asks for them, so a chunk dropped unread (a seek, a
revocation) costs nothing beyond its bytes.  Reading a batch decides three things,
all here: whether its CRC holds, whether it is a control batch, and (read_committed)
whether its producer's transaction was aborted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aiokafka.errors import CorruptRecordException
from aiokafka.record.control_record import ABORT_MARKER, ControlRecord
from aiokafka.record.memory_records import MemoryRecords

from aiogroup.errors import RecordDeserializationError
from aiogroup.structs import TopicPartition
from aiogroup.subscription import PartitionState

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
        "end_offset",
        "epoch",
        "failure",
        "next_offset",
        "pending",
        "size",
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
        #: Records of a partly read batch (C batches cannot be iterated twice).
        self.pending: Iterator[Any] | None = None
        #: Timestamp type of the pending batch; None for the legacy format, where
        #: each record carries its own.
        self.ts_type: int | None = 0
        #: Set by the walker when the sink refused the record at ``next_offset``.
        self.failure: RecordDeserializationError | None = None

    @property
    def done(self) -> bool:
        return self.pending is None and self.batch_index >= len(self.batches)

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
            if self.check_crcs and not batch.validate_crc():
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

    def skip_to(self, offset: int) -> None:
        if offset > self.next_offset:
            self.next_offset = min(offset, self.end_offset)

    def finish(self) -> None:
        """Stop reading: the rest of the chunk lies past its end offset."""
        self.pending = None
        self.batch_index = len(self.batches)


def _is_abort_marker(batch: Any) -> bool:
    for rec in batch:
        key = rec.key
        return key is not None and ControlRecord.parse(key) == ABORT_MARKER
    return False
