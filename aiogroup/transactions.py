"""Exactly-once consume-transform-produce: input offsets committed in the output's transaction.

Why: a service that reads a topic and writes another wants each input reflected in
the output exactly once, for readers that read the output with
``isolation_level="read_committed"``.  Kafka's way is one transaction holding both
the output records and the input offsets; since KIP-447 the offsets carry the
consumer's group metadata, so the group coordinator refuses the commit of a member
the group has already replaced (a zombie: frozen past its session, or removed).
Without that, a zombie's transaction commits output a new owner of the same input
produces again: duplicates.

``send_offsets_to_transaction(producer, offsets, consumer)`` is aiokafka's
``producer.send_offsets_to_transaction(offsets, group_id)`` with the fencing added,
on aiokafka's own transactional ``AIOKafkaProducer``; ``transaction(producer)``
begins, commits, or aborts what is still open::

    async with transaction(producer):
        ...  # produce the outputs of a batch
        await send_offsets_to_transaction(producer, next_offsets, consumer)

A refusal because the sender is a zombie aborts the transaction and raises
:class:`~aiogroup.errors.TransactionFencedError`; any other failure aborts it and
raises what failed.  Either way nothing of the transaction becomes visible to
read_committed readers, and the input goes to the member that owns it now.

:class:`TransformLoop` is the whole loop - a batch per transaction - with the two
rebalance duties the hand-written loop leaves to the application: a revocation waits
for the transaction in flight to commit (or, past ``revoke_timeout_ms``, aborts it)
before the revoke listener returns, so the next owner starts from offsets that match
the output; a loss aborts it at once.  It acts through the consumer's internal
rebalance hooks, inside the listener step, so heartbeats go on meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from aiogroup._support.timeouts import wait_for
from aiogroup._transactions import pacing
from aiogroup._transactions.committer import (
    ProducerTxnView,
    Refused,
    add_group_to_transaction,
    commit_in_transaction,
    commit_offsets_in_transaction,
)
from aiogroup._transactions.deliveries import DeliveryTracker
from aiogroup._transactions.outcomes import MisuseKind, Step, TxnCode, check_commit_input
from aiogroup.errors import (
    CommitFailedError,
    ConfigurationError,
    ConsumerStoppedError,
    IllegalStateError,
    KafkaTimeoutError,
    TransactionFencedError,
    TransactionInDoubtError,
    error_for_code,
)
from aiogroup.group_metadata import ConsumerGroupMetadata
from aiogroup.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from aiogroup.consumer import GroupConsumer

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "TransactionOutcome",
    "Transform",
    "TransformLoop",
    "send_offsets_to_transaction",
    "transaction",
]

log = logging.getLogger("aiogroup.transactions")

#: The bound on one call (the two requests with their retries), and separately on
#: the abort that follows a failure: long enough for a coordinator to move.
DEFAULT_TIMEOUT_S = 30.0


async def send_offsets_to_transaction(
    producer: Any,
    offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
    group: GroupConsumer | ConsumerGroupMetadata,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Commit ``offsets`` (the *next* offsets to read) in ``producer``'s open transaction.

    ``producer`` is an ``aiokafka.AIOKafkaProducer`` created with a
    ``transactional_id``, inside ``begin_transaction()``.  ``group`` is the consumer
    that read the input - its ``group_metadata()`` is taken now, and the offsets must
    be of partitions it owns - or metadata taken earlier (``consumer.group_metadata()``
    at the batch's start: the transaction then commits only if the member is still
    the one that read the batch; the coordinator alone judges ownership).

    Before anything is sent, and leaving the transaction as it was: a producer
    without transactional id or a consumer that auto-commits raises
    ``ConfigurationError``; no open transaction ``IllegalStateError``; offsets of
    partitions the consumer does not own (any more) ``CommitFailedError``, as
    ``consumer.commit()`` does - redo the batch from the committed offsets.  After
    sending, every failure aborts the transaction: a zombie's (KIP-447) raises
    ``TransactionFencedError``; a timeout ``KafkaTimeoutError``; anything else the
    broker's error.
    """
    view, normalized, metadata = _checked(producer, offsets, group)
    await _fenced(producer, commit_in_transaction(view, normalized, metadata), metadata, timeout)


