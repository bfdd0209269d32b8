"""The read-ahead buffer and the hand-over to the application, checked synchronously.

Each buffered chunk remembers the ``PartitionState`` and ``epoch`` it was fetched
for.  At delivery, with no ``await`` between the check and the return, a chunk is
dropped when its partition is no longer in the current assignment, its epoch
changed, it is paused or ``revoking``, or the chunk does not start at the position.
The coordinator sets ``revoking`` synchronously before a revoke/lost callback
starts, so no record of a partition reaches the application after that.

A record the sink refuses (a deserializer raised) ends its partition's share of the
call: the records before it are delivered and the refusal is raised by the next
read of that partition, for as long as the position stays on the record.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from aiokafka.errors import CorruptRecordException

from aiogroup._fetch.decoding import Chunk
from aiogroup._fetch.planning import MemoryBudget
from aiogroup._fetch.walker import Sink, key_value_bytes, walk
from aiogroup._state.subscription import Assignment, FetchStatus, PartitionState
from aiogroup.errors import RecordDeserializationError
from aiogroup.structs import ConsumerRecord, TopicPartition

__all__ = ["Delivery", "record_bytes", "records_and_bytes"]

#: A decoded record beyond its share of the raw bytes: the record object and the
#: headers of its key and value bytes objects.  Measured with tracemalloc on a
#: partly read batch of 100 B records: about 285 B a record in ~3 allocations.
DECODED_RECORD_OVERHEAD = 200
#: The same for the ``ConsumerRecord`` objects the native module builds (a partly
#: read batch's records wait as those there): the object with its inline attribute
#: values, the key and value bytes objects and the offset's int.  Measured the same
#: way (1,000 records of 100 B, no key, no headers): 337 B a record, 227 B beyond the
#: raw bytes (the pure path's finished ConsumerRecords: 367 B; aiokafka's records 282 B).
NATIVE_DECODED_RECORD_OVERHEAD = 230


def records_and_bytes(batches: Iterable[list[ConsumerRecord]]) -> tuple[int, int]:
    """How many records, and their key + value bytes, read back from the records.

    A missing key or value (serialized size -1) counts 0 bytes.  The record path
    counts the bytes as it builds the records (``RecordSink.sizes``; with the native
    module from the sizes the parse found, without reading them back): this is for
    records whose count was not kept, summed in C (``key_value_bytes``).
    """
    n = nbytes = 0
    for records in batches:
        if records:
            n += len(records)
            nbytes += key_value_bytes(records)
    return n, nbytes


def record_bytes(record: ConsumerRecord) -> int:
    """One record's key + value bytes (a missing one, size -1, counts 0)."""
    k, v = record.serialized_key_size, record.serialized_value_size
    return (k if k > 0 else 0) + (v if v > 0 else 0)


@dataclass(frozen=True, slots=True)
class _Refusal:
    error: RecordDeserializationError
    state: PartitionState
    epoch: int

    def current(self, assignment: Assignment | None) -> bool:
        """Still true: same assignment and epoch, position still on the record."""
        st = self.state
        return (
            assignment is not None
            and assignment.get(st.tp) is st
            and st.epoch == self.epoch
            and st.position == self.error.offset
        )


