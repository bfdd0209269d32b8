"""The fetcher: reads ahead of the application, within a fixed memory bound.

Two cursors per partition
    ``PartitionState.position`` is the next offset handed to the application.  The
    fetcher keeps its own read-ahead cursor (the next offset to *fetch*), created at
    the position and advanced as responses arrive.  A cursor is tied to the
    partition's ``epoch``: a seek, reset or revocation bumps the epoch, and the
    planner then discards the cursor and everything buffered for the partition.

Delivery is checked synchronously
    Each buffered chunk remembers the ``PartitionState`` and ``epoch`` it was fetched
    for.  At delivery, with no ``await`` between the check and the return, a chunk is
    dropped when the partition is no longer in the current assignment, its epoch
    changed, it is paused or ``revoking``, or the chunk does not start at the
    position.  The coordinator sets ``revoking`` synchronously before a revoke/lost
    callback starts, so no record of a partition reaches the application after that.

The memory bound (what a benchmark can measure)
    Let B = ``max_buffered_bytes`` (0 disables the bound), P =
    ``max_partition_fetch_bytes``.  ``buffered_bytes`` counts the raw record-set
    bytes of every response chunk not yet fully delivered (a chunk is released
    when its last record is handed out or when it is dropped).  A response exists
    up to three times while it is handled (the frame the connection read, the
    record set the response decoder copied out of it, and the per-batch slices the
    buffer keeps), so the budget is spent per request, on the response-level
    limit: with room R = (B - buffered_bytes - reserved_bytes) / 3, a Fetch asks
    for ``max_bytes = min(fetch_max_bytes, n * P, R)`` for its n partitions and
    reserves three times that until its response has been split into chunks,
    whose sizes then replace the reservation.  No request is sent while R is
    below min(P, B / 3), so requests stay worth a round trip; an empty buffer
    always has R = B / 3.  The response-level limit, not the per-partition one,
    carries the bound because brokers honour it (the embedded test broker ignores
    P but not ``max_bytes``), and every fetchable partition can share one request
    instead of each reserving a worst-case 3P.  Hence the Kafka bytes the consumer
    holds, transient copies included, stay within ``buffered_bytes +
    reserved_bytes <= B`` at every moment; Kafka oversteps ``max_bytes`` only to
    make progress (KIP-74: the first record batch is returned whole even when
    larger than the limit), so the bound is ``B + one record batch``.

Wake-ups, not polling
    The fetch routine sleeps on one future that is resolved when: a Fetch or
    ListOffsets finishes, buffered data is released, a partition gets a position or
    is resumed (small watcher tasks await ``wait_position()`` / ``wait_resumed()``),
    a retry backoff expires (``call_later``), or the application asks for data and
    finds none.  It also wakes when the assignment's ``unassigned`` future resolves.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any

from aiokafka.errors import (
    ConsumerStoppedError,
    CorruptRecordException,
    IllegalStateError,
    KafkaConnectionError,
    NodeNotReadyError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.control_record import ABORT_MARKER, ControlRecord
from aiokafka.record.memory_records import MemoryRecords

from aiogroup import offsets as _offsets
from aiogroup._timeouts import wait_for
from aiogroup.config import ConsumerConfig
from aiogroup.errors import error_for_code
from aiogroup.metrics import ConsumerMetrics
from aiogroup.structs import ConsumerRecord, OffsetResetStrategy, TopicPartition
from aiogroup.subscription import Assignment, FetchStatus, PartitionState, SubscriptionState

if TYPE_CHECKING:
    import pyarrow

    from aiogroup.arrow import ColumnBuilder

__all__ = ["Fetcher"]

log = logging.getLogger(__name__)

_READ_UNCOMMITTED = 0
_READ_COMMITTED = 1
# Partition errors cured by fresher metadata (a leader moved or is being elected).
_METADATA_CODES = frozenset({3, 5, 6, 56, 74, 75})
_TRANSPORT_ERRORS = (KafkaConnectionError, NodeNotReadyError, RequestTimedOutError)


class _Cursor:
    """The read-ahead position of one partition, valid for one epoch."""

    __slots__ = ("epoch", "offset")

    def __init__(self, epoch: int, offset: int) -> None:
        self.epoch = epoch
        self.offset = offset


class Chunk:
    """The record batches one Fetch returned for one partition, delivered lazily.

    Batches are split (headers only) when the response arrives; records are decoded
    only when the application asks for them, so a chunk that is dropped unread
    costs nothing beyond its bytes.
    """

    __slots__ = (
        "_aborted",
        "_aborted_pids",
        "_bi",
        "_it",
        "_ts_type",
        "batches",
        "check_crcs",
        "end_offset",
        "epoch",
        "next_offset",
        "size",
        "state",
        "tp",
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
        self._bi = 0
        self._it: Iterator[Any] | None = None
        self._ts_type: int | None = 0

    @property
    def done(self) -> bool:
        return self._it is None and self._bi >= len(self.batches)

    def _next_batch(self) -> Any:
        """The next batch with deliverable records, skipping control and aborted ones."""
        batches = self.batches
        while self._bi < len(batches):
            batch = batches[self._bi]
            self._bi += 1
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
                    self._skip_to(batch.next_offset)
                    continue
                if batch.is_transactional and batch.producer_id in pids:
                    self._skip_to(batch.next_offset)
                    continue
            if batch.is_control_batch:
                self._skip_to(batch.next_offset)
                continue
            return batch
        self.next_offset = max(self.next_offset, self.end_offset)
        return None

    def _skip_to(self, offset: int) -> None:
        if offset > self.next_offset:
            self.next_offset = min(offset, self.end_offset)

    def take_records(
        self, limit: int, out: list[ConsumerRecord], kd: Callable[..., Any] | None, vd: Any
    ) -> int:
        """Append up to ``limit`` ConsumerRecords to ``out``; the hot loop of getmany."""
        topic, partition = self.tp.topic, self.tp.partition
        end = self.end_offset
        taken = 0
        CR = ConsumerRecord
        while taken < limit:
            it = self._it
            if it is None:
                batch = self._next_batch()
                if batch is None:
                    break
                base = getattr(batch, "base_offset", None)
                count = batch.last_offset_delta + 1 if base is not None else None
                if (
                    base is not None
                    and count is not None
                    and base >= self.next_offset
                    and batch.next_offset <= end
                    and count <= limit - taken
                ):
                    # Whole batch wanted: one comprehension, no per-record branches.
                    tst = batch.timestamp_type
                    if kd is None and vd is None:
                        recs = [
                            CR(
                                topic,
                                partition,
                                r.offset,
                                r.timestamp,
                                tst,
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
                        recs = [
                            CR(
                                topic,
                                partition,
                                r.offset,
                                r.timestamp,
                                tst,
                                k if kd is None or k is None else kd(k),
                                v if vd is None or v is None else vd(v),
                                None,
                                -1 if k is None else len(k),
                                -1 if v is None else len(v),
                                tuple(h) if (h := r.headers) else (),
                            )
                            for r in batch
                            for k, v in ((r.key, r.value),)
                        ]
                    if recs:
                        out.extend(recs)
                        taken += len(recs)
                    self.next_offset = batch.next_offset
                    continue
                self._ts_type = batch.timestamp_type if base is not None else None
                it = self._it = iter(list(batch))  # C batches cannot be re-entered
            tst = self._ts_type
            nxt = self.next_offset
            for r in it:
                off = r.offset
                if off < nxt:
                    continue
                if off >= end:
                    nxt = end
                    self._it = None
                    self._bi = len(self.batches)
                    break
                k = r.key
                v = r.value
                hs = r.headers
                out.append(
                    CR(
                        topic,
                        partition,
                        off,
                        r.timestamp,
                        r.timestamp_type if tst is None else tst,
                        k if kd is None or k is None else kd(k),
                        v if vd is None or v is None else vd(v),
                        r.checksum,
                        -1 if k is None else len(k),
                        -1 if v is None else len(v),
                        tuple(hs) if hs else (),
                    )
                )
                nxt = off + 1
                taken += 1
                if taken >= limit:
                    break
            else:
                self._it = None
                batch = self.batches[self._bi - 1]
                nxt = max(nxt, min(batch.next_offset, end))
            self.next_offset = nxt
        if self._it is None and self._bi >= len(self.batches):
            self.next_offset = max(self.next_offset, self.end_offset)
        return taken

    def take_columns(self, limit: int, cols: ColumnBuilder) -> int:
        """Append up to ``limit`` records' fields to column lists (the Arrow path)."""
        end = self.end_offset
        taken = 0
        part = self.tp.partition
        while taken < limit:
            it = self._it
            if it is None:
                batch = self._next_batch()
                if batch is None:
                    break
                base = getattr(batch, "base_offset", None)
                if (
                    base is not None
                    and base >= self.next_offset
                    and batch.next_offset <= end
                    and batch.last_offset_delta + 1 <= limit - taken
                ):
                    taken += cols.add_batch(self.tp, part, batch, batch.timestamp_type)
                    self.next_offset = batch.next_offset
                    continue
                self._ts_type = batch.timestamp_type if base is not None else None
                it = self._it = iter(list(batch))  # C batches cannot be re-entered
            nxt = self.next_offset
            tst = self._ts_type
            for r in it:
                off = r.offset
                if off < nxt:
                    continue
                if off >= end:
                    nxt = end
                    self._it = None
                    self._bi = len(self.batches)
                    break
                cols.add_record(self.tp, part, r, r.timestamp_type if tst is None else tst)
                nxt = off + 1
                taken += 1
                if taken >= limit:
                    break
            else:
                self._it = None
                batch = self.batches[self._bi - 1]
                nxt = max(nxt, min(batch.next_offset, end))
            self.next_offset = nxt
        if self._it is None and self._bi >= len(self.batches):
            self.next_offset = max(self.next_offset, self.end_offset)
        return taken