def _checked(
    producer: Any,
    offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
    group: GroupConsumer | ConsumerGroupMetadata,
) -> tuple[ProducerTxnView, dict[TopicPartition, OffsetAndMetadata], ConsumerGroupMetadata]:
    """The input checks of :func:`send_offsets_to_transaction`, before anything is sent."""
    view = ProducerTxnView(producer)
    normalized = _normalized(offsets)
    owned: set[TopicPartition] | None = None
    auto_commit = False
    if not isinstance(group, ConsumerGroupMetadata):
        owned, auto_commit = group.assignment(), group.config.enable_auto_commit
    problem = check_commit_input(
        normalized,
        transactional_id=view.transactional_id,
        in_transaction=view.in_transaction,
        owned=owned,
        auto_commit=auto_commit,
    )
    if problem is not None:
        message = f"send_offsets_to_transaction: {problem.message}"
        if problem.kind is MisuseKind.CONFIGURATION:
            raise ConfigurationError(message)
        if problem.kind is MisuseKind.NOT_OWNED:
            raise CommitFailedError(message)
        raise IllegalStateError(message)
    # After the ownership check: mid-rebalance an eager member owns nothing, which is
    # CommitFailedError (redo the batch), not a missing membership.
    metadata = group if isinstance(group, ConsumerGroupMetadata) else group.group_metadata()
    return view, normalized, metadata


async def _fenced(
    producer: Any, step: Awaitable[None], metadata: ConsumerGroupMetadata, timeout: float
) -> None:
    """Await an offsets step of the open transaction; on any failure abort it and raise
    what :func:`send_offsets_to_transaction` documents."""
    try:
        await wait_for(step, timeout)
    except Refused as refused:
        aborted = await _abort(producer, timeout)
        raise _as_error(refused, metadata, aborted) from None
    except asyncio.TimeoutError:
        aborted = await _abort(producer, timeout)
        raise KafkaTimeoutError(
            f"send_offsets_to_transaction: no final answer within {timeout:g}s; the "
            f"transaction was {'aborted' if aborted else 'not confirmed aborted'}"
        ) from None
    except Exception:
        await _abort(producer, timeout)
        raise


class TransactionOutcome:
    """What became of the transaction of one ``async with transaction(producer) as outcome``.

    ``committed`` is True once the coordinator answered the commit, False once the
    transaction was aborted or its commit refused, and None while it is open - or in
    doubt.  In doubt means the commit was sent and the block stopped waiting for its
    answer (cancelled, or past its timeout).  aiokafka's EndTxn cannot be recalled and
    is sent again to a new coordinator, so such a transaction may still commit: a caller
    that reads its input again before it knows writes the outputs twice (Java's client
    has the same case: a ``commitTransaction`` that timed out may be called again to
    learn the answer).  :meth:`settle` waits for it.
    """

    __slots__ = ("_end", "committed")

    def __init__(self) -> None:
        self.committed: bool | None = None
        #: aiokafka's end-of-transaction future while the answer is unknown.
        self._end: asyncio.Future[None] | None = None

    @property
    def in_doubt(self) -> bool:
        """The commit was sent and its answer is not known yet."""
        return self.committed is None and self._end is not None

    def __repr__(self) -> str:
        state = (
            "in doubt"
            if self.in_doubt
            else {None: "open", True: "committed"}.get(self.committed, "aborted")
        )
        return f"<TransactionOutcome {state}>"

    async def settle(self, timeout: float) -> bool | None:
        """Wait at most ``timeout`` s for an in-doubt commit's answer; the outcome, None
        while still in doubt.  Returns at once when the outcome is known."""
        end = self._end
        if end is not None and self.committed is None:
            await asyncio.wait({end}, timeout=timeout)  # never cancels aiokafka's future
            self._learn(end)
        return self.committed

    def _learn(self, end: asyncio.Future[None]) -> None:
        if end.done():
            self.committed = not end.cancelled() and end.exception() is None
            self._end = None
        else:
            self._end = end