class Delivery:
    """Buffered chunks per partition, handed out round-robin within a record limit."""

    def __init__(
        self,
        budget: MemoryBudget,
        *,
        wake: Callable[[], None],
        on_corrupt: Callable[[TopicPartition, CorruptRecordException], None],
    ) -> None:
        self._budget = budget
        self._wake = wake
        self._on_corrupt = on_corrupt
        self.buffers: dict[TopicPartition, deque[Chunk]] = {}
        self._refusal: _Refusal | None = None
        #: How many refusals were recorded so far: a read that found nothing but a
        #: new refusal raises it at once instead of waiting for more data.
        self.refusals = 0
        self._rr = 0
        #: Per partition: the decoded records of its partly read batch, as counted in
        #: the budget's ``decoded``, and the raw bytes a record of it averages.
        self._decoded: dict[TopicPartition, int] = {}
        self._raw_per_record: dict[TopicPartition, int] = {}

    def add(self, chunk: Chunk) -> None:
        self.buffers.setdefault(chunk.tp, deque()).append(chunk)
        self._budget.buffer(chunk.size)
        span = chunk.end_offset - chunk.next_offset
        if span > 0:
            self._raw_per_record[chunk.tp] = chunk.size // span

    def drop(self, tp: TopicPartition) -> None:
        chunks = self.buffers.pop(tp, None)
        self._count_decoded(tp, None)
        if chunks:
            self._budget.release(sum(c.size for c in chunks))
            self._wake()

    def clear(self) -> None:
        self.buffers.clear()
        self._refusal = None
        self._decoded.clear()
        self._raw_per_record.clear()
        self._budget.decoded = 0

    def _count_decoded(self, tp: TopicPartition, chunk: Chunk | None) -> None:
        """Count the decoded records ``chunk`` keeps of a partly read batch (see planning)."""
        now = 0
        if chunk is not None and chunk.pending is not None:
            overhead = (
                NATIVE_DECODED_RECORD_OVERHEAD if chunk.pending_native else DECODED_RECORD_OVERHEAD
            )
            per_record = overhead + self._raw_per_record.get(tp, 0)
            now = chunk.pending_left * per_record
        before = self._decoded.get(tp, 0)
        if now != before:
            self._budget.decoded += now - before
            if now:
                self._decoded[tp] = now
            else:
                del self._decoded[tp]
                self._wake()
            self._budget.note_peak()

    @property
    def refusal_pending(self) -> bool:
        return self._refusal is not None

    def raise_refusal(
        self, assignment: Assignment | None, partitions: Collection[TopicPartition]
    ) -> None:
        """Raise a refused record's error if the call reads its partition and it still holds."""
        refusal = self._refusal
        if refusal is None:
            return
        if not refusal.current(assignment):
            self._refusal = None  # sought past it, reset or reassigned
            return
        if partitions and refusal.state.tp not in partitions:
            return
        self._refusal = None  # the next walk finds the record again if it still fails
        raise refusal.error

    def drain(
        self,
        assignment: Assignment | None,
        partitions: Collection[TopicPartition],
        max_records: int | None,
        sink: Sink,
    ) -> int:
        """Hand out buffered records round-robin over partitions; no await in here.

        The cyclic garbage collector is paused for the duration (unless the
        application already disabled it).  Decoding allocates thousands of
        container objects per batch (aiokafka's record objects, header lists,
        ``ConsumerRecord`` objects) and none of them can form a cycle, yet each 700
        allocations start a collection that walks every young object and promotes
        the survivors, which makes older-generation collections frequent.  On a
        1,000,000-record drain getmany took 1.13 CPU seconds with collections
        running, 0.73 with the collector off and 0.90 with this pause
        (``python -m benchmarks.profiling gc``).  Deferred, a collection runs at most
        once after the call, and objects freed inside it (the Arrow path keeps
        none) never count.  The switch is process-wide: another thread that
        disables the collector during this (short, synchronous) window finds it
        enabled again afterwards.
        """
        if assignment is None or not self.buffers:
            return 0
        if not gc.isenabled():
            return self._drain_some(assignment, partitions, max_records, sink)
        gc.disable()
        try:
            return self._drain_some(assignment, partitions, max_records, sink)
        finally:
            gc.enable()

    def _drain_some(
        self,
        assignment: Assignment,
        partitions: Collection[TopicPartition],
        max_records: int | None,
        sink: Sink,
    ) -> int:
        if partitions:
            active = [tp for tp in self.buffers if tp in partitions]
        else:
            active = list(self.buffers)
        if not active:
            return 0
        start = self._rr % len(active)
        self._rr += 1
        active = active[start:] + active[:start]
        total = 0
        if max_records is None:
            # One fetched chunk per partition per call (aiokafka hands out as much):
            # turning the whole read-ahead into objects at once only feeds the GC.
            for tp in active:
                total += self._take(assignment, tp, 1 << 62, sink, single_chunk=True)
            return total
        remaining = max_records
        while active and remaining > 0:
            share = max(1, remaining // len(active))
            still: list[TopicPartition] = []
            for tp in active:
                n = self._take(assignment, tp, min(share, remaining), sink)
                total += n
                remaining -= n
                refused = self._refusal is not None and self._refusal.state.tp == tp
                if tp in self.buffers and n > 0 and not refused:
                    still.append(tp)
                if remaining <= 0:
                    break
            active = still
        return total

    def _take(
        self,
        assignment: Assignment,
        tp: TopicPartition,
        limit: int,
        sink: Sink,
        single_chunk: bool = False,
    ) -> int:
        queue = self.buffers[tp]
        st = assignment.get(tp)
        taken = 0
        while queue and taken < limit:
            chunk = queue[0]
            if (
                st is None
                or chunk.state is not st
                or chunk.epoch != st.epoch
                or st.revoking
                or st.paused
                or st.status is not FetchStatus.READY
                or chunk.next_offset != st.position
            ):
                self.drop(tp)
                return taken
            try:
                taken += walk(chunk, limit - taken, sink)
            except CorruptRecordException as exc:
                self.drop(tp)
                st.consumed_to(chunk.next_offset)
                self._on_corrupt(tp, exc)
                return taken
            self._count_decoded(tp, chunk)
            st.consumed_to(chunk.next_offset)
            if chunk.failure is not None:
                self._refusal = _Refusal(chunk.failure, st, st.epoch)
                self.refusals += 1
                chunk.failure = None
                return taken
            if chunk.done:
                queue.popleft()
                self._budget.release(chunk.size)
                self._wake()
                if single_chunk and taken:
                    break
        if not queue:
            self.buffers.pop(tp, None)
        return taken
