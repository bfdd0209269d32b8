"""``Processor``: concurrent, ordered processing whose commits never pass unfinished work.

The async shell around the pure parts: it reads records with ``getmany``, feeds
each partition's :class:`~aiogroup.processing.tracker.PartitionTracker` and the
:class:`~aiogroup.processing.scheduler.Scheduler`, runs the handler tasks the
scheduler releases, and commits each partition's first unfinished offset (with
the finished-beyond runs in the metadata) every ``commit_interval_ms`` (0: as soon
as the previous commit is answered), on revoke and on stop.  The decisions are the
pure parts'; this module awaits and counts.

Rebalances reach it through the consumer's internal rebalance hooks
(:class:`aiogroup.listeners.RebalanceHooks`), which the coordination routine runs
*before* the application's listener, inside the listener step (so heartbeats go on):

* revoked: stop dispatching those partitions, wait up to ``drain_timeout_ms`` for
  their in-flight handlers, cancel the rest, commit their finished prefix; then the
  application's ``on_partitions_revoked`` runs and the revocation completes;
* lost: cancel their handlers at once, commit nothing;
* assigned: read the committed offsets *with metadata*, so records a previous owner
  finished beyond its committed offset are skipped.

The guarantee (also in docs/usage.md): at least once, and after a crash only the
records that were unfinished are processed again (within the metadata size bound);
no committed offset ever passes a record whose handler has not finished.  What
"unfinished" means to a crash is what no answered commit covers yet: the records in
flight plus those finished since the last answer.  ``max_uncommitted=N`` bounds that:
records started and not covered stay at most N (:mod:`aiogroup.processing.uncommitted`);
at the bound a slot stays empty and the commit loop commits at once, and the slot is
refilled when the answer arrives - no task awaits the commit, so revoke, lost and
stop() are bounded as before.
With a
``transactional_producer`` the handlers' outputs and the commits go into one
transaction per commit: each input's outputs exactly once for read_committed readers
(:mod:`~aiogroup.processing.prefix_transactions`; the hooks for it are marked
"transactional" here).  The two options are not combined yet.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import types
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any

from aiogroup._support.timeouts import wait_for
from aiogroup.errors import CommitFailedError, ConfigurationError, ConsumerStoppedError
from aiogroup.processing import offset_metadata
from aiogroup.processing.dead_letter import DeadLetter
from aiogroup.processing.dead_letter_sender import DeadLetterSender
from aiogroup.processing.errors import ProcessingError
from aiogroup.processing.handler_calls import HandlerCalls, check_handler
from aiogroup.processing.output import outputs_of
from aiogroup.processing.prefix_transactions import PrefixTransactions
from aiogroup.processing.retry import RetryPolicy
from aiogroup.processing.scheduler import ORDERINGS, Ordering, Scheduler, Work
from aiogroup.processing.tracker import CommitPoint, PartitionTracker
from aiogroup.processing.uncommitted import UncommittedWork
from aiogroup.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from aiogroup.consumer import GroupConsumer

__all__ = ["Handler", "Processor"]

#: What an ``async def`` handler returns: tested by type first, before the general
#: (and slower) ``inspect.isawaitable``, on the per-record path.
_Coroutine = types.CoroutineType

log = logging.getLogger("aiogroup.processing")

Handler = Callable[[ConsumerRecord], Awaitable[None]] | Callable[[ConsumerRecord], None]

#: Most records one read takes from the consumer.  Building records and queueing
#: them holds the event loop (some 10-20 us a record): 1,000 at once delay every
#: running handler's timer by 10-30 ms, which at a 5 ms handler halves throughput.
_READ_CHUNK = 250
#: Bytes a waiting record costs beyond its key and value: the ConsumerRecord, its Work
#: and the lane's slot (measured with tracemalloc: about 310 B on CPython 3.11).  The
#: byte bound counts it, so a backlog of small records is bounded by memory too.
RECORD_OVERHEAD = 320
#: Seconds before a failed commit is tried again while handler slots wait for one
#: (``max_uncommitted`` reached).
_COMMIT_RETRY_S = 0.1


def _positive_ms(name: str, value: object, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a number of milliseconds > 0, got {value!r}")


class Processor:
    """Runs ``handler`` on a consumer's records, concurrently, in the chosen order.

    See the module docstring and docs/usage.md ("Processing").  ``run()`` until
    ``stop()`` (or ``consumer.stop()``); with ``on_failure="stop"`` a record whose
    handler failed every attempt makes ``run()`` raise :class:`ProcessingError`.

    ``transactional_producer``: an ``AIOKafkaProducer`` with a ``transactional_id``;
    the handler then returns its outputs (:class:`~aiogroup.processing.Output`) and
    every commit is a transaction holding them with the offsets that count their
    records finished (:mod:`~aiogroup.processing.prefix_transactions`; docs/usage.md,
    "With the processing layer").  A failure it cannot recover from (a fenced producer,
    an output refused) makes ``run()`` raise it.
    """

    def __init__(
        self,
        consumer: GroupConsumer,
        handler: Handler,
        *,
        concurrency: int = 100,
        ordering: Ordering = "key",
        retry: RetryPolicy | None = None,
        on_failure: str | DeadLetter = "stop",
        record_timeout_ms: int | None = None,
        drain_timeout_ms: int = 30_000,
        commit_interval_ms: int = 5_000,
        max_unfinished_per_partition: int = 100_000,
        metadata_max_bytes: int = offset_metadata.DEFAULT_MAX_BYTES,
        transactional_producer: Any = None,
        max_uncommitted: int | None = None,
    ) -> None:
        check_handler(handler)
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {ORDERINGS}, got {ordering!r}")
        if retry is None:
            retry = RetryPolicy()
        if not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {retry!r}")
        if not (on_failure == "stop" or isinstance(on_failure, DeadLetter)):
            raise ValueError(
                f'on_failure must be "stop" or DeadLetter(topic=...), got {on_failure!r}'
            )
        _positive_ms("record_timeout_ms", record_timeout_ms, allow_none=True)
        _positive_ms("drain_timeout_ms", drain_timeout_ms)
        if (
            not isinstance(commit_interval_ms, int | float)
            or isinstance(commit_interval_ms, bool)
            or commit_interval_ms < 0
        ):
            raise ValueError(
                "commit_interval_ms must be a number of milliseconds >= 0 (0: commit as "
                f"soon as the previous commit is answered), got {commit_interval_ms!r}"
            )
        if (
            not isinstance(max_unfinished_per_partition, int)
            or isinstance(max_unfinished_per_partition, bool)
            or max_unfinished_per_partition < 1
        ):
            raise ValueError(
                "max_unfinished_per_partition must be an int >= 1, got "
                f"{max_unfinished_per_partition!r}"
            )
        if max_uncommitted is not None and (
            not isinstance(max_uncommitted, int)
            or isinstance(max_uncommitted, bool)
            or max_uncommitted < concurrency
        ):
            raise ValueError(
                f"max_uncommitted must be None or an int >= concurrency ({concurrency}), got "
                f"{max_uncommitted!r}: every running handler holds a record not yet "
                "committed, so a smaller bound would only leave handler slots idle "
                "(lower concurrency instead)"
            )
        if max_uncommitted is not None and transactional_producer is not None:
            raise ValueError(
                "max_uncommitted and transactional_producer cannot be combined yet: a "
                "transactional processor's commits are its transactions, which the bound "
                "does not count; with transactions a crash redoes the open transaction's "
                "records without duplicating their outputs"
            )
        if consumer.config.enable_auto_commit:
            raise ConfigurationError(
                "Processor needs a consumer with enable_auto_commit=False: auto-commit "
                "commits the consumer's position, which runs ahead of handlers still "
                "working; the processor commits each partition's first unfinished record"
            )
        if consumer.config.group_id is None:
            raise ConfigurationError("Processor needs a consumer with a group_id (it commits)")
        rebalance_ms = consumer.config.effective_rebalance_timeout_ms
        if drain_timeout_ms >= rebalance_ms:
            raise ConfigurationError(
                f"drain_timeout_ms ({drain_timeout_ms}) must be below the consumer's "
                f"rebalance timeout ({rebalance_ms} ms): the revocation (drain, then commit) "
                "runs inside the rebalance listener, which the rebalance timeout bounds"
            )
        self._consumer = consumer
        self._handler = handler
        self._ordering: Ordering = ordering
        self._retry = retry
        self._on_failure = on_failure
        self._record_timeout = None if record_timeout_ms is None else record_timeout_ms / 1000
        self._calls = HandlerCalls(
            handler, threads=concurrency, record_timeout=self._record_timeout
        )
        #: An async handler without a per-record timeout is awaited inline (_handle); a
        #: transactional processor's handler returns its outputs, taken in _handle.
        self._direct = (
            self._calls.is_async and self._record_timeout is None and transactional_producer is None
        )
        self._drain_timeout = drain_timeout_ms / 1000
        self._commit_interval = commit_interval_ms / 1000
        #: commit_interval_ms=0: set when a record finishes; the commit loop commits as
        #: soon as the previous commit is answered and something finished since.
        self._progress: asyncio.Event | None = asyncio.Event() if commit_interval_ms == 0 else None
        self._max_unfinished = max_unfinished_per_partition
        #: max_uncommitted: records started and not covered by an answered commit.
        self._bound = None if max_uncommitted is None else UncommittedWork(max_uncommitted)
        #: With the bound: set when a start was refused for it (the slots wait for a
        #: commit's answer); cleared by that answer.
        self._bound_blocked = False
        #: With the bound: wakes the commit loop at once (the interval is not waited
        #: for); continuous commits already wake on every finish.
        self._urgent: asyncio.Event | None = None
        if self._bound is not None:
            self._urgent = self._progress if self._progress is not None else asyncio.Event()
        #: With the bound: each waiting record's lane, so that a partition's first
        #: unfinished record can be started out of turn (see uncommitted.py).
        self._lane_at: dict[TopicPartition, dict[int, Hashable]] = {}
        #: Whether the broker keeps commit metadata (read back once, see _probe_metadata);
        #: until known, only the committed offset counts as covering a record.
        self._metadata_kept: bool | None = None
        self._answered: dict[TopicPartition, OffsetAndMetadata] = {}
        self._bound_waits = 0
        self._over_bound = 0
        self._metadata_max_bytes = metadata_max_bytes
        self._sched = Scheduler(concurrency)
        self._queue_limit = max(4 * concurrency, 1_000)
        self._buffer_limit = max(1, consumer.config.max_buffered_bytes // 2)
        self._trackers: dict[TopicPartition, PartitionTracker] = {}
        # -- transactional mode (issue 27): prefix_transactions.py; None otherwise.
        self._txn: PrefixTransactions | None = None
        self._txn_failure: BaseException | None = None
        if transactional_producer is not None:
            self._txn = PrefixTransactions(
                transactional_producer,
                consumer,
                self._trackers,
                metadata_max_bytes=metadata_max_bytes,
                set_aside=self._set_aside,
                redo=self._redo,
                fail=self._txn_failed,
            )
        self._revoking: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        self._last_committed: dict[TopicPartition, CommitPoint] = {}
        #: The handler task running each in-flight record (a task runs one after another).
        self._tasks: dict[Work, asyncio.Task[None]] = {}
        #: With max_uncommitted: handler tasks whose slot found nothing it may start
        #: (the bound waits for a commit's answer).  They wait here for the next record
        #: :meth:`_dispatch` hands them (None: end) instead of ending, so that refilling
        #: a slot after each answer is not a new task per record (issue 25: at N =
        #: concurrency every slot waits for an answer after every record, and a task
        #: per record was most of the bound's CPU).  They hold no record: a drain,
        #: a loss or stop() never waits for them; _shutdown releases them.
        self._parked: deque[tuple[asyncio.Future[Work | None], asyncio.Task[None]]] = deque()
        #: Set when a record's handler ends while a drain waits (``_work_waiters`` > 0).
        self._work_ended = asyncio.Event()
        self._work_waiters = 0
        self._dead_letters: DeadLetterSender | None = None
        self._failure: ProcessingError | None = None
        #: Set once by stop(), a failure or the shutdown: nothing starts after it.  A
        #: plain flag (nothing awaits it; the read loop waits on ``_room``), read once
        #: per record.
        self._stopping = False
        #: Set when the waiting records fell to half the queue bound (or on stop).
        self._room = asyncio.Event()
        self._running = False
        #: The running loop's clock (set by run()); read once per record.
        self._loop_time: Callable[[], float] = time.monotonic
        self._done: asyncio.Future[None] | None = None
        self._warned_null_key = False
        # counters
        self._finished = 0
        self._retried = 0
        self._dead_lettered = 0
        self._skipped = 0
        self._failed = 0

    # -- public -----------------------------------------------------------------------

    async def run(self) -> None:
        """Process until :meth:`stop` or ``consumer.stop()``; raises ProcessingError on a
        record that failed every attempt with ``on_failure="stop"``."""
        if self._running or self._done is not None:
            raise RuntimeError("Processor.run() can be called once")
        self._running = True
        loop = asyncio.get_running_loop()
        # asyncio's own loop.time() is time.monotonic() behind a Python-level method:
        # the C function itself saves a call per record (another loop keeps its own).
        self._loop_time = (
            time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
        )
        self._done = loop.create_future()
        consumer = self._consumer
        hooks = consumer._rebalance_hooks
        try:
            consumer._require_started()
            await self._open_dead_letter()
            hooks.add(self)
            consumer._metrics.processing = self.metrics
            await self._adopt(consumer.assignment())
            committer = loop.create_task(self._commit_loop(), name="aiogroup-processor-commit")
            try:
                await self._read_loop()
            finally:
                committer.cancel()
                await asyncio.gather(committer, return_exceptions=True)
                await self._shutdown()
        finally:
            hooks.remove(self)
            if consumer._metrics.processing == self.metrics:
                consumer._metrics.processing = None
            self._running = False
            if self._dead_letters is not None:
                await self._dead_letters.close()
            self._calls.close()
            if self._txn is not None:
                await self._txn.close()
            if not self._done.done():
                self._done.set_result(None)
        if self._failure is not None:
            raise self._failure
        if self._txn_failure is not None:
            raise self._txn_failure

    async def stop(self) -> None:
        """Stop dispatching, wait for in-flight handlers (drain timeout), commit, return.

        Before ``run()``: that ``run()`` then returns at once.
        """
        self._stopping = True
        self._release_parked()
        self._room.set()
        if self._done is not None:
            await asyncio.shield(self._done)

    def metrics(self) -> dict[str, Any]:
        """Counters and gauges of this processor (also in ``consumer.metrics().processing``).

        ``partitions``: per partition, ``finished_offset`` (what a commit would carry
        now), ``committed_offset`` (the last commit this processor made), ``gap`` (their
        difference: records finished-and-committable but not yet committed), and
        ``unfinished`` (received and not finished).  ``transactions``: with a
        ``transactional_producer``, what its transactions did (else None).
        """
        now = asyncio.get_running_loop().time()
        starts = [w.started for w in self._sched.in_flight if w.started is not None]
        partitions: dict[str, dict[str, int | None]] = {}
        for tp, tracker in self._trackers.items():
            finished = tracker.committable()
            committed = self._last_committed.get(tp)
            committed_offset = None if committed is None else committed[0]
            gap = None
            if finished is not None:
                gap = finished - (committed_offset if committed_offset is not None else finished)
            partitions[f"{tp.topic}[{tp.partition}]"] = {
                "finished_offset": finished,
                "committed_offset": committed_offset,
                "gap": gap,
                "unfinished": tracker.unfinished,
            }
        return {
            "in_flight": len(self._sched.in_flight),
            "queued": self._sched.queued,
            "finished": self._finished,
            "retried": self._retried,
            "dead_lettered": self._dead_lettered,
            "failed": self._failed,
            "skipped_finished_before": self._skipped,
            "oldest_in_flight_age_s": (now - min(starts)) if starts else None,
            "paused_partitions": len(self._paused),
            "uncommitted": None if self._bound is None else self._bound.count,
            "max_uncommitted": None if self._bound is None else self._bound.limit,
            "commit_waits": self._bound_waits,
            "partitions": partitions,
            # transactional_producer=: transactions committed/aborted, records and outputs
            # committed, finishes held back (prefix_transactions.PrefixTransactions.stats).
            "transactions": None if self._txn is None else self._txn.stats(),
        }

    # -- the rebalance hook (aiogroup.listeners.RebalanceHook) ------------------------------

    async def partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Drain and commit ``revoked`` before the application's listener runs."""
        mine = {tp for tp in revoked if tp in self._trackers}
        if not mine:
            return
        self._revoking |= mine
        try:
            if self._txn is not None:
                self._txn.forget(mine)
            in_flight = self._sched.drop(mine)
            await self._drain(in_flight, self._drain_timeout, f"revocation of {sorted(mine)}")
            await self._commit(mine)
        finally:
            self._forget(mine)

    async def partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Cancel the handlers of ``lost`` at once; nothing is committed for them."""
        mine = {tp for tp in lost if tp in self._trackers}
        if not mine:
            return
        self._revoking |= mine
        try:
            if self._txn is not None:
                self._txn.forget(mine)
            in_flight = self._sched.drop(mine)
            await self._drain(in_flight, 0, f"loss of {sorted(mine)}")
            if self._txn is not None:
                await self._txn.lost(mine)
        finally:
            self._forget(mine)

    async def partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Read the committed offsets and metadata of ``assigned`` (records to skip)."""
        await self._adopt(assigned)

    # -- reading and dispatching ---------------------------------------------------------

    async def _read_loop(self) -> None:
        consumer = self._consumer
        while not self._stopping and self._failure is None:
            self._update_pauses()
            timeout_ms = 100
            if self._trackers and (
                self._paused >= set(self._trackers) or (self._full() and not self._starved())
            ):
                # Every partition paused, or the queue full while every handler slot is
                # busy: wait for the handlers to take half the queue (woken at once,
                # not at the end of a poll), then poll anyway so the member stays alive
                # (max_poll_interval_ms).  Waiting, not pausing: a pause drops the
                # consumer's read-ahead of the partition, and its resume waits for a
                # new fetch (behind a long-polling one, up to fetch_max_wait_ms).
                self._room.clear()
                if (self._full() and not self._starved()) or self._paused >= set(self._trackers):
                    try:
                        await wait_for(self._room.wait(), 1.0)
                    except asyncio.TimeoutError:
                        pass
                self._update_pauses()
                timeout_ms = 0
            # A read brings at most max_unfinished_per_partition records (a partition
            # paused at that bound never holds more than twice it), at most a quarter
            # of the queue bound beyond it, and at most _READ_CHUNK: building records
            # holds the event loop, and every handler's timer waits meanwhile.
            room = min(
                self._max_unfinished,
                max(self._queue_limit - self._sched.queued, self._queue_limit // 4),
                _READ_CHUNK,
            )
            try:
                batch = await consumer.getmany(timeout_ms=timeout_ms, max_records=room)
            except ConsumerStoppedError:
                return
            if batch:
                self._accept(batch)
            else:
                self._dispatch()

    def _accept(self, batch: Mapping[TopicPartition, list[ConsumerRecord]]) -> None:
        ordering = self._ordering
        sched = self._sched
        for tp, records in batch.items():
            tracker = self._trackers.get(tp)
            if tracker is None or tp in self._revoking:
                # Revoked meanwhile: its next owner reads it.  This processor commits
                # nothing of it past its first unfinished record, so nothing is lost.
                log.debug("dropping %d record(s) of %s: not (or no longer) ours", len(records), tp)
                continue
            # Per record only what differs by record; the lane is computed inline (the
            # same as lane_of) and the scheduler takes the partition's records at once.
            received = tracker.received
            # A read's records usually follow on from the last: taken in at once.
            taken = (
                tracker.received_run(records[0].offset, len(records))
                if (records and records[-1].offset - records[0].offset == len(records) - 1)
                else False
            )
            works: list[Work] = []
            add = works.append
            lanes_at = None if self._bound is None else self._lane_at.setdefault(tp, {})
            for record in records:
                offset = record.offset
                if not taken and not received(offset):
                    self._skipped += 1
                    continue
                key = record.key
                if ordering == "key":
                    if key is None and not self._warned_null_key:
                        self._warn_null_key(tp, offset)
                    lane: Hashable = (tp.partition, key, tp.topic)
                elif ordering == "partition":
                    lane = tp
                else:
                    lane = (tp, offset, None)
                ksize = record.serialized_key_size
                vsize = record.serialized_value_size
                nbytes = (ksize if ksize > 0 else 0) + (vsize if vsize > 0 else 0) + RECORD_OVERHEAD
                add(Work(tp, offset, lane, record, nbytes))
                if lanes_at is not None:
                    lanes_at[offset] = lane
            sched.add_many(tp, works)
        self._dispatch()

    def _warn_null_key(self, tp: TopicPartition, offset: int) -> None:
        self._warned_null_key = True
        log.warning(
            "ordering='key': records without a key (first: %s[%d]@%d) are "
            "processed in partition order among themselves",
            tp.topic,
            tp.partition,
            offset,
        )

    def _dispatch(self) -> None:
        if self._failure is not None:
            return
        loop = asyncio.get_running_loop()
        subscription = self._consumer._subscription
        if subscription is not None and not subscription.membership_current(loop.time()):
            # Past the client-side session deadline (a process frozen by SIGSTOP, a long
            # GC or swap just woke): the membership may already be lost and the routine
            # has not judged it yet.  Start nothing until it has - the fetcher holds its
            # records back by the same rule; the read loop dispatches again after its
            # next poll, which returns once the routine moved the deadline or reported
            # the loss (and the lost hook dropped the partitions' queued records).
            return
        if self._bound is None:
            starting = self._sched.take()
        else:
            starting = []
            while (work := self._take_bounded()) is not None:
                starting.append(work)
        parked = self._parked
        for work in starting:
            work.started = loop.time()
            while parked:
                waiter, task = parked.popleft()
                if not waiter.done():
                    self._tasks[work] = task
                    waiter.set_result(work)
                    break
            else:
                self._tasks[work] = loop.create_task(self._work(work), name="aiogroup-handler")

    def _release_parked(self) -> None:
        """End the parked handler tasks (stop, a failure, the shutdown)."""
        while self._parked:
            waiter, _task = self._parked.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _gap_of(self, tp: Hashable) -> int | None:
        tracker = self._trackers.get(tp)
        return None if tracker is None else tracker.first_unfinished()

    def _take_bounded(self) -> Work | None:
        """:meth:`Scheduler.take_one` under ``max_uncommitted`` (uncommitted.py's rule).

        The next record in line starts if the rule allows it; otherwise a partition's
        first unfinished record may take the place reserved for it; otherwise nothing
        starts and the commit loop is woken: the slot stays empty until a commit is
        answered (its records then stop counting) and :meth:`_dispatch` refills it.
        No task waits for that commit, so a revoke, a loss or stop() never waits on it.
        """
        bound = self._bound
        assert bound is not None
        sched = self._sched
        head = sched.peek()
        if head is None:
            return None  # no free slot, or nothing ready: not the bound's doing
        gap_of = self._gap_of
        work: Work | None = None
        if bound.count >= bound.limit:
            # Full: nothing may start, a first unfinished record neither (the common
            # refusal, once per record that finishes while the slots wait: no scan).
            pass
        elif bound.may_start(head.tp, head.offset, gap_of):
            work = sched.take_one()
        else:
            for tp, gap, lane in self._waiting_gaps():
                if bound.may_start(tp, gap, gap_of):
                    work = sched.take_lane(lane, gap)
                    if work is not None:
                        break
        # Tested whether or not the count is already at the limit: a cut list can push
        # it there (or past it) with nothing running and nothing left to commit, and
        # then only a start over the bound goes on (a stall before: Hypothesis, the
        # metadata-cut test, seed 322).  Slots busy: the first test fails at once.
        if work is None and not sched.in_flight and not self._commit_pending():
            work = self._over_bound_start(head)
        if work is None:
            if not self._bound_blocked:
                self._bound_blocked = True
                self._bound_waits += 1
                assert self._urgent is not None
                self._urgent.set()
            return None
        bound.started(work.tp, work.offset)
        lanes_at = self._lane_at.get(work.tp)
        if lanes_at is not None:
            lanes_at.pop(work.offset, None)
        return work

    def _waiting_gaps(self) -> list[tuple[TopicPartition, int, Hashable]]:
        """(partition, offset, lane) of each partition's first unfinished record that
        waits to start: the records that can free what a partition holds at risk."""
        out: list[tuple[TopicPartition, int, Hashable]] = []
        for tp, lanes_at in self._lane_at.items():
            tracker = self._trackers.get(tp)
            gap = None if tracker is None else tracker.first_unfinished()
            if gap is not None and (lane := lanes_at.get(gap)) is not None:
                out.append((tp, gap, lane))
        return out

    def _over_bound_start(self, head: Work) -> Work | None:
        """Nothing runs, nothing is left to commit, and still nothing may start: the
        latest commit's metadata, cut at its byte bound, no longer lists records an
        earlier one did (uncommitted.py).  Rather than stall, start a partition's
        first unfinished record (its commit then covers records again), said in the
        log: the bound is exceeded by the records the cut metadata dropped."""
        bound = self._bound
        assert bound is not None
        for _tp, gap, lane in self._waiting_gaps():
            work = self._sched.take_lane(lane, gap)
            if work is not None:
                break
        else:
            work = self._sched.take_one()
        if work is not None:
            self._over_bound += 1
            log.warning(
                "max_uncommitted (%d): %d records not covered by the last answered commit "
                "(its metadata, cut at metadata_max_bytes, dropped finished runs); "
                "starting %s[%d]@%d over the bound rather than stall",
                bound.limit,
                bound.count,
                work.tp.topic,
                work.tp.partition,
                work.offset,
            )
        return work

    def _commit_pending(self) -> bool:
        """A commit now would change some partition's committed point."""
        for tp in set(self._trackers) - self._revoking:
            point = self._commit_point(self._trackers[tp])
            if point is not None and point != self._last_committed.get(tp):
                return True
        return False

    def _commit_point(self, tracker: PartitionTracker) -> CommitPoint | None:
        """The tracker's commit point; while max_uncommitted still has to learn whether
        the broker keeps metadata, empty metadata goes as the bare prefix ``ag1:`` (it
        lists no runs, for any reader) so that the read-back can tell."""
        point = tracker.commit_point(self._metadata_max_bytes)
        if point is not None and not point[1] and self._probing():
            return point[0], offset_metadata.PREFIX
        return point

    def _probing(self) -> bool:
        return self._bound is not None and self._metadata_kept is None

    async def _work(self, work: Work) -> None:
        """A handler task: ``work``, then the next record released, until none is ready.

        One task carries record after record rather than a task per record: creating,
        scheduling and finishing a task costs more than many handlers' own work, and
        at concurrency 1000 the loop was CPU-bound on it (issue 25: asyncio made some
        119,000 tasks a second here, the target asks 160,000 records).  Cancellation
        still reaches exactly one record: :meth:`_drain` cancels the task only while it
        runs a record of the partitions drained (``_tasks`` maps the record to its task).

        This is the per-record path, and at concurrency 1000 the loop is CPU-bound, so
        it is written flat: the common case - an async handler, no per-record timeout,
        the first attempt succeeds - is awaited right here rather than through
        :meth:`_handle` (a coroutine per record and a frame more on every resume), and
        :meth:`_finish`, the next record's take (the rules of :meth:`_dispatch`: nothing
        after stop or a failure, nothing past the client-side session deadline) and
        :meth:`_wake_reader` are inlined.  A failed first attempt goes on in
        :meth:`_handle` (retries, dead letter, stop).
        """
        task = asyncio.current_task()
        assert task is not None
        tasks = self._tasks
        sched = self._sched
        trackers = self._trackers
        progress = self._progress
        room = self._room
        clock = self._loop_time
        consumer = self._consumer
        half_queue = self._queue_limit // 2
        half_bytes = self._buffer_limit // 2
        handler = self._handler if self._direct else None
        #: max_uncommitted: a finish while slots wait for a commit, or with half the
        #: bound at risk, wakes the commit loop (answers arrive before slots must wait).
        urgent = self._urgent
        bound = self._bound
        near = 0 if bound is None else max(1, bound.limit // 2)
        take = sched.take_one if bound is None else self._take_bounded
        #: Without max_uncommitted the record's end and the next take are one call.
        done_take = sched.done_take_one if bound is None else None
        while True:
            ended = False
            try:
                try:
                    if handler is None:
                        await self._handle(work, None)
                    else:
                        try:
                            result = handler(work.record)
                            if type(result) is _Coroutine or inspect.isawaitable(result):
                                await result
                        except Exception as exc:
                            await self._handle(work, exc)
                        else:
                            # _finish, inline.
                            self._finished += 1
                            if progress is not None:
                                progress.set()
                            tracker = trackers.get(work.tp)
                            if tracker is not None:
                                # Applied at the tracker's next read (tracker.py).
                                tracker.finish_later(work.offset)
                            if urgent is not None and (
                                self._bound_blocked or bound.count >= near  # type: ignore[union-attr]
                            ):
                                urgent.set()
                    ended = True
                finally:
                    # The record ended by an exception (a cancellation): here; ended
                    # normally: below, with the next record's take.
                    if not ended:
                        tasks.pop(work, None)
                        sched.done(work)
                        if self._work_waiters:
                            self._work_ended.set()
            except asyncio.CancelledError:
                # Cancelled by a drain (or the loop's end): this task stops; the slot
                # goes to a new task unless the processor is stopping.
                if not self._stopping:
                    self._dispatch()
                self._wake_reader()
                raise
            # The record's end, and the next record for this slot by the rules of
            # _dispatch.
            tasks.pop(work, None)
            next_work = None
            if self._failure is None and not self._stopping:
                now = clock()
                subscription = consumer._subscription
                until = None if subscription is None else subscription.membership_valid_until
                if until is None or now < until:
                    if done_take is not None:
                        next_work = done_take(work)
                    else:
                        sched.done(work)
                        next_work = take()
                    if next_work is not None:
                        next_work.started = now
                        tasks[next_work] = task
                else:
                    sched.done(work)
            else:
                sched.done(work)
            if self._work_waiters:
                self._work_ended.set()
            # _wake_reader, inline: once set, the event stays set until the read loop
            # waits again, so the records ending meanwhile stop at the first test.
            # A slot left empty by max_uncommitted is no free slot: it waits for a
            # commit, not for records (reading on would grow the queue without bound).
            # The cheap tests first: at concurrency 1000 the slot is refilled and the
            # queue over half most of the time, and then Event.is_set (a Python call)
            # is not reached.
            if (
                (len(sched.in_flight) < sched.concurrency and not self._bound_blocked)
                or (sched.queued <= half_queue and sched.queued_bytes <= half_bytes)
            ) and not room.is_set():
                room.set()
            if next_work is None:
                if bound is None or not self._bound_blocked or self._stopping:
                    return
                # The slot waits for a commit's answer: park here (see _parked).
                waiter: asyncio.Future[Work | None] = task.get_loop().create_future()
                self._parked.append((waiter, task))
                try:
                    next_work = await waiter
                except asyncio.CancelledError:
                    handed = waiter.result() if waiter.done() else None
                    if handed is not None:
                        # Handed a record and cancelled before it ran: it ends here,
                        # unfinished, as a handler cancelled at its first await would.
                        tasks.pop(handed, None)
                        sched.done(handed)
                        if self._work_waiters:
                            self._work_ended.set()
                        if not self._stopping:
                            self._dispatch()
                        self._wake_reader()
                    raise
                if next_work is None:
                    return
            work = next_work

    def _full(self) -> bool:
        """The queue holds what the handlers can take soon, or all the memory it may.

        Under key ordering a hot key's backlog waits behind its own running record: it
        needs memory, not handler slots, so it counts against the byte bound only - the
        count bound would pause the hot key's partition, and the other keys read
        among its records would wait for the hot lane (one hot key stalling others).
        Under partition ordering every record behind a partition's running one is
        such a backlog, and there the count bound is what keeps read-ahead short.
        """
        sched = self._sched
        count = sched.runnable if self._ordering == "key" else sched.queued
        return count >= self._queue_limit or sched.queued_bytes >= self._buffer_limit

    def _starved(self) -> bool:
        """Handler slots free although records wait: the waiting ones are all behind
        busy lanes (a hot key's backlog)."""
        return len(self._sched.in_flight) < self._sched.concurrency and not self._bound_blocked

    def _update_pauses(self) -> None:
        """Pause partitions past the unfinished bound and, while the queue is full and
        handler slots stand idle, the partitions holding more than their share of it.

        Only the fullest partitions stop, and only when the backlog blocks the others:
        a hot key's backlog pauses its own partition, and the others keep being read
        (one hot key never stalls the rest).  A queue that is full while every slot
        is busy pauses nothing - the read loop waits for room instead - because a
        pause costs the partition's read-ahead (the consumer drops it) and a refetch.
        A partition paused for its share stays paused while the queue is full and it
        still holds its share (no pause/resume churn at the bound).
        """
        full = self._full()
        starved = full and self._starved()
        n = max(1, len(self._trackers))
        share = max(1, self._queue_limit // n)
        byte_share = max(1, self._buffer_limit // n)
        waiting = self._sched.waiting_by_tp
        for tp, tracker in self._trackers.items():
            want = tracker.unfinished > self._max_unfinished or (
                full
                and (starved or tp in self._paused)
                and (waiting.get(tp, 0) >= share or self._sched.waiting_bytes(tp) >= byte_share)
            )
            if want and tp not in self._paused:
                self._set_paused(tp, True)
            elif not want and tp in self._paused:
                self._set_paused(tp, False)

    def _set_paused(self, tp: TopicPartition, paused: bool) -> None:
        try:
            if paused:
                self._consumer.pause(tp)
                self._paused.add(tp)
            else:
                self._consumer.resume(tp)
                self._paused.discard(tp)
        except Exception:  # not assigned any more: nothing to pause or resume
            self._paused.discard(tp)

    # -- handling ------------------------------------------------------------------------

    async def _handle(self, work: Work, failed: Exception | None) -> None:
        """Every attempt at ``work``'s record under the retry policy, then its failure.

        ``failed``: the first attempt already ran inline in :meth:`_work` and raised
        this; None: this runs the first attempt too (a sync handler, a timeout).
        """
        record: ConsumerRecord = work.record
        attempt = 0 if failed is None else 1
        error = failed
        while True:
            if error is None:
                attempt += 1
                try:
                    if self._direct:
                        result = self._handler(record)
                        if inspect.isawaitable(result):
                            await result
                    elif self._txn is None:
                        await self._calls.attempt(record)
                    else:
                        outputs = outputs_of(await self._calls.attempt(record))
                except Exception as exc:
                    error = exc
                else:
                    if self._txn is None:
                        self._finish(work)
                    else:
                        await self._txn.finish(work, outputs, self._finish)
                    return
            delay = self._retry.delay_after(attempt)
            if delay is None:
                await self._failed_record(work, error, attempt)
                return
            self._retried += 1
            log.info(
                "handler failed on %s[%d]@%d (attempt %d of %d, retrying in %gs): %r",
                work.tp.topic,
                work.tp.partition,
                work.offset,
                attempt,
                self._retry.attempts,
                delay,
                error,
            )
            error = None
            await asyncio.sleep(delay)

    def _wake_reader(self) -> None:
        """After a record's slot was refilled (or could not be): wake the read loop if
        there is room, or slots stay idle with nothing ready (the waiting records are a
        hot key's backlog, which may hold half the queue).

        Judged only once the slot had its chance to take the next record: checked in
        between, every record's end looked like an idle slot and woke the read loop,
        which then polled per record (at concurrency 1-10 that tripled the CPU and cost
        a sixth of the throughput, measured before this was moved).  Once set, the
        event stays set until the read loop waits again: the records ending meanwhile
        return here at the first test (one wakeup for all of them).
        """
        room = self._room
        if room.is_set():
            return
        sched = self._sched
        if (len(sched.in_flight) < sched.concurrency and not self._bound_blocked) or (
            sched.queued <= self._queue_limit // 2 and sched.queued_bytes <= self._buffer_limit // 2
        ):
            room.set()

    async def _failed_record(self, work: Work, exc: Exception, attempts: int) -> None:
        self._failed += 1
        if self._dead_letters is not None:
            try:
                await self._dead_letters.send(work.record, exc, attempts)
            except Exception as produce_error:
                log.error(
                    "dead-lettering %s[%d]@%d failed",
                    work.tp.topic,
                    work.tp.partition,
                    work.offset,
                    exc_info=produce_error,
                )
                self._stop_for(work, produce_error, attempts)
                return
            self._dead_lettered += 1
            if self._txn is None:
                self._finish(work)
            else:
                await self._txn.finish(work, [], self._finish)
            return
        self._stop_for(work, exc, attempts)

    def _stop_for(self, work: Work, exc: BaseException, attempts: int) -> None:
        if self._failure is None:
            failure = ProcessingError(work.tp, work.offset, attempts, exc)
            failure.__cause__ = exc
            self._failure = failure
            log.error("%s; stopping the processor", failure)
            self._sched.drop(set(self._trackers))
            self._stopping = True
            self._release_parked()
            self._room.set()

    def _finish(self, work: Work) -> None:
        self._finished += 1
        if self._progress is not None:
            self._progress.set()
        tracker = self._trackers.get(work.tp)
        if tracker is not None:
            # Not pending: its partition was revoked and assigned back meanwhile.
            tracker.finished_if_pending(work.offset)
        bound = self._bound
        if self._urgent is not None and bound is not None:
            if self._bound_blocked or bound.count >= max(1, bound.limit // 2):
                self._urgent.set()

    # -- dead letters --------------------------------------------------------------------

    async def _open_dead_letter(self) -> None:
        dl = self._on_failure
        if not isinstance(dl, DeadLetter):
            return
        cfg = self._consumer.config
        sender = DeadLetterSender(
            dl,
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=cfg.client_id,
            client_options=cfg.client_options,
        )
        await sender.open(await self._consumer.topics())
        self._dead_letters = sender

    # -- commits, assignment and shutdown ------------------------------------------------

    async def _adopt(self, partitions: set[TopicPartition]) -> None:
        new = sorted(tp for tp in partitions if tp not in self._trackers)
        if not new:
            return
        committed: Mapping[TopicPartition, OffsetAndMetadata | None]
        try:
            committed = await self._consumer._fetch_committed(new)
        except Exception as exc:
            log.warning(
                "could not read the committed metadata of %s (%r): records finished "
                "beyond the committed offsets may be processed again",
                new,
                exc,
            )
            committed = {}
        for tp in new:
            oam = committed.get(tp)
            if oam is None:
                self._trackers[tp] = PartitionTracker()
                continue
            runs = offset_metadata.decode(int(oam.offset), oam.metadata)
            self._trackers[tp] = PartitionTracker(int(oam.offset), runs)
            self._last_committed[tp] = (int(oam.offset), oam.metadata or "")

    def _forget(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._trackers.pop(tp, None)
            self._last_committed.pop(tp, None)
            self._paused.discard(tp)
            self._revoking.discard(tp)
            self._lane_at.pop(tp, None)
            self._answered.pop(tp, None)
            if self._bound is not None:
                self._bound.forget(tp)

    async def _commit_loop(self) -> None:
        if self._urgent is not None:
            await self._bounded_commit_loop(self._urgent)
            return
        progress = self._progress
        if progress is None:
            while True:
                await asyncio.sleep(self._commit_interval)
                await self._commit(None)
        # Continuous: one commit in flight at a time, the next as soon as it is answered,
        # so what a kill -9 leaves finished-but-uncommitted is about one commit round
        # trip's worth of records instead of an interval's (issue 25).
        while True:
            await progress.wait()
            progress.clear()
            await self._commit(None)

    async def _bounded_commit_loop(self, urgent: asyncio.Event) -> None:
        """The commit loop under ``max_uncommitted``: on the interval (or continuously),
        and at once when ``urgent`` is set - a start was refused for the bound, or a
        record finished while slots wait or with half the bound at risk (so that the
        answer is on its way before the slots must wait).  After an answer the waiting
        slots are refilled; a failed commit is tried again shortly while they wait."""
        loop = asyncio.get_running_loop()
        interval = self._commit_interval
        due = loop.time() + interval
        while True:
            if interval <= 0:
                await urgent.wait()
            else:
                remaining = due - loop.time()
                if remaining > 0:
                    try:
                        await wait_for(urgent.wait(), remaining)
                    except asyncio.TimeoutError:
                        pass
                if loop.time() >= due:
                    due = loop.time() + interval
            urgent.clear()
            outcome = await self._commit(None)
            if outcome is None:
                continue  # nothing new: a finish (or the interval) wakes the loop again
            if not outcome:
                if self._bound_blocked:
                    await asyncio.sleep(_COMMIT_RETRY_S)
                    urgent.set()
                continue
            if self._metadata_kept is None:
                await self._probe_metadata()
            if self._bound_blocked:
                self._bound_blocked = False
                self._dispatch()

    async def _probe_metadata(self) -> None:
        """Read one answered commit back: does the broker keep its metadata?

        The bound counts a record the metadata lists as covered only where the next
        owner will see that list; Tansu, for one, answers a commit and drops its
        metadata.  Until a read-back says so, only the offset covers (conservative)."""
        sent = next(((tp, oam) for tp, oam in self._answered.items() if oam.metadata), None)
        if sent is None:
            return
        tp, oam = sent
        try:
            got = (await self._consumer._fetch_committed([tp])).get(tp)
        except Exception as exc:
            log.debug("reading back the commit of %s failed: %r", tp, exc)
            return
        if got is None or int(got.offset) != oam.offset:
            return  # another commit landed meanwhile: ask again after the next one
        self._metadata_kept = (got.metadata or "") == oam.metadata
        log.info(
            "the broker %s commit metadata: max_uncommitted counts %s as covered",
            "keeps" if self._metadata_kept else "drops",
            "the runs it lists" if self._metadata_kept else "only records below the offset",
        )

    async def _commit(self, partitions: set[TopicPartition] | None) -> bool | None:
        """Commit the finished prefix (and metadata) of ``partitions`` (None: all but
        those being revoked); failures are logged, the next commit tries again.

        Returns None when there was nothing new to commit, True when the broker
        answered, False when the commit failed."""
        if self._txn is not None:
            # Transactional: the open transaction closes, with every partition it touched.
            committed = await self._txn.commit()
            self._last_committed.update(
                (tp, (oam.offset, oam.metadata)) for tp, oam in committed.items()
            )
            return True if committed else None
        if partitions is None:
            partitions = set(self._trackers) - self._revoking
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in partitions:
            tracker = self._trackers.get(tp)
            point = None if tracker is None else self._commit_point(tracker)
            if point is not None and point != self._last_committed.get(tp):
                offsets[tp] = OffsetAndMetadata(point[0], point[1])
        if not offsets:
            return None
        try:
            await self._consumer.commit(offsets)
        except CommitFailedError as exc:
            # A rebalance in progress or a generation gone: the revoke (or the next
            # interval) commits again, the lost path does not.
            log.info("processor commit of %s refused: %s", sorted(offsets), exc)
            return False
        except Exception as exc:
            log.warning("processor commit of %s failed: %r", sorted(offsets), exc)
            return False
        bound = self._bound
        for tp, oam in offsets.items():
            self._last_committed[tp] = (oam.offset, oam.metadata)
            if bound is not None and tp in self._trackers:
                self._answered[tp] = oam
                runs = (
                    offset_metadata.decode(oam.offset, oam.metadata) if self._metadata_kept else ()
                )
                bound.covered(tp, oam.offset, runs)
        return True

    async def _drain(self, in_flight: list[Work], timeout: float, why: str) -> None:
        """Wait up to ``timeout`` for these records' handlers, then cancel and await the rest.

        Waits for the *records*, not their tasks: a handler task goes on with the next
        record when one ends (:meth:`_work`), so a task's end is no signal here.
        """
        if not any(w in self._tasks for w in in_flight):
            return
        left = await self._wait_records(in_flight, timeout)
        if not left:
            return
        if timeout > 0:
            log.warning(
                "%s: %d handler(s) still running after drain_timeout_ms; cancelling them",
                why,
                len(left),
            )
        for work in left:
            task = self._tasks.get(work)
            if task is not None:
                task.cancel()
        # A cancelled handler ends at its next await (a sync handler's thread cannot be
        # stopped: its record ends at once, the thread runs on).  One that swallows the
        # cancellation is not waited for beyond another drain timeout.
        stuck = await self._wait_records(left, max(self._drain_timeout, 0.001))
        if stuck:
            log.error(
                "%s: %d handler(s) ignored cancellation; going on without them",
                why,
                len(stuck),
            )

    async def _wait_records(self, works: list[Work], timeout: float) -> list[Work]:
        """Wait up to ``timeout`` for ``works`` to end; returns those still running."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._work_waiters += 1
        try:
            while True:
                left = [w for w in works if w in self._tasks]
                remaining = deadline - loop.time()
                if not left or remaining <= 0:
                    return left
                self._work_ended.clear()
                try:
                    await wait_for(self._work_ended.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._work_waiters -= 1

    # -- transactional mode: the hooks prefix_transactions.py calls --------------------------

    def _set_aside(self, work: Work) -> None:
        """A held-back finish gives its handler slot to the next record (its lane waits)."""
        self._sched.set_aside(work)
        if not self._stopping:
            self._dispatch()

    async def _redo(self, starts: dict[TopicPartition, int]) -> None:
        """An aborted transaction's finishes are void: read these partitions again from
        ``starts`` (where the transaction began on each), with fresh trackers and the
        committed metadata.  Partitions being revoked or lost are left to that path."""
        mine = {tp for tp in starts if tp in self._trackers and tp not in self._revoking}
        if not mine:
            return
        self._revoking |= mine  # their records are dropped until the trackers are new
        try:
            in_flight = self._sched.drop(mine)
            await self._drain(in_flight, 0, f"redo of {sorted(mine)}")
            for tp in mine & self._paused:
                self._set_paused(tp, False)
        finally:
            self._forget(mine)
        owned = set()
        for tp in mine & self._consumer.assignment():
            try:
                self._consumer.seek(tp, starts[tp])
            except Exception:  # no longer assigned: its next owner reads it
                continue
            owned.add(tp)
        await self._adopt(owned)

    def _txn_failed(self, error: BaseException) -> None:
        """A transaction failed past recovery (a fenced producer, an output refused):
        stop, and run() raises it."""
        if self._txn_failure is None:
            self._txn_failure = error
        self._sched.drop(set(self._trackers))
        self._stopping = True
        self._release_parked()
        self._room.set()

    async def _shutdown(self) -> None:
        """Stop dispatching, drain everything, commit, and leave positions at the commits."""
        self._stopping = True
        self._release_parked()
        if self._txn is not None:
            self._txn.forget(set(self._trackers))
        in_flight = self._sched.drop(set(self._trackers) | {w.tp for w in self._sched.in_flight})
        await self._drain(in_flight, self._drain_timeout, "stop")
        if self._consumer._lifecycle_started:
            await self._commit(None)
            # A later run() (or the application's own loop) starts from the commits,
            # not from the records this processor had read ahead and dropped.
            for tp, tracker in list(self._trackers.items()):
                point = tracker.committable()
                if point is None or tp in self._revoking:
                    continue
                try:
                    self._consumer.seek(tp, point)
                except Exception:  # no longer assigned
                    pass
            for tp in list(self._paused):
                self._set_paused(tp, False)
        self._trackers.clear()
        self._last_committed.clear()
        self._lane_at.clear()


def metrics_partition(key: str) -> TopicPartition:
    """The partition a ``Processor.metrics()["partitions"]`` key names (``"topic[3]"``).

    The exporters label by topic and partition; the brackets cannot be part of a topic
    name (Kafka allows ``[a-zA-Z0-9._-]`` only), so the split is unambiguous.
    """
    topic, _, rest = key.rpartition("[")
    if not topic or not rest.endswith("]") or not rest[:-1].isdigit():
        raise ValueError(f"not a processor metrics partition key: {key!r}")
    return TopicPartition(topic, int(rest[:-1]))
