"""A transactional processor's commits: one transaction per committed prefix (issue 27).

Why: with ``Processor(consumer, handler, transactional_producer=producer)`` each
input's outputs become visible to ``read_committed`` readers exactly once.  The
records a commit counts as finished and the outputs made from them go into one
transaction of aiokafka's producer, with the offsets sent fenced by the member's group
metadata (KIP-447): either both land or neither does.

The rules this module keeps, for every transaction:

* A finish enters the transaction open now (begun lazily by the first one): its
  outputs are sent into it, and only then is the record marked finished in its
  partition's tracker.  So no output is in a transaction whose offsets do not count
  its record.
* Closing it (on the interval, on revoke, on stop) first shuts the gate: finishes
  arriving meanwhile wait and go into the next one.  It waits for the finishes already
  past the gate, reads the trackers' commit points of every partition the transaction
  touched, awaits every output's delivery, sends the offsets with
  :func:`aiogroup.transactions.send_offsets_to_transaction`, and commits.  So no record
  is counted in a commit whose transaction lacks its outputs.
* A finish the commit could not represent (its metadata bound,
  :mod:`~aiogroup.processing.finish_bound`) waits, its slot given to another record,
  until the committed offset moves.
* A failed transaction is aborted; the records it counted as finished are not: the
  processor reads their partitions again from where the transaction began.  A zombie's
  fence (the group replaced the member), offsets of partitions no longer owned, and a
  timeout are recovered that way, as :class:`~aiogroup.transactions.TransformLoop`
  does; a fenced producer or a failed output ends the processor with that error.
* A loss aborts the open transaction if it holds anything of the lost partitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from aiogroup._support.timeouts import wait_for
from aiogroup._transactions import pacing
from aiogroup._transactions.committer import ProducerTxnView
from aiogroup._transactions.deliveries import DeliveryTracker
from aiogroup._transactions.outcomes import MisuseKind, check_commit_input
from aiogroup.errors import (
    CommitFailedError,
    ConfigurationError,
    KafkaTimeoutError,
    NotGroupMemberError,
    TransactionFencedError,
    TransactionInDoubtError,
)
from aiogroup.processing.finish_bound import admissible, max_runs
from aiogroup.processing.output import Output
from aiogroup.processing.scheduler import Work
from aiogroup.processing.tracker import PartitionTracker
from aiogroup.structs import OffsetAndMetadata, TopicPartition
from aiogroup.transactions import (
    DEFAULT_TIMEOUT_S,
    TransactionOutcome,
    send_offsets_to_transaction,
)

if TYPE_CHECKING:
    from aiogroup.consumer import GroupConsumer

__all__ = ["PrefixTransactions", "check_transactional"]

log = logging.getLogger("aiogroup.processing")


def check_transactional(producer: Any, consumer: GroupConsumer) -> None:
    """Refuse a producer without ``transactional_id`` or a consumer that auto-commits,
    with the words ``send_offsets_to_transaction`` uses for the same misuse."""
    problem = check_commit_input(
        {},
        transactional_id=ProducerTxnView(producer).transactional_id,
        in_transaction=True,
        owned=None,
        auto_commit=consumer.config.enable_auto_commit,
    )
    if problem is not None and problem.kind is MisuseKind.CONFIGURATION:
        raise ConfigurationError(f"Processor(transactional_producer=...): {problem.message}")


def recoverable(error: BaseException) -> bool:
    """Is a failed transaction's input simply read again (True), or does the processor
    stop with the error (False)?  TransformLoop's rule: a zombie member's fence, offsets
    of partitions moved away (or no membership to commit under: the loss follows) and a
    timeout are recovered; a fenced producer (another
    one holds the transactional id: this one can do nothing more) and everything else -
    an output that could not be produced above all - end the run."""
    if isinstance(error, TransactionFencedError):
        return not error.producer_fenced
    if isinstance(error, TransactionInDoubtError):
        return False  # read again, its outputs might be written twice
    return isinstance(
        error, CommitFailedError | NotGroupMemberError | KafkaTimeoutError | asyncio.TimeoutError
    )


class PrefixTransactions:
    """The open transaction of a transactional processor, its gate and its close.

    The processor calls :meth:`finish` when a handler returned, :meth:`commit` where it
    would commit, :meth:`forget` before a revoked or lost partition's drain,
    :meth:`lost` after a loss's drain and :meth:`close` at the end.  It lends three
    callbacks: ``set_aside(work)`` (give a held-back record's slot away), ``redo(starts)``
    (read these partitions again from these offsets: the aborted transaction's finishes
    are void) and ``fail(error)`` (stop the processor with this error).
    """

    def __init__(
        self,
        producer: Any,
        consumer: GroupConsumer,
        trackers: Mapping[TopicPartition, PartitionTracker],
        *,
        metadata_max_bytes: int,
        set_aside: Callable[[Work], None],
        redo: Callable[[dict[TopicPartition, int]], Awaitable[None]],
        fail: Callable[[BaseException], None],
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        check_transactional(producer, consumer)
        self._producer = producer
        self._consumer = consumer
        self._trackers = trackers
        self._max_runs = max_runs(metadata_max_bytes)
        self._metadata_max_bytes = metadata_max_bytes
        self._set_aside = set_aside
        self._redo = redo
        self._fail = fail
        self._timeout = timeout
        self._open = False
        #: Serializes the lazy begin among finishes arriving together.
        self._begin_lock = asyncio.Lock()
        #: Set while finishes may enter the open (or next) transaction; clear while one closes.
        self._gate = asyncio.Event()
        self._gate.set()
        #: Finishes past the gate, sending their outputs; the close waits for none.
        self._entered = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        #: Set (and replaced) whenever a held-back finish may have become admissible.
        self._moved = asyncio.Event()
        self._outputs = DeliveryTracker(producer)
        #: Partitions with a finish in the open transaction, and each one's committable
        #: offset before its first: where to read again if the transaction is aborted.
        self._touched: dict[TopicPartition, int] = {}
        self._finishes = 0
        #: Why the open transaction cannot commit (an output could not be sent).
        self._doomed: BaseException | None = None
        #: aiokafka's end-of-transaction future of the open transaction (its commit's
        #: answer, learned even after the commit's wait timed out).
        self._end: asyncio.Future[None] | None = None
        self._closing: asyncio.Task[dict[TopicPartition, OffsetAndMetadata]] | None = None
        #: Held-back records per partition (their tasks wait in :meth:`finish`).
        self._held: dict[TopicPartition, set[Work]] = {}
        self._released: set[Work] = set()
        self._ended = False
        # counters
        self.transactions_committed = 0
        self.transactions_aborted = 0
        self.records_committed = 0
        self.outputs_committed = 0
        self.held_back = 0
        #: Why the last transaction that did not commit was aborted (None: none yet).
        self.last_abort: BaseException | None = None

    @property
    def in_transaction(self) -> bool:
        return self._open

    def stats(self) -> dict[str, Any]:
        return {
            "transactions_committed": self.transactions_committed,
            "transactions_aborted": self.transactions_aborted,
            "records_committed": self.records_committed,
            "outputs_committed": self.outputs_committed,
            "held_back": self.held_back,
            "held_now": sum(len(h) for h in self._held.values()),
        }

    # -- finishes ------------------------------------------------------------------------

    async def finish(self, work: Work, outputs: list[Output], mark: Callable[[Work], None]) -> bool:
        """Send ``work``'s outputs into the open transaction, then ``mark`` it finished.

        Waits while a transaction closes, and while the finish is held back (see the
        module docstring).  False: the record is not finished - its partition went (revoked,
        lost, read again), the processor ends, or the transaction cannot commit - and its
        outputs were not sent (or go down with the aborted transaction).
        """
        tp, offset = work.tp, work.offset
        held = False
        try:
            while True:
                tracker = self._trackers.get(tp)
                if (
                    self._ended
                    or self._doomed is not None
                    or work in self._released
                    or tracker is None
                    or not tracker.is_pending(offset)
                ):
                    return False
                if not self._gate.is_set():
                    await self._gate.wait()
                    continue
                if admissible(tracker, offset, self._max_runs):
                    break
                if not held:
                    held = True
                    self.held_back += 1
                    self._held.setdefault(tp, set()).add(work)
                    self._set_aside(work)
                await self._moved.wait()
        finally:
            if held:
                self._released.discard(work)
                waiting = self._held.get(tp)
                if waiting is not None:
                    waiting.discard(work)
                    if not waiting:
                        del self._held[tp]
        assert tracker is not None
        self._entered += 1
        self._quiet.clear()
        try:
            return await self._send_and_mark(work, tracker, outputs, mark)
        finally:
            self._entered -= 1
            if not self._entered:
                self._quiet.set()

    async def _send_and_mark(
        self,
        work: Work,
        tracker: PartitionTracker,
        outputs: list[Output],
        mark: Callable[[Work], None],
    ) -> bool:
        tp, offset = work.tp, work.offset
        sending = False
        try:
            if not self._open:
                await self._begin()
            if tp not in self._touched:
                start = tracker.committable()
                self._touched[tp] = offset if start is None else start
            front = tracker.committable() == offset
            for out in outputs:
                sending = True
                await self._outputs.send(
                    out.topic,
                    out.value,
                    key=out.key,
                    partition=out.partition,
                    headers=list(out.headers) or None,
                )
        except asyncio.CancelledError:
            # Cancelled (a drain's deadline, a loss) with some of its outputs perhaps in
            # the transaction and the record not finished: the transaction must not
            # commit.  (Not shielded to the end instead: a task per finish costs the
            # per-record path more than this rare abort does.)
            if sending and self._doomed is None:
                self._doomed = CommitFailedError(
                    f"{tp.topic}[{tp.partition}]@{offset} was cancelled while its outputs "
                    "were being sent"
                )
            raise
        except Exception as exc:
            if self._doomed is None:
                log.error(
                    "an output of %s[%d]@%d could not be sent: %r",
                    tp.topic,
                    tp.partition,
                    offset,
                    exc,
                )
                self._doomed = exc
            return False
        if self._trackers.get(tp) is not tracker or not tracker.is_pending(offset):
            # Lost or read again while its outputs were being sent: they are in the
            # transaction without their record, so it must not commit.
            if outputs and self._doomed is None:
                self._doomed = CommitFailedError(
                    f"{tp.topic}[{tp.partition}] moved while outputs of offset {offset} "
                    "were being sent"
                )
            return False
        mark(work)
        self._finishes += 1
        if front:
            self._pulse()
        return True

    async def _begin(self) -> None:
        async with self._begin_lock:
            if self._open:
                return
            # The previous transaction's markers: see aiogroup._transactions.pacing.
            await pacing.wait_for_markers(self._producer)
            await wait_for(self._producer.begin_transaction(), self._timeout)
            self._end = ProducerTxnView(self._producer).transaction_end()
            self._open = True

    def _pulse(self) -> None:
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def forget(self, partitions: set[TopicPartition]) -> None:
        """Release the held-back records of ``partitions``: they end unfinished (their
        partitions are being revoked, lost or read again)."""
        for tp in partitions:
            self._released |= self._held.get(tp, set())
        self._pulse()

    # -- commits -------------------------------------------------------------------------

    async def commit(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Close the open transaction (every finish before this call in it or an earlier
        one): the offsets it committed, {} when none was open or it was aborted."""
        while self._closing is not None:
            await asyncio.shield(self._closing)
        if not self._open and not self._touched and self._doomed is None:
            return {}
        task = asyncio.ensure_future(self._close())
        self._closing = task

        def done(_: object) -> None:
            if self._closing is task:
                self._closing = None

        task.add_done_callback(done)
        return await asyncio.shield(task)

    async def _close(self) -> dict[TopicPartition, OffsetAndMetadata]:
        self._gate.clear()
        producer, timeout = self._producer, self._timeout
        touched = dict(self._touched)
        try:
            await self._quiet.wait()
            touched = dict(self._touched)
            finishes, sent = self._finishes, self._outputs.sent
            if self._doomed is not None:
                raise self._doomed
            if not self._open:
                self._reset()
                return {}
            offsets: dict[TopicPartition, OffsetAndMetadata] = {}
            for tp in touched:
                tracker = self._trackers.get(tp)
                point = None if tracker is None else tracker.commit_point(self._metadata_max_bytes)
                if point is None:
                    raise CommitFailedError(
                        f"{tp.topic}[{tp.partition}] has outputs in the transaction but is no "
                        "longer processed here"
                    )
                offsets[tp] = OffsetAndMetadata(point[0], point[1])
            flushing = ProducerTxnView(producer).send_buffered()
            try:
                await wait_for(self._outputs.delivered(), timeout)
            finally:
                flushing.cancel()
            # Aborts the transaction itself on any failure.
            await send_offsets_to_transaction(producer, offsets, self._consumer, timeout=timeout)
            try:
                await wait_for(producer.commit_transaction(), timeout)
            except asyncio.TimeoutError:
                await self._answer_in_doubt()
            finally:
                pacing.ended(producer)
        except BaseException as exc:
            await self._aborted(exc, touched)
            return {}
        self.transactions_committed += 1
        self.records_committed += finishes
        self.outputs_committed += sent
        self._reset()
        return offsets

    async def _answer_in_doubt(self) -> None:
        """The commit had no answer within the timeout: it is in doubt (aiokafka's EndTxn
        cannot be recalled and may still complete on a new coordinator).  Wait once more
        for the answer: committed, return; refused, raise the refusal (aborted and read
        again as usual); still unknown, stop the processor - reading the input again
        could write its outputs twice, and the group's offsets will tell the next start
        which way it went."""
        outcome, end = TransactionOutcome(), self._end
        if end is not None:
            outcome._learn(end)
            committed = await outcome.settle(self._timeout)
            if committed is True:
                return
            if committed is False:
                refusal = None if end.cancelled() else end.exception()
                raise refusal or CommitFailedError("the transaction's commit was refused")
        raise TransactionInDoubtError(
            f"commit_transaction: no answer within {2 * self._timeout:g}s; whether the "
            "transaction committed is unknown, so its input is not read again - the "
            "processor stops (the group's committed offsets tell the next start)"
        )

    def _reset(self) -> None:
        """A new transaction may begin (the last one committed or was aborted)."""
        self._open = False
        self._touched = {}
        self._finishes = 0
        self._doomed = None
        self._outputs = DeliveryTracker(self._producer)
        self._gate.set()
        self._pulse()

    async def _aborted(self, error: BaseException, touched: dict[TopicPartition, int]) -> None:
        """The transaction did not commit: abort what is open, void its finishes (read
        their partitions again) or stop the processor."""
        if isinstance(error, TransactionInDoubtError):
            self.last_abort = error  # neither committed nor aborted: nothing is undone
            log.error("%s", error)
            self._fail(error)
            return
        view = ProducerTxnView(self._producer)
        if view.abortable:
            try:
                await wait_for(self._producer.abort_transaction(), self._timeout)
            except (Exception, asyncio.TimeoutError) as exc:
                log.warning("the transaction could not be aborted: %r", exc)
            finally:
                pacing.ended(self._producer)
        self._outputs.forget()
        self.transactions_aborted += 1
        self.last_abort = error
        # Held-back finishes of the partitions read again end unfinished (else one could
        # enter the next transaction before the redo drops its tracker); finishes of other
        # partitions may enter the next transaction while the redo runs.
        self.forget(set(touched))
        self._reset()
        if isinstance(error, asyncio.CancelledError):
            raise error
        if recoverable(error):
            log.info(
                "a transaction was aborted (%r); %s are read again from where it began",
                error,
                sorted(touched),
            )
            await self._redo(touched)
        else:
            log.error("a transaction failed (%r); stopping the processor", error)
            self._fail(error)

    async def lost(self, partitions: set[TopicPartition]) -> None:
        """After a loss's drain: abort the open transaction if it holds anything of
        ``partitions`` (their offsets cannot be committed any more)."""
        while self._closing is not None:
            await asyncio.shield(self._closing)
        if not (partitions & set(self._touched)):
            return
        touched = {tp: start for tp, start in self._touched.items() if tp not in partitions}
        self._gate.clear()
        await self._quiet.wait()
        await self._aborted(
            CommitFailedError(f"partitions {sorted(partitions)} were lost"), touched
        )

    async def close(self) -> None:
        """At the processor's end: nothing more enters; a transaction still open (the
        last commit could not run) is aborted."""
        self._ended = True
        self._pulse()
        while self._closing is not None:
            await asyncio.shield(self._closing)
        if ProducerTxnView(self._producer).abortable:
            try:
                await wait_for(self._producer.abort_transaction(), self._timeout)
                self.transactions_aborted += 1
            except (Exception, asyncio.TimeoutError) as exc:
                log.warning("the open transaction could not be aborted at the end: %r", exc)
            finally:
                pacing.ended(self._producer)
        self._open = False