@asynccontextmanager
async def transaction(
    producer: Any, *, timeout: float = DEFAULT_TIMEOUT_S
) -> AsyncIterator[TransactionOutcome]:
    """``async with transaction(producer) as outcome:`` - begin, then commit, or abort on
    an exception.

    aiokafka's ``producer.transaction()`` aborts unconditionally on an exception, and
    aborting a transaction that ``send_offsets_to_transaction`` has already aborted
    breaks aiokafka's state machine (it asserts).  This one aborts only a transaction
    still open, so the exception the body raised - ``TransactionFencedError`` above
    all - is the one the caller sees.  Every step is bounded by ``timeout``.

    The commit cannot be taken back once aiokafka sent it.  Cancelled while it is under
    way, the block waits (at most ``timeout``) for the coordinator's answer before the
    cancellation goes on; past ``timeout`` it raises ``TransactionInDoubtError`` (a
    ``KafkaTimeoutError``).  Either way
    ``outcome`` (a :class:`TransactionOutcome`) says whether it committed, or that the
    answer is still in doubt; the next ``transaction()`` on the producer waits for that
    answer first.
    """
    view = ProducerTxnView(producer)
    if view.transactional_id is None:
        raise ConfigurationError(
            "transaction(): the producer has no transactional_id: create the "
            "AIOKafkaProducer with transactional_id=..."
        )
    await _previous_answered(producer, view, timeout)
    # The previous transaction's markers: see aiogroup._transactions.pacing.
    await pacing.wait_for_markers(producer)
    await wait_for(producer.begin_transaction(), timeout)
    end = view.transaction_end()
    outcome = TransactionOutcome()
    try:
        yield outcome
    except BaseException:
        outcome.committed = False
        if view.abortable:
            try:
                await _abort(producer, timeout)
            finally:
                pacing.ended(producer)
        raise
    try:
        await wait_for(producer.commit_transaction(), timeout)
    except asyncio.CancelledError:
        if end is not None:
            outcome._learn(end)
            await outcome.settle(timeout)
        if outcome.committed is False and view.abortable:
            await _abort(producer, timeout)  # a refused commit leaves it to be aborted
        raise
    except asyncio.TimeoutError:
        if end is not None:
            outcome._learn(end)
        raise TransactionInDoubtError(
            f"commit_transaction: no answer within {timeout:g}s; the commit is in doubt - "
            "the coordinator may still complete it (TransactionOutcome.settle() waits for "
            "the answer; do not process the transaction's input again before)"
        ) from None
    except BaseException:
        outcome.committed = False
        if view.abortable:
            await _abort(producer, timeout)  # a refused commit leaves it to be aborted
        raise
    else:
        outcome.committed = True
    finally:
        pacing.ended(producer)


async def _previous_answered(producer: Any, view: ProducerTxnView, timeout: float) -> None:
    """Wait for the answer to a commit an earlier block stopped waiting for: aiokafka
    cannot begin a transaction while the last one's EndTxn is unanswered."""
    if view.ending:
        end = view.transaction_end()
        if end is not None:
            await asyncio.wait({end}, timeout=timeout)
            if end.done() and not end.cancelled():
                end.exception()  # retrieved: its outcome was the earlier block's to report
    if view.abortable and not view.in_transaction:
        await _abort(producer, timeout)  # that commit was refused: aiokafka wants an abort
    if view.ending:
        raise KafkaTimeoutError(
            f"transaction(): the previous transaction's commit is still unanswered after "
            f"{timeout:g}s; a new one cannot begin before it ends"
        )


def _normalized(
    offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
) -> dict[TopicPartition, OffsetAndMetadata]:
    if not isinstance(offsets, Mapping):
        raise TypeError("offsets must be a mapping of TopicPartition to int or OffsetAndMetadata")
    return {
        tp: value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value, "")
        for tp, value in offsets.items()
    }


async def _abort(producer: Any, timeout: float) -> bool:
    """Abort the open transaction; whether the broker confirmed it (never raises).

    A fenced producer cannot abort (its epoch is stale): the producer that took over
    its transactional id aborts the transaction on its behalf.
    """
    try:
        await wait_for(producer.abort_transaction(), timeout)
    except (Exception, asyncio.TimeoutError) as exc:
        log.warning("the transaction could not be aborted: %r", exc)
        return False
    return True


