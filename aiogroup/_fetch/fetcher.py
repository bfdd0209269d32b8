"""The fetcher: reads ahead of the application, within a fixed memory bound.

This module is the routine and the wiring; each concept lives in ``aiogroup._fetch``
(decoding, the record walker, planning and the memory budget, Fetch responses and
their error table, position resets, delivery).

Two cursors per partition
    ``PartitionState.position`` is the next offset handed to the application.  The
    fetcher keeps its own read-ahead cursor (the next offset to *fetch*), created at
    the position and advanced as responses arrive.  A cursor is tied to the
    partition's ``epoch``: a seek, reset or revocation bumps the epoch, and the
    planner then discards the cursor and everything buffered for the partition.

Wake-ups, not polling
    The fetch routine sleeps on one future that is resolved when: a Fetch or
    ListOffsets finishes, buffered data is released, a partition's position changes
    or it is resumed (small watcher tasks await ``wait_changed()`` /
    ``wait_resumed()``), a retry backoff expires (``call_later``), or the
    application asks for data and finds none.  It also wakes when the assignment's
    ``unassigned`` future resolves.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine
from typing import TYPE_CHECKING, Any

from aiokafka.client import ConnectionGroup
from aiokafka.errors import (
    ConsumerStoppedError,
    CorruptRecordException,
    IllegalStateError,
    RecordTooLargeError,
)

from aiogroup._fetch.decoding import Chunk, split_batches
from aiogroup._fetch.delivery import (
    DECODED_RECORD_OVERHEAD,
    NATIVE_DECODED_RECORD_OVERHEAD,
    Delivery,
)
from aiogroup._fetch.iteration import HeldRecords
from aiogroup._fetch.planning import MemoryBudget, chunk_bytes, planning_order
from aiogroup._fetch.replica import ReadReplicas, ReplicaView
from aiogroup._fetch.resets import PositionResets
from aiogroup._fetch.responses import (
    PartitionResult,
    Reaction,
    build_fetch_request,
    parse_fetch_response,
    reaction_for,
)
from aiogroup._fetch.walker import RecordSink, Sink
from aiogroup._fetch.young_records import YoungRecords
from aiogroup._state.subscription import Assignment, PartitionState, SubscriptionState
from aiogroup._support.allocator import free_heap_bytes, keep_freed_pages, trim
from aiogroup._support.frame_reader import install_frame_reader
from aiogroup._support.supervision import TaskScope
from aiogroup._support.timeouts import wait_for
from aiogroup.config import ConsumerConfig
from aiogroup.errors import TRANSPORT_ERRORS, error_for_code
from aiogroup.metrics import ConsumerMetrics
from aiogroup.structs import ConsumerRecord, TopicPartition

if TYPE_CHECKING:
    import pyarrow

__all__ = ["Chunk", "Fetcher", "split_batches"]

log = logging.getLogger("aiogroup.fetcher")


class _Cursor:
    """The read-ahead position of one partition, valid for one epoch."""

    __slots__ = ("epoch", "offset")

    def __init__(self, epoch: int, offset: int) -> None:
        self.epoch = epoch
        self.offset = offset


class _Planned:
    """A partition in an in-flight Fetch: where it was asked from, in which epoch."""

    __slots__ = ("cursor", "epoch", "from_replica", "offset", "state")

    def __init__(self, state: PartitionState, cursor: _Cursor, from_replica: bool = False) -> None:
        self.state = state
        self.cursor = cursor
        self.offset = cursor.offset
        self.epoch = state.epoch
        #: Asked from a preferred read replica (KIP-392), not the leader.
        self.from_replica = from_replica


class Fetcher:
    """Fetches the assigned partitions ahead of the application and hands records out."""

    def __init__(
        self, client: Any, subscription: SubscriptionState, config: ConsumerConfig
    ) -> None:
        self._client = client
        self._sub = subscription
        self._config = config
        self._backoff = config.retry_backoff_ms / 1000
        self._budget = MemoryBudget(
            config.max_buffered_bytes,
            config.max_partition_fetch_bytes,
            config.fetch_max_bytes,
        )
        self._delivery = Delivery(self._budget, wake=self._wake, on_corrupt=self._corrupt)
        #: Records a refill built ahead for ``async for`` (``held_record``, and the
        #: consumer's ``iterate`` steps through them while nothing changed).
        self.held = HeldRecords(subscription.delivery_changes)
        #: The natively built records kept out of the cyclic collector while held here.
        self._young = YoungRecords()
        self._sweep_pending = False
        self._resets = PositionResets(
            client,
            subscription,
            read_committed=config.read_committed,
            timeout=config.request_timeout_ms / 1000,
            spawn=self._spawn,
            report=self._report,
            wake=self._wake,
            retry_later=lambda: self._wake_later(self._backoff),
        )
        self._cursors: dict[TopicPartition, _Cursor] = {}
        #: Per buffered partition: what a read cutting its widest buffered batch would
        #: decode and keep (the budget's ``margin``, see ``_decode_margin``).
        self._decode_cost: dict[TopicPartition, int] = {}
        self._replicas = ReadReplicas(
            enabled=bool(config.client_rack), max_age=config.metadata_max_age_ms / 1000
        )
        #: Test hook: called with (node id, partitions) for every Fetch sent, so tests
        #: can see which broker - leader or same-rack follower - was asked.
        self.on_fetch_sent: Callable[[int, frozenset[TopicPartition]], None] | None = None
        self._inflight_nodes: set[int] = set()
        self._inflight_tps: set[TopicPartition] = set()
        self._node_backoff: dict[int, float] = {}
        self._tp_backoff: dict[TopicPartition, float] = {}
        #: Fetch requests and position resets: children of the fetcher's life (a crash
        #: is reported to the application, not lost in a task nobody awaits).
        self._tasks = TaskScope(self._report)
        self._watchers: dict[tuple[int, str], asyncio.Task[None]] = {}
        self._timers: set[asyncio.TimerHandle] = set()
        self._routine: asyncio.Task[None] | None = None
        self._wake_fut: asyncio.Future[None] | None = None
        self._data_ready = asyncio.Event()
        subscription.add_error_callback(self._data_ready.set)
        self._error: BaseException | None = None
        self._closed = False
        self._plan_turn = 0
        #: Replaced by GroupConsumer with the consumer's shared instance.
        self.metrics = ConsumerMetrics()

    # -- memory accounting (what tests and benchmarks read) -------------------------------

    @property
    def buffered_bytes(self) -> int:
        """Raw bytes of buffered chunks not yet fully delivered."""
        return self._budget.buffered

    @buffered_bytes.setter
    def buffered_bytes(self, value: int) -> None:
        self._budget.buffered = value

    @property
    def reserved_bytes(self) -> int:
        """Bytes reserved by in-flight Fetch requests."""
        return self._budget.reserved

    @property
    def peak_bytes(self) -> int:
        """Highest buffered_bytes + reserved_bytes seen."""
        return self._budget.peak

    @property
    def _buffers(self) -> dict[TopicPartition, Any]:
        return self._delivery.buffers

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ConsumerStoppedError()
        if self._routine is None:
            keep_freed_pages()  # responses reuse freed pages (_support.allocator)
            self._routine = asyncio.get_running_loop().create_task(
                self._run(), name="aiogroup-fetcher"
            )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._sub.delivery_changes.bump()
        tasks: list[asyncio.Task[Any]] = list(self._watchers.values())
        if self._routine is not None:
            tasks.append(self._routine)
        for task in tasks:
            task.cancel()
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        await asyncio.gather(*tasks, self._tasks.aclose(), return_exceptions=True)
        self._watchers.clear()
        self.held.release(None)
        self._delivery.clear()
        self._young.release()
        self._cursors.clear()
        self._decode_cost.clear()
        self._budget.buffered = 0
        self._budget.reserved = 0
        self._budget.clear_frames()
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
                    for tp in list(self._delivery.buffers.keys() | self._cursors.keys()):
                        self._drop(tp)  # nothing is assigned: free the read-ahead now
                assignment = await self._sub.wait_for_assignment()
                self._wake_fut = loop.create_future()
                self._plan_guarded(assignment, loop.time())
                await asyncio.wait(
                    (self._wake_fut, assignment.unassigned),
                    return_when=asyncio.FIRST_COMPLETED,
                )
        except ConsumerStoppedError:
            return

    def _plan_guarded(self, assignment: Assignment, now: float) -> None:
        try:
            self._plan(assignment, now)
        except Exception as exc:  # a bug must surface, not kill fetching silently
            log.exception("fetch planning failed")
            self._report(exc)
            self._wake_later(self._backoff)

    def _plan(self, assignment: Assignment, now: float) -> None:
        for tp in [tp for tp, until in self._tp_backoff.items() if until <= now]:
            del self._tp_backoff[tp]
        self._purge(assignment)
        if self._replicas.enabled:
            self._replicas.forget(assignment.partitions)
        self._watch(assignment)
        self._resets.start(assignment)
        self._budget.margin = self._decode_margin()
        if not self._budget.can_request():
            return  # released chunks wake the routine when there is room again
        by_node: dict[int, list[_Planned]] = {}
        metadata_stale = False
        self._plan_turn += 1
        buffers = self._delivery.buffers
        states = planning_order(
            list(assignment.states()), self._plan_turn, lambda st: st.tp in buffers
        )
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
            leader = self._client.cluster.leader_for_partition(tp)
            if leader is None or leader == -1:
                if leader is None:
                    self._client.add_topic(tp.topic)
                metadata_stale = True
                self._tp_backoff[tp] = now + self._backoff
                continue
            node, stale_replica = self._replicas.select(
                tp, leader, now, self._replica_view, self._broker_known
            )
            metadata_stale |= stale_replica
            if node != leader and self._node_backoff.get(node, 0.0) > now:
                self._replicas.failed(tp, now)  # the replica's broker just failed a Fetch
                node = leader
            if node in self._inflight_nodes:
                continue
            node_until = self._node_backoff.get(node)
            if node_until is not None and node_until > now:
                continue
            by_node.setdefault(node, []).append(_Planned(st, cursor, node != leader))
        if metadata_stale:
            self._client.force_metadata_update()
            self._wake_later(self._backoff)
        nodes = list(by_node.items())
        sizes = self._budget.request_sizes(
            [len(parts) for _, parts in nodes], [node for node, _ in nodes]
        )
        # Fewer sizes than leaders when the room ran out: the rest wait for released data.
        for (node, parts), max_bytes in zip(nodes, sizes, strict=False):
            self._send_fetch(node, parts, max_bytes)

    def _decode_margin(self) -> int:
        """What reads may yet decode of the buffered chunks while a request is in flight.

        A read that stops inside a batch decodes the rest of it and keeps those records
        (``decoded``, see planning.py): per partition one batch at a time, at most the
        widest it has buffered.  The next request leaves room for that, less what is
        decoded already, so the bound holds whether the application reads before or
        after the request goes out.
        """
        buffers = self._delivery.buffers
        costs = self._decode_cost
        for tp in [tp for tp in costs if tp not in buffers]:
            del costs[tp]
        return max(0, sum(costs.values()) - self._budget.decoded)

    def _purge(self, assignment: Assignment) -> None:
        """Release buffers and cursors of partitions that cannot be delivered any more."""
        for tp in list(self._delivery.buffers.keys() | self._cursors.keys()):
            st = assignment.get(tp)
            cursor = self._cursors.get(tp)
            if (
                st is None
                or not st.is_fetchable
                or (cursor is not None and cursor.epoch != st.epoch)
            ):
                self._drop(tp)

    def _replica_view(self, tp: TopicPartition) -> ReplicaView | None:
        # aiokafka keeps replicas and ISR only in ClusterMetadata's private table.
        meta = self._client.cluster._partitions.get(tp.topic, {}).get(tp.partition)
        return None if meta is None else ReplicaView(meta.replicas, meta.isr)

    def _broker_known(self, node: int) -> bool:
        return self._client.cluster.broker_metadata(node) is not None

    def _drop(self, tp: TopicPartition) -> None:
        self._delivery.drop(tp)
        self._cursors.pop(tp, None)

    def _watch(self, assignment: Assignment) -> None:
        """Make sure the routine wakes when a partition's position changes or it is resumed."""
        live: set[tuple[int, str]] = set()
        for st in assignment.states():
            # Any seek or reset, not just a position arriving: a reset asked for while
            # we sleep (seek_to_end, no committed offset found) is ours to perform, and
            # a seek must drop the read-ahead now, not at the next poll.  Revoking
            # partitions too: a seek_to_* inside their callback is answered by position().
            key = (id(st), f"change-{st.epoch}")
            live.add(key)
            if key not in self._watchers:
                self._spawn_watcher(key, functools.partial(st.wait_changed, st.changes))
            if st.revoking:
                continue
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

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._tasks.spawn(coro, "fetch")

    # -- Fetch requests ---------------------------------------------------------------------

    def _send_fetch(self, node: int, parts: list[_Planned], max_bytes: int) -> None:
        cfg = self._config
        reserved = self._budget.reserve(max_bytes, node)
        self._inflight_nodes.add(node)
        self._inflight_tps.update(p.state.tp for p in parts)
        tps = frozenset(p.state.tp for p in parts)
        now = asyncio.get_running_loop().time()
        rack = cfg.client_rack if cfg.client_rack and self._replicas.send_rack(tps, now) else ""
        if self.on_fetch_sent is not None:
            self.on_fetch_sent(node, tps)
        request = build_fetch_request(
            [(p.state.tp, p.offset) for p in parts],
            max_wait_ms=cfg.fetch_max_wait_ms,
            min_bytes=cfg.fetch_min_bytes,
            max_bytes=max_bytes,
            partition_bytes=self._budget.partition_bytes,
            read_committed=cfg.read_committed,
            rack_id=rack,
        )
        plan = {p.state.tp: p for p in parts}
        self._spawn(self._fetch(node, request, plan, reserved))

    async def _fetch(
        self,
        node: int,
        request: Any,
        plan: dict[TopicPartition, _Planned],
        reserved: int,
    ) -> None:
        self._frame_reader(node)
        got_data = False
        try:
            response = await self.metrics.timed_fetch(self._client.send(node, request), plan)
        except asyncio.CancelledError:
            raise
        except TRANSPORT_ERRORS as exc:
            log.debug("Fetch from node %s failed: %r", node, exc)
            now = asyncio.get_running_loop().time()
            self._node_backoff[node] = now + self._backoff
            self._replicas.node_failed(node, plan, now)
            self._client.force_metadata_update()
            self._wake_later(self._backoff)
        except Exception as exc:
            log.warning("Fetch from node %s failed: %r", node, exc)
            now = asyncio.get_running_loop().time()
            self._node_backoff[node] = now + self._backoff
            self._replicas.node_failed(node, plan, now)
            self._wake_later(self._backoff)
        else:
            self._budget.unreserve(reserved)
            reserved = 0
            self._frame_reader(node)  # a connection the Fetch itself opened
            try:
                got_data = self._handle_response(response, plan, node)
            except Exception as exc:  # undecodable response: tell the application
                log.exception("handling a Fetch response from node %s failed", node)
                self._report(exc)
                self._node_backoff[node] = asyncio.get_running_loop().time() + self._backoff
                self._wake_later(self._backoff)
            del response
            self._trim_heap()
        finally:
            self._budget.unreserve(reserved)
            self._inflight_nodes.discard(node)
            self._inflight_tps.difference_update(plan)
            if got_data:
                self._next_fetch_first()
            self._wake()

    def _next_fetch_first(self) -> None:
        """Send this broker its next Fetch, then tell the application data arrived.

        The broker does nothing between answering a Fetch and receiving the next one.
        Woken in turn, the application's waiting ``getmany`` ran first and built the
        whole answer's records before the fetch routine sent anything: the broker idled
        a quarter to a third of a 1 KiB drain on Tansu (answers of ~5 MiB whatever is
        asked) and about half of one on Apache Kafka (docs/benchmarks/profile.md).  Planned
        here, the next Fetch's task is scheduled before the application's wake-up, and
        its first step writes the request (the connection is open), so the broker
        works on it while the records are built.  Only partitions not in flight are
        planned, as always: never two Fetches for one partition.
        """
        assignment = self._sub.assignment
        if assignment is not None and not self._closed:
            self._plan_guarded(assignment, asyncio.get_running_loop().time())
        self._data_ready.set()

    def _trim_heap(self) -> None:
        """Give freed pages back when they and what is held would pass the bound.

        The allocator keeps the pages a response's transient copies freed, so the next
        response reuses them (``_support.allocator``); but ``max_buffered_bytes`` is
        stated against RSS, which counts them.  After each response (its copies freed
        now): when held + free heap bytes exceed the bound, or - where the C library
        cannot say how much is free - when fetching pauses at the bound, trim.
        """
        budget = self._budget
        if not budget.bounded:
            return
        free = free_heap_bytes()
        if free is None:
            if not budget.can_request():
                trim()
        elif budget.held + free > budget.limit:
            trim()

    def _frame_reader(self, node: int) -> None:
        """Read this broker's Fetch responses with one copy each (``_support.frame_reader``)."""
        conns = getattr(self._client, "_conns", None)
        conn = None if conns is None else conns.get((node, ConnectionGroup.DEFAULT))
        if conn is not None:
            install_frame_reader(conn)

    def _handle_response(
        self, response: Any, plan: dict[TopicPartition, _Planned], node: int
    ) -> bool:
        """Apply each partition's result by the reaction its error code calls for.

        An error from a preferred read replica sends the partition back to the leader
        (an out-of-range offset there means the follower is behind: no reset).
        True when records were buffered: the caller sends the next Fetch, then wakes
        the application (``_next_fetch_first``).
        """
        now = asyncio.get_running_loop().time()
        backoffs = dict(self._tp_backoff)
        got_data = refresh = False
        frame = 0
        for result in parse_fetch_response(response):
            if result.records:
                frame += len(result.records)
            planned = plan.get(result.tp)
            if planned is None:
                continue
            reaction = reaction_for(result.error_code)
            if reaction is Reaction.DELIVER:
                self._replicas.update(result.tp, result.preferred_read_replica, node, now)
                got_data |= self._deliver(result, planned, now)
                continue
            if planned.from_replica:
                log.debug(
                    "Fetch %s from replica %s: error %d, back to the leader",
                    result.tp,
                    node,
                    result.error_code,
                )
                self._replicas.failed(result.tp, now)
                if reaction is Reaction.RESET_POSITION:
                    continue  # refetched from the leader at once
            if reaction is Reaction.RESET_POSITION:
                if not self._resets.out_of_range(planned.state, planned.epoch, planned.offset):
                    continue
            elif reaction is Reaction.REFRESH_METADATA:
                log.debug("Fetch %s: error %d, refreshing metadata", result.tp, result.error_code)
                refresh = True
            elif reaction is Reaction.REPORT:
                tp = result.tp
                self._report(error_for_code(result.error_code)(f"Fetch {tp.topic}-{tp.partition}"))
            self._tp_backoff[result.tp] = now + self._backoff
        # The connection keeps this response until its next one (see planning.py).
        self._budget.frame_held(node, frame)
        if refresh:
            self._client.force_metadata_update()
        if self._tp_backoff != backoffs:
            self._wake_later(self._backoff)
        return got_data

    def _deliver(self, result: PartitionResult, planned: _Planned, now: float) -> bool:
        """Buffer one partition's records; True when there is something new to read."""
        st, tp, offset = planned.state, result.tp, planned.offset
        st.highwater = result.highwater
        if result.last_stable_offset >= 0:
            st.last_stable_offset = result.last_stable_offset
        if result.log_start_offset >= 0:
            st.log_start_offset = result.log_start_offset
        if (
            not result.records
            or self._cursors.get(tp) is not planned.cursor
            or st.epoch != planned.epoch
            or not st.is_fetchable
        ):
            return False
        batches = split_batches(result.records)
        if not batches:
            self._report(
                RecordTooLargeError(
                    f"a record batch of {tp.topic}-{tp.partition} at offset {offset} is larger "
                    f"than max_partition_fetch_bytes ({self._budget.partition_bytes})"
                )
            )
            self._tp_backoff[tp] = now + self._backoff
            return False
        end = batches[-1].next_offset
        aborted = None
        if self._config.read_committed:
            if result.last_stable_offset >= 0:
                end = min(end, result.last_stable_offset)
            aborted = result.aborted
        if end <= offset:
            return False
        size = chunk_bytes(len(result.records), len(batches))
        self._budget.learn(len(result.records), size)
        self._note_decode_cost(tp, batches, offset, end, size)
        self._delivery.add(
            Chunk(
                st,
                planned.epoch,
                offset,
                batches,
                size,
                end_offset=end,
                check_crcs=self._config.check_crcs,
                aborted=aborted,
                data=result.records,
            )
        )
        planned.cursor.offset = end
        return True

    def _note_decode_cost(
        self, tp: TopicPartition, batches: list[Any], offset: int, end: int, size: int
    ) -> None:
        """Remember what cutting this chunk's widest batch would decode (``_decode_margin``).

        A batch's records: the offsets from the previous batch's end (the first: its base
        offset, or the fetch offset in the old formats, which carry none) to its own -
        more than it holds after compaction, never fewer.  Each
        costs what the delivery counts for a kept decoded record: the raw bytes a record
        of the chunk averages plus the larger of the two record objects' overheads.
        """
        widest, prev = 0, min(offset, getattr(batches[0], "base_offset", offset))
        for batch in batches:
            nxt = batch.next_offset
            if nxt - prev > widest:
                widest = nxt - prev
            prev = nxt
        per_record = size // max(1, end - offset) + max(
            DECODED_RECORD_OVERHEAD, NATIVE_DECODED_RECORD_OVERHEAD
        )
        cost = widest * per_record
        if cost > self._decode_cost.get(tp, 0):
            self._decode_cost[tp] = cost

    def _corrupt(self, tp: TopicPartition, exc: CorruptRecordException) -> None:
        """A batch failed its CRC at delivery: refetch it after a backoff, and say so."""
        self._tp_backoff[tp] = asyncio.get_running_loop().time() + self._backoff
        self._wake_later(self._backoff)
        self._report(exc)

    def _report(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._sub.delivery_changes.bump()
        self._data_ready.set()

    def _raise_error(self, partitions: Collection[TopicPartition]) -> None:
        if self._closed:
            raise ConsumerStoppedError()
        exc, self._error = self._error, None
        if exc is not None:
            raise exc
        self._sub.raise_pending_error()
        if self._delivery.refusal_pending:
            self._delivery.raise_refusal(self._sub.assignment, partitions)

    # -- delivery -----------------------------------------------------------------------------

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

    async def _read(
        self,
        partitions: Collection[TopicPartition],
        deadline: float | None,
        max_records: int | None,
        new_sink: Callable[[], Sink],
    ) -> Sink | None:
        """Drain into a fresh sink until something arrives; None when the deadline passed.

        Errors come first: a fatal one reported by the routine, the group's, then a
        record refused by a deserializer in an earlier call (records read before it
        in that call were returned with it).
        """
        if self.held:
            self.held.release(self._sub.assignment)
        while True:
            self._raise_error(partitions)
            self._data_ready.clear()
            sink = new_sink()
            self._young.turn()  # records of the drain before last: tracked again if held
            refusals = self._delivery.refusals
            now = asyncio.get_running_loop().time()
            if self._sub.membership_current(now) and self._delivery.drain(
                self._sub.assignment, partitions, max_records, sink
            ):
                # Positions moved: records another read path holds are checked in full.
                self._sub.delivery_changes.bump()
                if self._young.held and not self._sweep_pending:
                    # The records the application drops before it next yields are freed
                    # then, not at the next call (which may be long in coming).
                    self._sweep_pending = True
                    asyncio.get_running_loop().call_soon(self._sweep_young)
                return sink
            if self._error is not None or self._delivery.refusals != refusals:
                continue
            if not await self._wait_for_data(deadline):
                return None

    def _sweep_young(self) -> None:
        self._sweep_pending = False
        self._young.sweep()

    async def fetched_records(
        self,
        partitions: Collection[TopicPartition],
        timeout: float,
        max_records: int | None = None,
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Buffered records of ``partitions`` (all if empty), waiting up to ``timeout`` s."""
        return (await self.fetched_records_and_bytes(partitions, timeout, max_records))[0]

    async def fetched_records_and_bytes(
        self,
        partitions: Collection[TopicPartition],
        timeout: float,
        max_records: int | None = None,
    ) -> tuple[dict[TopicPartition, list[ConsumerRecord]], int]:
        """``fetched_records``, and the key + value bytes of the records (the metrics').

        The bytes are counted as the records are built (``RecordSink.sizes``) rather
        than read back from each record afterwards.
        """
        if max_records is not None and max_records <= 0:
            raise ValueError(f"max_records must be > 0 or None, got {max_records}")
        deadline = asyncio.get_running_loop().time() + max(0.0, timeout)
        return await self._records(partitions, deadline, max_records)

    async def next_record(self, partitions: Collection[TopicPartition]) -> ConsumerRecord:
        """The next record (of ``partitions`` if any); waits until there is one or close()."""
        found, _ = await self._records(partitions, None, 1)
        return next(iter(found.values()))[0]

    def held_record(self, now: float) -> ConsumerRecord | None:
        """The next record built ahead for ``async for``, checked now; None: refill.

        None also when an error waits or the membership is not current at loop time
        ``now``: the refill (``next_iterated``) raises the one and waits out the other.
        """
        sub = self._sub
        if (
            self._error is not None
            or self._closed
            or sub.pending_error is not None
            or not sub.membership_current(now)
        ):
            return None
        assignment = sub.assignment
        return None if assignment is None else self.held.take(assignment)

    async def next_iterated(self) -> ConsumerRecord:
        """Build as many records as a getmany would, hold them, hand out the first.

        ``async for``'s refill (see ``aiogroup._fetch.iteration``); waits until there
        is a record or close().
        """
        kd, vd = self._config.key_deserializer, self._config.value_deserializer
        before: dict[TopicPartition, int | None] = {}

        def new_sink() -> Sink:
            # Positions just before the drain (no await between this and it).
            before.clear()
            assignment = self._sub.assignment
            if assignment is not None:
                for tp in self._delivery.buffers:
                    st = assignment.get(tp)
                    before[tp] = None if st is None else st.position
            return RecordSink(kd, vd, self._young)

        while True:
            sink = await self._read((), None, self._config.max_poll_records, new_sink)
            assert isinstance(sink, RecordSink)
            assignment = self._sub.assignment
            if assignment is None:
                continue
            self.held.hold(assignment, sink.result, before, sink.sizes)
            record = self.held.take(assignment)
            if record is not None:
                return record

    async def _records(
        self,
        partitions: Collection[TopicPartition],
        deadline: float | None,
        max_records: int | None,
    ) -> tuple[dict[TopicPartition, list[ConsumerRecord]], int]:
        kd, vd = self._config.key_deserializer, self._config.value_deserializer
        sink = await self._read(
            partitions, deadline, max_records, lambda: RecordSink(kd, vd, self._young)
        )
        if sink is None:
            return {}, 0
        assert isinstance(sink, RecordSink)
        return {tp: recs for tp, recs in sink.result.items() if recs}, sink.nbytes

    async def fetched_arrow(
        self,
        partitions: Collection[TopicPartition],
        timeout: float,
        max_records: int | None = None,
        *,
        whole_batches: bool = False,
    ) -> pyarrow.RecordBatch | None:
        """Like fetched_records, as one Arrow RecordBatch (raw key/value bytes)."""
        from aiogroup._fetch.arrow import ColumnBuilder, require_pyarrow

        if max_records is not None and max_records <= 0:
            raise ValueError(f"max_records must be > 0 or None, got {max_records}")
        require_pyarrow()
        deadline = asyncio.get_running_loop().time() + max(0.0, timeout)
        sink = await self._read(
            partitions, deadline, max_records, lambda: ColumnBuilder(whole_batches=whole_batches)
        )
        if sink is None:
            return None
        assert isinstance(sink, ColumnBuilder)
        return sink.to_record_batch()

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
        return frozenset(self._delivery.buffers)