def _is_abort_marker(batch: Any) -> bool:
    for rec in batch:
        key = rec.key
        return key is not None and ControlRecord.parse(key) == ABORT_MARKER
    return False


#: How many copies of a Fetch response can be alive at once while it is handled
#: (connection frame, decoded record set, per-batch slices): what an in-flight
#: Fetch reserves against max_buffered_bytes, in units of its max_bytes.
_COPIES_WHILE_HANDLED = 3


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


class Fetcher:
    """Fetches the assigned partitions ahead of the application and hands records out."""

    def __init__(
        self, client: Any, subscription: SubscriptionState, config: ConsumerConfig
    ) -> None:
        self._client = client
        self._sub = subscription
        self._config = config
        self._isolation = _READ_COMMITTED if config.read_committed else _READ_UNCOMMITTED
        self._backoff = config.retry_backoff_ms / 1000
        self._max_buffered = config.max_buffered_bytes
        self._partition_bytes = config.max_partition_fetch_bytes
        self._key_deserializer = config.key_deserializer
        self._value_deserializer = config.value_deserializer
        self._buffers: dict[TopicPartition, deque[Chunk]] = {}
        self._cursors: dict[TopicPartition, _Cursor] = {}
        #: Raw bytes of buffered chunks not yet fully delivered.
        self.buffered_bytes = 0
        #: Bytes reserved by in-flight Fetch requests (P per partition).
        self.reserved_bytes = 0
        #: Highest buffered_bytes + reserved_bytes seen (for tests and benchmarks).
        self.peak_bytes = 0
        self._inflight_nodes: set[int] = set()
        self._inflight_tps: set[TopicPartition] = set()
        self._node_backoff: dict[int, float] = {}
        self._tp_backoff: dict[TopicPartition, float] = {}
        self._resetting: set[TopicPartition] = set()
        self._reported: set[tuple[TopicPartition, int]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watchers: dict[tuple[int, str], asyncio.Task[None]] = {}
        self._timers: set[asyncio.TimerHandle] = set()
        self._routine: asyncio.Task[None] | None = None
        self._wake_fut: asyncio.Future[None] | None = None
        self._data_ready = asyncio.Event()
        subscription.add_error_callback(self._data_ready.set)
        self._error: BaseException | None = None
        self._closed = False
        #: Replaced by GroupConsumer with the consumer's shared instance.
        self.metrics = ConsumerMetrics()
        self._rr = 0
        self._plan_rr = 0

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ConsumerStoppedError()
        if self._routine is None:
            self._routine = asyncio.get_running_loop().create_task(
                self._run(), name="aiogroup-fetcher"
            )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks: list[asyncio.Task[Any]] = [*self._tasks, *self._watchers.values()]
        if self._routine is not None:
            tasks.append(self._routine)
        for task in tasks:
            task.cancel()
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._watchers.clear()
        self._buffers.clear()
        self._cursors.clear()
        self.buffered_bytes = 0
        self.reserved_bytes = 0
        self._data_ready.set()

    # -- the fetch routine ----------------------------------------------------------------

    def _wake(self) -> None:
        fut = self._wake_fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _wake_later(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._timers.discard(handle)
            self._wake()

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if self._sub.assignment is None:
                    for tp in list(self._buffers.keys() | self._cursors.keys()):
                        self._drop(tp)  # nothing is assigned: free the read-ahead now
                assignment = await self._sub.wait_for_assignment()
                self._wake_fut = loop.create_future()
                try:
                    self._plan(assignment, loop.time())
                except Exception as exc:  # a bug must surface, not kill fetching silently
                    log.exception("fetch planning failed")
                    self._report(exc)
                    self._wake_later(self._backoff)
                await asyncio.wait(
                    (self._wake_fut, assignment.unassigned),
                    return_when=asyncio.FIRST_COMPLETED,
                )
        except ConsumerStoppedError:
            return

    def _plan(self, assignment: Assignment, now: float) -> None:
        for tp in [tp for tp, until in self._tp_backoff.items() if until <= now]:
            del self._tp_backoff[tp]
        self._purge(assignment)
        self._watch(assignment)
        self._start_resets(assignment)
        by_node: dict[int, list[tuple[PartitionState, _Cursor, int]]] = {}
        room = (
            (self._max_buffered - self.buffered_bytes - self.reserved_bytes)
            // _COPIES_WHILE_HANDLED
            if self._max_buffered
            else None
        )
        smallest = min(self._partition_bytes, self._max_buffered // _COPIES_WHILE_HANDLED)
        if room is not None and room < smallest:
            return  # released chunks wake the routine when there is room again
        metadata_stale = False
        states = list(assignment.states())
        if states:
            # Partitions with nothing buffered first, so the budget goes where the
            # application will look next; rotate so that a response cut at max_bytes
            # does not starve the partitions at the end of the request.
            self._plan_rr = (self._plan_rr + 1) % len(states)
            states = states[self._plan_rr :] + states[: self._plan_rr]
            states.sort(key=lambda st: st.tp in self._buffers)
        for st in states:
            if not st.is_fetchable:
                continue
            tp = st.tp
            if tp in self._inflight_tps:
                continue
            until = self._tp_backoff.get(tp)
            if until is not None:
                if until > now:
                    continue
                del self._tp_backoff[tp]
            cursor = self._cursors.get(tp)
            if cursor is None or cursor.epoch != st.epoch:
                self._drop(tp)
                assert st.position is not None
                cursor = self._cursors[tp] = _Cursor(st.epoch, st.position)
            node = self._client.cluster.leader_for_partition(tp)
            if node is None or node == -1:
                if node is None:
                    self._client.add_topic(tp.topic)
                metadata_stale = True
                self._tp_backoff[tp] = now + self._backoff
                continue
            if node in self._inflight_nodes:
                continue
            node_until = self._node_backoff.get(node)
            if node_until is not None and node_until > now:
                continue
            by_node.setdefault(node, []).append((st, cursor, cursor.offset))
        if metadata_stale:
            self._client.force_metadata_update()
            self._wake_later(self._backoff)
        for node, parts in by_node.items():
            max_bytes = min(self._config.fetch_max_bytes, len(parts) * self._partition_bytes)
            if room is not None:
                if room < smallest:
                    break  # the other leaders' turn comes when memory is released
                max_bytes = min(max_bytes, room)
                room -= max_bytes
            self._send_fetch(node, parts, max_bytes)

    def _purge(self, assignment: Assignment) -> None:
        """Release buffers and cursors of partitions that cannot be delivered any more."""
        for tp in list(self._buffers.keys() | self._cursors.keys()):
            st = assignment.get(tp)
            cursor = self._cursors.get(tp)
            if (
                st is None
                or not st.is_fetchable
                or (cursor is not None and cursor.epoch != st.epoch)
            ):
                self._drop(tp)

    def _drop(self, tp: TopicPartition) -> None:
        chunks = self._buffers.pop(tp, None)
        if chunks:
            self.buffered_bytes -= sum(c.size for c in chunks)
            self._wake()
        self._cursors.pop(tp, None)

    def _watch(self, assignment: Assignment) -> None:
        """Make sure the routine wakes when a partition's position changes or it is resumed."""
        live: set[tuple[int, str]] = set()
        for st in assignment.states():
            if st.revoking:
                continue
            # Any seek or reset, not just a position arriving: a reset asked for while
            # we sleep (seek_to_end, no committed offset found) is ours to perform, and
            # a seek must drop the read-ahead now, not at the next poll.
            key = (id(st), f"change-{st.epoch}")
            live.add(key)
            if key not in self._watchers:
                self._spawn_watcher(key, st.wait_changed)
            if st.paused:
                key = (id(st), "resumed")
                live.add(key)
                if key not in self._watchers:
                    self._spawn_watcher(key, st.wait_resumed)
        for key in [k for k in self._watchers if k not in live]:
            self._watchers.pop(key).cancel()

    def _spawn_watcher(self, key: tuple[int, str], waiter: Callable[[], Awaitable[object]]) -> None:
        # The waiter is created inside the task: a task cancelled before it first runs
        # (close() right after planning) must not leave a never-awaited coroutine.
        async def watch() -> None:
            try:
                await waiter()
            except asyncio.CancelledError:
                raise
            except Exception:
                pass  # unassigned or closed: the assignment change wakes us anyway
            if self._watchers.get(key) is task:
                del self._watchers[key]
            self._wake()
            self._data_ready.set()

        task = asyncio.get_running_loop().create_task(watch())
        self._watchers[key] = task

    # -- position resets ------------------------------------------------------------------

    def _start_resets(self, assignment: Assignment) -> None:
        groups: dict[OffsetResetStrategy, list[PartitionState]] = {}
        for tp in assignment.needing_reset():
            if tp in self._resetting:
                continue
            st = assignment.state(tp)
            if st.reset_strategy is OffsetResetStrategy.NONE:
                if (tp, st.epoch) not in self._reported:
                    self._reported.add((tp, st.epoch))
                    self._report(
                        NoOffsetForPartitionError(
                            f"{tp.topic}-{tp.partition} has no valid position and "
                            "auto_offset_reset is 'none'; seek() to a position first"
                        )
                    )
                continue
            groups.setdefault(st.reset_strategy, []).append(st)
        for strategy, states in groups.items():
            for st in states:
                self._resetting.add(st.tp)
            self._spawn(self._reset(strategy, [(st, st.epoch) for st in states]))

    async def _reset(
        self, strategy: OffsetResetStrategy, states: list[tuple[PartitionState, int]]
    ) -> None:
        try:
            found = await _offsets.list_offsets(
                self._client,
                {st.tp: strategy.list_offsets_timestamp for st, _ in states},
                read_committed=self._isolation == _READ_COMMITTED,
                timeout=self._config.request_timeout_ms / 1000,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("resetting %d partitions (%s) failed: %r", len(states), strategy, exc)
            if isinstance(exc, (TopicAuthorizationFailedError,)):
                self._report(exc)
            self._wake_later(self._backoff)
            return
        finally:
            for st, _ in states:
                self._resetting.discard(st.tp)
            self._wake()
        assignment = self._sub.assignment
        for st, epoch in states:
            if (
                assignment is None
                or assignment.get(st.tp) is not st
                or st.epoch != epoch
                or st.status is not FetchStatus.AWAITING_RESET
            ):
                continue  # reassigned, sought or revoked while we asked
            value = found.get(st.tp)
            st.seek(value.offset if value is not None else 0)

    # -- Fetch requests ---------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _send_fetch(
        self, node: int, parts: list[tuple[PartitionState, _Cursor, int]], max_bytes: int
    ) -> None:
        cfg = self._config
        reserved = max_bytes * _COPIES_WHILE_HANDLED
        if self._max_buffered:
            self.reserved_bytes += reserved
            self._note_peak()
        self._inflight_nodes.add(node)
        by_topic: dict[str, list[tuple[int, int, int]]] = {}
        for st, _, offset in parts:
            self._inflight_tps.add(st.tp)
            by_topic.setdefault(st.tp.topic, []).append(
                (st.tp.partition, offset, self._partition_bytes)
            )
        request = FetchRequest(
            cfg.fetch_max_wait_ms,
            cfg.fetch_min_bytes,
            max_bytes,
            self._isolation,
            list(by_topic.items()),
        )
        plan = {st.tp: (st, cursor, offset, st.epoch) for st, cursor, offset in parts}
        self._spawn(self._fetch(node, request, plan, reserved if self._max_buffered else 0))

    async def _fetch(
        self,
        node: int,
        request: FetchRequest,
        plan: dict[TopicPartition, tuple[PartitionState, _Cursor, int, int]],
        reserved: int,
    ) -> None:
        try:
            response = await self.metrics.timed_fetch(self._client.send(node, request), plan)
        except asyncio.CancelledError:
            raise
        except _TRANSPORT_ERRORS as exc:
            log.debug("Fetch from node %s failed: %r", node, exc)
            self._node_backoff[node] = asyncio.get_running_loop().time() + self._backoff
            self._client.force_metadata_update()
            self._wake_later(self._backoff)
        except Exception as exc:
            log.warning("Fetch from node %s failed: %r", node, exc)
            self._node_backoff[node] = asyncio.get_running_loop().time() + self._backoff
            self._wake_later(self._backoff)
        else:
            self.reserved_bytes -= reserved
            reserved = 0
            try:
                self._handle_response(response, plan)
            except Exception as exc:  # undecodable response: tell the application
                log.exception("handling a Fetch response from node %s failed", node)
                self._report(exc)
                self._node_backoff[node] = asyncio.get_running_loop().time() + self._backoff
                self._wake_later(self._backoff)
        finally:
            self.reserved_bytes -= reserved
            self._inflight_nodes.discard(node)
            self._inflight_tps.difference_update(plan)
            self._wake()

    def _handle_response(
        self,
        response: Any,
        plan: dict[TopicPartition, tuple[PartitionState, _Cursor, int, int]],
    ) -> None:
        version = response.API_VERSION
        now = asyncio.get_running_loop().time()
        got_data = False
        refresh = False
        backoffs = dict(self._tp_backoff)
        check_crcs = self._config.check_crcs
        read_committed = self._isolation == _READ_COMMITTED
        for topic, partitions in response.topics:
            for p in partitions:
                tp = TopicPartition(topic, p[0])
                entry = plan.get(tp)
                if entry is None:
                    continue
                st, cursor, offset, epoch = entry
                code = p[1]
                if code == 0:
                    st.highwater = p[2]
                    lso = p[3] if version >= 4 else -1
                    if lso >= 0:
                        st.last_stable_offset = lso
                    if version >= 5 and p[4] >= 0:
                        st.log_start_offset = p[4]
                    data = p[-1]
                    if (
                        not data
                        or self._cursors.get(tp) is not cursor
                        or st.epoch != epoch
                        or not st.is_fetchable
                    ):
                        continue
                    batches = split_batches(data)
                    if not batches:
                        self._report(
                            RecordTooLargeError(
                                f"a record batch of {tp.topic}-{tp.partition} at offset "
                                f"{offset} is larger than max_partition_fetch_bytes "
                                f"({self._partition_bytes})"
                            )
                        )
                        self._tp_backoff[tp] = now + self._backoff
                        continue
                    end = batches[-1].next_offset
                    aborted = None
                    if read_committed:
                        if lso >= 0:
                            end = min(end, lso)
                        if version >= 4:
                            aborted = (p[5] if version >= 5 else p[4]) or []
                    if end <= offset:
                        continue
                    chunk = Chunk(
                        st,
                        epoch,
                        offset,
                        batches,
                        len(data),
                        end_offset=end,
                        check_crcs=check_crcs,
                        aborted=aborted,
                    )
                    self._buffers.setdefault(tp, deque()).append(chunk)
                    self.buffered_bytes += chunk.size
                    cursor.offset = end
                    got_data = True
                elif code == OffsetOutOfRangeError.errno:
                    self._out_of_range(st, epoch, offset, now)
                elif code in _METADATA_CODES:
                    log.debug("Fetch %s: error %d, refreshing metadata", tp, code)
                    refresh = True
                    self._tp_backoff[tp] = now + self._backoff
                elif code == TopicAuthorizationFailedError.errno:
                    self._report(TopicAuthorizationFailedError(topic))
                    self._tp_backoff[tp] = now + self._backoff
                else:
                    cls = error_for_code(code)
                    if getattr(cls, "retriable", False):
                        self._tp_backoff[tp] = now + self._backoff
                    else:
                        self._report(cls(f"Fetch {tp.topic}-{tp.partition}"))
                        self._tp_backoff[tp] = now + self._backoff
        self._note_peak()
        if refresh:
            self._client.force_metadata_update()
        if self._tp_backoff != backoffs:
            self._wake_later(self._backoff)
        if got_data:
            self._data_ready.set()

    def _out_of_range(self, st: PartitionState, epoch: int, offset: int, now: float) -> None:
        if st.epoch != epoch or st.position != offset:
            # A read-ahead fetch: try again once the application has caught up with it.
            self._tp_backoff[st.tp] = now + self._backoff
            return
        strategy = st.reset_strategy
        st.await_reset()
        if strategy is OffsetResetStrategy.NONE:
            self._reported.add((st.tp, st.epoch))
            self._report(OffsetOutOfRangeError({st.tp: offset}))
        else:
            log.info("offset %d of %s is out of range; resetting (%s)", offset, st.tp, strategy)

    def _note_peak(self) -> None:
        total = self.buffered_bytes + self.reserved_bytes
        if total > self.peak_bytes:
            self.peak_bytes = total

    def _report(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._data_ready.set()

    def _raise_error(self) -> None:
        if self._closed:
            raise ConsumerStoppedError()
        exc, self._error = self._error, None
        if exc is not None:
            raise exc
        self._sub.raise_pending_error()

    # -- delivery -----------------------------------------------------------------------------

    def _drain(
        self,
        partitions: Collection[TopicPartition],
        max_records: int | None,
        take: Callable[[Chunk, int], int],
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
        assignment = self._sub.assignment
        if assignment is None or not self._buffers:
            return 0
        if not gc.isenabled():
            return self._drain_some(assignment, partitions, max_records, take)
        gc.disable()
        try:
            return self._drain_some(assignment, partitions, max_records, take)
        finally:
            gc.enable()

    def _drain_some(
        self,
        assignment: Assignment,
        partitions: Collection[TopicPartition],
        max_records: int | None,
        take: Callable[[Chunk, int], int],
    ) -> int:
        if partitions:
            active = [tp for tp in self._buffers if tp in partitions]
        else:
            active = list(self._buffers)
        if not active:
            return 0
        start = self._rr % len(active)
        self._rr += 1
        active = active[start:] + active[:start]
        unlimited = max_records is None
        remaining = max_records if max_records is not None else 1 << 62
        total = 0
        if unlimited:
            # One fetched chunk per partition per call (aiokafka hands out as much):
            # turning the whole read-ahead into objects at once only feeds the GC.
            for tp in active:
                total += self._take(assignment, tp, remaining, take, single_chunk=True)
            return total
        while active and remaining > 0:
            share = max(1, remaining // len(active))
            still: list[TopicPartition] = []
            for tp in active:
                n = self._take(assignment, tp, min(share, remaining), take)
                total += n
                remaining -= n
                if tp in self._buffers and n > 0:
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
        take: Callable[[Chunk, int], int],
        single_chunk: bool = False,
    ) -> int:
        queue = self._buffers[tp]
        st = assignment.get(tp)
        taken = 0
        while queue and taken < limit:
            chunk = queue[0]
            if (
                chunk.state is not st
                or chunk.epoch != st.epoch
                or st.revoking
                or st.paused
                or st.status is not FetchStatus.READY
                or chunk.next_offset != st.position
            ):
                self._drop(tp)
                return taken
            try:
                taken += take(chunk, limit - taken)
            except CorruptRecordException as exc:
                self._drop(tp)
                self._tp_backoff[tp] = asyncio.get_running_loop().time() + self._backoff
                self._wake_later(self._backoff)
                self._report(exc)
                st.consumed_to(chunk.next_offset)
                return taken
            st.consumed_to(chunk.next_offset)
            if chunk.done:
                queue.popleft()
                self.buffered_bytes -= chunk.size
                self._wake()
                if single_chunk and taken:
                    break
        if not queue:
            self._buffers.pop(tp, None)
        return taken

    async def _wait_for_data(self, deadline: float | None) -> bool:
        """Wait until new data, an error or close; False when the deadline passed."""
        self._wake()
        if deadline is None:
            await self._data_ready.wait()
            return True
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return False
        try:
            await wait_for(self._data_ready.wait(), remaining)
        except (asyncio.TimeoutError, TimeoutError):
            return False
        return True

    async def fetched_records(
        self,
        partitions: Collection[TopicPartition],
        timeout: float,
        max_records: int | None = None,
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Buffered records of ``partitions`` (all if empty), waiting up to ``timeout`` s."""
        if max_records is not None and max_records <= 0:
            raise ValueError(f"max_records must be > 0 or None, got {max_records}")
        deadline = asyncio.get_running_loop().time() + max(0.0, timeout)
        return await self._records(partitions, deadline, max_records)

    async def next_record(self, partitions: Collection[TopicPartition]) -> ConsumerRecord:
        """The next record (of ``partitions`` if any); waits until there is one or close()."""
        found = await self._records(partitions, None, 1)
        return next(iter(found.values()))[0]

    async def _records(
        self,
        partitions: Collection[TopicPartition],
        deadline: float | None,
        max_records: int | None,
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        kd, vd = self._key_deserializer, self._value_deserializer
        result: dict[TopicPartition, list[ConsumerRecord]] = {}

        def take(chunk: Chunk, limit: int) -> int:
            out = result.get(chunk.tp)
            if out is None:
                out = result[chunk.tp] = []
            return chunk.take_records(limit, out, kd, vd)

        while True:
            self._raise_error()
            self._data_ready.clear()
            if self._drain(partitions, max_records, take):
                return {tp: recs for tp, recs in result.items() if recs}
            if self._error is not None:
                continue
            if not await self._wait_for_data(deadline):
                return {}

    async def fetched_arrow(
        self,
        partitions: Collection[TopicPartition],
        timeout: float,
        max_records: int | None = None,
    ) -> pyarrow.RecordBatch | None:
        """Like fetched_records, as one Arrow RecordBatch (raw key/value bytes)."""
        from aiogroup.arrow import ColumnBuilder

        if max_records is not None and max_records <= 0:
            raise ValueError(f"max_records must be > 0 or None, got {max_records}")
        ColumnBuilder.require_pyarrow()
        deadline = asyncio.get_running_loop().time() + max(0.0, timeout)
        while True:
            self._raise_error()
            self._data_ready.clear()
            cols = ColumnBuilder()
            n = self._drain(partitions, max_records, cols.take_from)
            if n:
                return cols.to_record_batch()
            if self._error is not None:
                continue
            if not await self._wait_for_data(deadline):
                return None

    # -- per-partition fetch metadata -------------------------------------------------------

    def _state(self, tp: TopicPartition) -> PartitionState:
        assignment = self._sub.assignment
        if assignment is None:
            raise IllegalStateError(f"partition {tp} is not assigned to this consumer")
        return assignment.state(tp)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._state(tp).highwater

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self._state(tp).last_stable_offset

    def buffered_partitions(self) -> frozenset[TopicPartition]:
        """Partitions with read-ahead data waiting for the application."""
        return frozenset(self._buffers)