def _as_error(refused: Refused, metadata: ConsumerGroupMetadata, aborted: bool) -> BaseException:
    cause = error_for_code(refused.code)
    name = TxnCode(refused.code).name if refused.code in set(TxnCode) else cause.__name__
    outcome = "aborted" if aborted else "not confirmed aborted"
    if refused.step is Step.FENCED_MEMBER:
        log.info(
            "group %s: %s refused %s - the group replaced member %s (generation/epoch %d)",
            metadata.group_id,
            refused.api,
            name,
            metadata.member_id,
            metadata.generation_id,
        )
        return TransactionFencedError(
            f"{refused.api} refused ({name}, error code {refused.code}): group "
            f"{metadata.group_id!r} no longer has member {metadata.member_id!r} at "
            f"generation/epoch {metadata.generation_id}; the transaction was {outcome}",
            code=refused.code,
            error=cause,
            producer_fenced=False,
            aborted=aborted,
        )
    if refused.step is Step.FENCED_PRODUCER:
        return TransactionFencedError(
            f"{refused.api} refused ({name}, error code {refused.code}): another "
            f"producer took over the transactional id; the transaction was {outcome} - "
            "close this producer",
            code=refused.code,
            error=cause,
            producer_fenced=True,
            aborted=aborted,
        )
    error: BaseException = cause(
        f"{refused.api} failed (error code {refused.code}); the transaction was {outcome}"
    )
    return error


#: What a :class:`TransformLoop` calls per batch: produce the batch's outputs with the
#: producer (inside the open transaction; await each ``send``'s delivery).
Transform = Callable[[Any, dict[TopicPartition, list[ConsumerRecord]]], Awaitable[None]]


class TransformLoop:
    """Consume-transform-produce, exactly once: a batch per transaction.

    ``consumer`` is a started ``GroupConsumer`` with ``enable_auto_commit=False`` and
    (for inputs written transactionally) ``isolation_level="read_committed"``;
    ``producer`` a started ``AIOKafkaProducer`` with a ``transactional_id``.  Each
    turn of :meth:`run` reads up to ``max_records``, begins a transaction, awaits
    ``transform(producer, batch)``, commits the batch's next offsets with the group
    metadata (KIP-447), awaits every output the transform sent and commits the
    transaction.

    The transform gets the producer wrapped so that the futures of its ``send`` and
    ``send_batch`` calls are kept: it need not await its deliveries (the loop does,
    while the offsets go out), and an output that failed aborts the transaction -
    aiokafka alone would commit without it.

    Rebalances (the consumer's internal hooks, run before the application's listener,
    inside the listener step - heartbeats go on):

    * revoked: no new transaction starts; the one in flight is awaited until it
      commits, for at most ``revoke_timeout_ms``; past that it is cancelled and
      aborted.  Either way, when the revoke listener returns, what the group's
      offsets say is done is exactly what the output holds.
    * lost: the transaction in flight is cancelled and aborted at once (the group
      has already given the partitions away; its commit would be refused).

    A batch that ends without commit (refused as not owned, a zombie's fence, a
    timeout, cancelled by a rebalance) is aborted and its partitions still owned are
    read again from the batch's first offsets.  A fenced *producer* (another one took
    over the transactional id) or an exception from ``transform`` ends :meth:`run`
    with that exception, the transaction aborted.
    """

    def __init__(
        self,
        consumer: GroupConsumer,
        producer: Any,
        transform: Transform,
        *,
        max_records: int = 500,
        poll_timeout_ms: int = 500,
        revoke_timeout_ms: int = 10_000,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if ProducerTxnView(producer).transactional_id is None:
            raise ConfigurationError(
                "TransformLoop: the producer has no transactional_id: create the "
                "AIOKafkaProducer with transactional_id=..."
            )
        if consumer.config.enable_auto_commit:
            raise ConfigurationError(
                "TransformLoop: the consumer has enable_auto_commit=True - its own commits "
                "would move the offsets outside the transactions; create it with "
                "enable_auto_commit=False"
            )
        if consumer.config.group_id is None:
            raise ConfigurationError("TransformLoop: the consumer needs a group_id")
        for name, value in (("max_records", max_records), ("poll_timeout_ms", poll_timeout_ms)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"TransformLoop: {name} must be a positive int, not {value!r}")
        if revoke_timeout_ms < 0 or timeout <= 0:
            raise ValueError("TransformLoop: revoke_timeout_ms >= 0 and timeout > 0 are needed")
        self._consumer = consumer
        self._producer = producer
        self._transform = transform
        self._max_records = max_records
        self._poll_timeout_ms = poll_timeout_ms
        self._revoke_timeout = revoke_timeout_ms / 1000
        self._timeout = timeout
        self._stopping = asyncio.Event()
        #: Clear while a revocation or loss is being settled: no transaction starts.
        self._settled = asyncio.Event()
        self._settled.set()
        self._in_flight: asyncio.Task[None] | None = None
        #: The outcome of the last transaction begun (an in-doubt commit is waited for
        #: before its input is read again or its partitions are let go).
        self._outcome: TransactionOutcome | None = None
        #: The transaction in flight has its offsets in and is committing: a rebalance
        #: must let it finish - cancelling aiokafka's commit does not stop it (the
        #: EndTxn is shielded), so a batch counted as aborted would be redone twice.
        self._committing = False
        #: Partitions revoked or lost since the batch in hand began (no seek back).
        self._moved: set[TopicPartition] = set()
        #: Revoked or lost and not assigned again: records of them still in hand are
        #: dropped (the consumer may list them until the listener step ends).
        self._gone: set[TopicPartition] = set()
        self._running = False
        #: Inputs whose outputs and offsets were committed, transactions committed and
        #: aborted, batches cancelled by a rebalance.
        self.records_committed = 0
        self.transactions_committed = 0
        self.transactions_aborted = 0
        self.cancelled_by_rebalance = 0
        #: Why the last transaction that did not commit was aborted (None: none yet).
        self.last_abort: BaseException | None = None

    async def run(self) -> None:
        """Loop until :meth:`stop` (after the batch in hand) or the consumer stops."""
        if self._running:
            raise IllegalStateError("TransformLoop.run() is already running")
        self._running = True
        hooks = self._consumer._rebalance_hooks
        hooks.add(self)
        try:
            while not self._stopping.is_set():
                try:
                    batch = await self._consumer.getmany(
                        timeout_ms=self._poll_timeout_ms, max_records=self._max_records
                    )
                except ConsumerStoppedError:
                    return  # the consumer stopped: nothing is in flight between batches
                await self._settled.wait()
                owned = self._consumer.assignment()
                batch = {
                    tp: rs
                    for tp, rs in batch.items()
                    if rs and tp in owned and tp not in self._gone
                }
                if batch:
                    await self._one_batch(batch)
        finally:
            hooks.remove(self)
            self._running = False

    async def stop(self) -> None:
        """Ask :meth:`run` to return after the batch in hand (its transaction settled)."""
        self._stopping.set()

    async def _one_batch(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        self._moved = set()
        self._outcome = None
        task = asyncio.ensure_future(self._transaction(batch))
        self._in_flight = task
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait({task})  # its transaction is aborted before this returns
            raise
        finally:
            self._in_flight = None
        outcome = self._outcome
        if outcome is not None and outcome.in_doubt:
            await self._answer_of(outcome)
        if outcome is not None and outcome.committed:
            # Committed, even where the commit's wait was cancelled or timed out: the
            # coordinator completed it; reading the batch again would double its outputs.
            if not task.cancelled():
                task.exception()  # retrieved: the outcome is the answer
            self.records_committed += sum(len(rs) for rs in batch.values())
            self.transactions_committed += 1
            return
        if outcome is not None and outcome.in_doubt:
            return  # stopping with the answer unknown: nothing is read again
        if task.cancelled():
            self.cancelled_by_rebalance += 1
            self._aborted(batch, asyncio.CancelledError("partitions revoked or lost"))
            return
        error = task.exception()
        if error is None:
            self.records_committed += sum(len(rs) for rs in batch.values())
            self.transactions_committed += 1
            return
        self._aborted(batch, error)
        if isinstance(error, CommitFailedError) or (
            isinstance(error, TransactionFencedError) and not error.producer_fenced
        ):
            log.info("a transaction was refused (%s); its input is read again", error)
            return
        if isinstance(error, KafkaTimeoutError):
            log.warning("a transaction timed out (%s); its input is read again", error)
            return
        raise error

    async def _transaction(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        offsets = {tp: rs[-1].offset + 1 for tp, rs in batch.items()}
        self._committing = False
        producer, timeout = self._producer, self._timeout
        async with transaction(producer, timeout=timeout) as self._outcome:
            view, normalized, metadata = _checked(producer, offsets, self._consumer)
            # The offsets first: AddOffsetsToTxn before any output (sent while aiokafka
            # adds the outputs' partitions, the coordinator would answer
            # CONCURRENT_TRANSACTIONS), then TxnOffsetCommit while the transform runs and
            # its outputs fly.  In series after the outputs, the two cost a transaction
            # of 100 records about a third of its time (docs/benchmarks/eos.md).
            await _fenced(
                producer, add_group_to_transaction(view, metadata.group_id), metadata, timeout
            )
            committing = asyncio.ensure_future(
                wait_for(commit_offsets_in_transaction(view, normalized, metadata), timeout)
            )
            try:
                outputs = DeliveryTracker(producer)
                await self._transform(outputs, batch)
                # The outputs leave now (no lingering: nothing more comes); they must be
                # in before the commit (aiokafka would commit past a failed output).
                flushing = view.send_buffered()
                try:
                    await wait_for(outputs.delivered(), timeout)
                finally:
                    flushing.cancel()  # done by now, or the abort settles the batches
            except BaseException as exc:
                # The transaction is aborted: its offsets request ends first, so that it
                # cannot reach the group coordinator after the abort's markers.
                if isinstance(exc, asyncio.CancelledError):
                    committing.cancel()
                await asyncio.wait({committing})  # bounded by its own timeout
                if not committing.cancelled():
                    committing.exception()  # retrieved: the transform's error is the one raised
                raise
            await _fenced(producer, committing, metadata, timeout)
            self._committing = True  # from here on the outcome is the commit's

    async def _answer_of(self, outcome: TransactionOutcome) -> None:
        """Wait for an in-doubt commit's answer before anything of its batch is read
        again (until :meth:`stop`: then the batch is left as it is)."""
        while await outcome.settle(self._timeout) is None:
            if self._stopping.is_set():
                log.warning("stopping with a transaction's commit still in doubt")
                return
            log.warning(
                "a transaction's commit is unanswered after %gs; still waiting for the "
                "coordinator's answer before its input may be read again",
                self._timeout,
            )

    def _aborted(
        self, batch: Mapping[TopicPartition, list[ConsumerRecord]], why: BaseException
    ) -> None:
        """Read again what the aborted transaction covered, where this member still owns it
        and no rebalance moved it meanwhile (a new assignment starts from the group's
        offsets)."""
        self.transactions_aborted += 1
        self.last_abort = why
        owned = self._consumer.assignment()
        for tp, records in batch.items():
            if tp in owned and tp not in self._moved:
                with contextlib.suppress(IllegalStateError):
                    self._consumer.seek(tp, records[0].offset)

    # -- the rebalance hook (aiogroup.listeners.RebalanceHook) ----------------------------

    async def partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Settle the transaction in flight: let it commit, or abort it past the timeout."""
        await self._settle(revoked, self._revoke_timeout)

    async def partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Abort the transaction in flight at once: the group has moved on."""
        await self._settle(lost, 0.0)

    async def partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._gone -= assigned

    async def _settle(self, partitions: set[TopicPartition], grace: float) -> None:
        self._moved |= partitions
        self._gone |= partitions
        self._settled.clear()
        try:
            task = self._in_flight
            if task is None or task.done():
                outcome = self._outcome
                if outcome is not None and outcome.in_doubt:
                    # The group's offsets for these partitions are the commit's answer:
                    # the next owner must not start before it is known.
                    await outcome.settle(self._timeout)
                return
            if grace > 0:
                await asyncio.wait({task}, timeout=grace)
            if not task.done() and self._committing:
                await asyncio.wait({task})  # bounded by the commit's own timeout
            if not task.done():
                log.warning(
                    "partitions %s moved with a transaction in flight; aborting it",
                    sorted(partitions),
                )
                task.cancel()
                await asyncio.wait({task})
        finally:
            self._settled.set()
