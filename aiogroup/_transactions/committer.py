"""Send a fenced transactional offset commit through aiokafka's transactional producer.

Why not aiokafka's own ``send_offsets_to_transaction``: its TxnOffsetCommit is v0,
which names the group only, so a zombie member's commit is accepted.  What it lacks
is one request version, not a transaction manager, so this module borrows the
producer's: its connection client, its transactional id, producer id and epoch, and
its transaction state.  It sends the two requests of the step itself -
AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit v3+ with the
member's identity to the group coordinator - and then tells aiokafka's transaction
manager that the group's offsets are part of the transaction, which is what makes
``commit_transaction()``/``abort_transaction()`` send EndTxn even when the
transaction produced no record.

aiokafka keeps that state behind underscore names (``_txn_manager``); every access
is in :class:`ProducerTxnView`, so an aiokafka upgrade that moves it breaks here,
loudly, and nowhere else.

Passing conditions (a coordinator moving or loading, the transaction's other requests
still in flight) are retried on the member's one retry policy
(``_membership/backoff.py``, KIP-580): doubling from the producer's
``retry_backoff_ms`` up to 1 s, reset by the first answer that makes progress.  A
fixed 100 ms loop would hammer a coordinator that takes seconds to move.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.producer.transaction_manager import TransactionState

from aiogroup._membership.backoff import Retrying, RetryPolicy
from aiogroup._protocol.group import (
    COORDINATOR_TYPE_GROUP,
    COORDINATOR_TYPE_TRANSACTION,
    FindCoordinatorRequest,
    parse_find_coordinator,
)
from aiogroup._protocol.transactions import (
    AddOffsetsToTxnRequest,
    TxnOffsetCommitRequest,
    parse_add_offsets_to_txn,
    parse_txn_offset_commit,
)
from aiogroup._transactions.outcomes import Step, TxnCode, step_for, worst_step
from aiogroup.errors import TRANSPORT_ERRORS, KafkaError
from aiogroup.group_metadata import ConsumerGroupMetadata
from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "ProducerTxnView",
    "Refused",
    "add_group_to_transaction",
    "commit_in_transaction",
    "commit_offsets_in_transaction",
    "concurrent_pause",
]

log = logging.getLogger("aiogroup.transactions")

#: The first pause before resending when the producer does not say (aiokafka's default
#: ``retry_backoff_ms``); it doubles on each consecutive failure up to 1 s.
DEFAULT_RETRY_BACKOFF_S = 0.1

#: The first pause before resending a request answered CONCURRENT_TRANSACTIONS; it
#: doubles on each such answer in a row, up to the producer's own backoff.  The
#: coordinator is finishing the previous transaction (writing its markers), a matter of
#: a millisecond or two on a local node: waiting ``retry_backoff_ms`` (100 ms) for it
#: would cost a loop that begins its next transaction at once (TransformLoop's first
#: request is AddOffsetsToTxn) a hundred times what it saved.  Java's producer keeps a
#: short fixed backoff for the same answer to AddPartitionsToTxn (KAFKA-5477).
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.002

#: How often :meth:`ProducerTxnView.partitions_added` looks at aiokafka's pending adds:
#: well under one local round trip (about 1 ms), so the wait adds little to it.
PARTITIONS_ADDED_POLL_S = 0.0005


#: Per producer client, the coordinators found so far: (key, key type) -> node id.  A
#: transaction per batch would otherwise pay two FindCoordinator round trips each time
#: (librdkafka and Java keep them too); a NOT_COORDINATOR answer or a transport error
#: drops the entry.
_COORDINATORS: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], int]] = (
    weakref.WeakKeyDictionary()
)


class Refused(Exception):
    """The broker's final answer was not success: ``step`` says what kind, ``code`` which."""

    def __init__(self, api: str, step: Step, code: int) -> None:
        super().__init__(api, step, code)
        self.api = api
        self.step = step
        self.code = code


class ProducerTxnView:
    """The parts of an ``AIOKafkaProducer`` a fenced commit needs, read in one place."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer
        self._txn = getattr(producer, "_txn_manager", None)

    @property
    def transactional_id(self) -> str | None:
        return None if self._txn is None else self._txn.transactional_id

    @property
    def in_transaction(self) -> bool:
        return self._txn is not None and bool(self._txn.is_in_transaction())

    @property
    def abortable(self) -> bool:
        """A transaction is open, or failed and waits for its abort: ``abort`` is valid."""
        if self._txn is None:
            return False
        return self._txn.state in (
            TransactionState.IN_TRANSACTION,
            TransactionState.ABORTABLE_ERROR,
        )

    def transaction_end(self) -> asyncio.Future[None] | None:
        """aiokafka's future for the end of the transaction now open (None: no producer).

        It resolves when the coordinator answers the commit (or abort) and fails when the
        commit is refused.  aiokafka sends EndTxn from its sender task and sends it again
        to a new coordinator on its own: once sent it cannot be recalled, so a caller that
        stopped waiting for ``commit_transaction`` learns the outcome from this future.
        Taken right after ``begin_transaction`` - aiokafka replaces it for an abort.
        """
        waiter = getattr(self._txn, "wait_for_transaction_end", None)
        end = None if waiter is None else waiter()
        return end if isinstance(end, asyncio.Future) else None

    @property
    def ending(self) -> bool:
        """A commit or abort was sent and is not answered yet (EndTxn in flight)."""
        return self._txn is not None and self._txn.state in (
            TransactionState.COMMITTING_TRANSACTION,
            TransactionState.ABORTING_TRANSACTION,
        )

    @property
    def producer_id(self) -> int:
        assert self._txn is not None
        return int(self._txn.producer_id)

    @property
    def producer_epoch(self) -> int:
        assert self._txn is not None
        return int(self._txn.producer_epoch)

    @property
    def retry_policy(self) -> RetryPolicy:
        """The producer's ``retry_backoff_ms`` as the shared policy (KIP-580)."""
        backoff = getattr(self._producer.client, "_retry_backoff", None)
        if not isinstance(backoff, int | float) or backoff <= 0:
            backoff = DEFAULT_RETRY_BACKOFF_S
        return RetryPolicy.from_backoff(float(backoff))

    @property
    def client(self) -> AIOKafkaClient:
        client: AIOKafkaClient = self._producer.client
        return client

    async def partitions_added(self) -> None:
        """Return once aiokafka has added every partition produced to so far to the transaction.

        Why: AddOffsetsToTxn is the transaction coordinator's add-partitions step for the
        group's offsets partition; sent while aiokafka's own AddPartitionsToTxn is being
        applied, the coordinator answers CONCURRENT_TRANSACTIONS and both sides back off
        (measured at B=100 on Kafka 4.4: 19 transactions/s against 51 in order).
        aiokafka signals nothing when an add completes, so this polls its pending set
        every :data:`PARTITIONS_ADDED_POLL_S`; a failed transaction clears the set, and
        the caller's deadline bounds the wait.
        """
        # aiokafka has no event for a completed add (see above): polling is the only way.
        while self._txn is not None and self._txn.partitions_to_add():  # noqa: ASYNC110
            await asyncio.sleep(PARTITIONS_ADDED_POLL_S)

    def send_buffered(self) -> asyncio.Future[None]:
        """Close the batches the producer is lingering on and wake its sender; the returned
        future ends when they are delivered (or failed: their own futures say which).

        Why: a transform that is done sending gains nothing from ``linger_ms`` - no more
        records are coming to this transaction - and aiokafka only stops lingering inside
        ``commit_transaction()``, after the offsets.  Closed now, the Produce goes out
        while the offsets do (librdkafka's commit flushes the same way).
        """
        accumulator = getattr(self._producer, "_message_accumulator", None)
        if accumulator is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        flushing: asyncio.Future[None] = asyncio.ensure_future(accumulator.flush_for_commit())
        return flushing

    def group_joined_transaction(self, group_id: str) -> None:
        """Tell aiokafka the group's offsets are in the transaction: EndTxn must go out."""
        assert self._txn is not None
        self._txn.consumer_group_added(group_id)


async def commit_in_transaction(
    view: ProducerTxnView,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    metadata: ConsumerGroupMetadata,
) -> None:
    """AddOffsetsToTxn, then TxnOffsetCommit under ``metadata``; raises :class:`Refused`.

    Retries what passes (a coordinator moving or loading, the transaction's other
    requests in flight) without bound: the caller bounds the whole with a deadline.
    """
    await add_group_to_transaction(view, metadata.group_id)
    await commit_offsets_in_transaction(view, offsets, metadata)


async def add_group_to_transaction(view: ProducerTxnView, group_id: str) -> None:
    """AddOffsetsToTxn: the group's offsets partition joins the open transaction.

    Waits first for aiokafka's own AddPartitionsToTxn in flight (see
    :meth:`ProducerTxnView.partitions_added`).  A caller that sends this before any
    output - :class:`aiogroup.transactions.TransformLoop` does - finds none in flight,
    and the TxnOffsetCommit that follows can fly while the outputs are produced.
    """
    transactional_id = view.transactional_id
    assert transactional_id is not None

    def add_offsets() -> AddOffsetsToTxnRequest:
        return AddOffsetsToTxnRequest(
            transactional_id, view.producer_id, view.producer_epoch, group_id
        )

    def add_offsets_answer(resp: Any) -> tuple[Step, int]:
        code = parse_add_offsets_to_txn(resp)
        return step_for(code), code

    await view.partitions_added()
    await _exchange(
        view.client,
        view.retry_policy,
        "AddOffsetsToTxn",
        (transactional_id, COORDINATOR_TYPE_TRANSACTION),
        add_offsets,
        add_offsets_answer,
    )
    view.group_joined_transaction(group_id)


async def commit_offsets_in_transaction(
    view: ProducerTxnView,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    metadata: ConsumerGroupMetadata,
) -> None:
    """TxnOffsetCommit v3+ under ``metadata``, after :func:`add_group_to_transaction`."""
    transactional_id = view.transactional_id
    assert transactional_id is not None

    def commit() -> TxnOffsetCommitRequest:
        return TxnOffsetCommitRequest(
            transactional_id,
            view.producer_id,
            view.producer_epoch,
            metadata.group_id,
            metadata.generation_id,
            metadata.member_id,
            metadata.group_instance_id,
            offsets,
        )

    def commit_answer(resp: Any) -> tuple[Step, int]:
        return worst_step(list(parse_txn_offset_commit(resp).values()))

    await _exchange(
        view.client,
        view.retry_policy,
        "TxnOffsetCommit",
        (metadata.group_id, COORDINATOR_TYPE_GROUP),
        commit,
        commit_answer,
    )
    log.debug(
        "transaction %s: offsets of %d partitions committed for group %s "
        "(generation/epoch %d, member %s)",
        transactional_id,
        len(offsets),
        metadata.group_id,
        metadata.generation_id,
        metadata.member_id,
    )


async def _exchange(
    client: AIOKafkaClient,
    policy: RetryPolicy,
    api: str,
    coordinator: tuple[str, int],
    build: Callable[[], Any],
    judge: Callable[[Any], tuple[Step, int]],
) -> None:
    """Send ``build()`` to ``coordinator``'s node until the answer is final.

    Every failure that passes (no coordinator known, a transport error, a retriable
    code) waits by ``policy`` before the next try; ``policy.attempts`` is ignored:
    the caller's deadline bounds the whole.
    """
    loop = asyncio.get_running_loop()
    retry = Retrying(RetryPolicy(policy.initial, policy.maximum, policy.multiplier))
    known = _COORDINATORS.setdefault(client, {})
    node: int | None = known.get(coordinator)
    concurrent = 0  # CONCURRENT_TRANSACTIONS answers in a row

    async def back_off() -> None:
        retry.failed(loop.time())
        assert retry.due_at is not None
        await asyncio.sleep(max(0.0, retry.due_at - loop.time()))

    while True:
        if node is None:
            node = await _find_coordinator(client, *coordinator)
            if node is None:
                await back_off()
                continue
            known[coordinator] = node
        retry.sent()
        try:
            resp = await client.send(node, build(), group=ConnectionGroup.COORDINATION)
        except TRANSPORT_ERRORS as exc:
            log.debug("%s to node %d failed: %r; looking the coordinator up again", api, node, exc)
            known.pop(coordinator, None)
            node = None
            await back_off()
            continue
        step, code = judge(resp)
        if step is Step.DONE:
            retry.succeeded()
            return
        if step is Step.FIND_COORDINATOR:
            known.pop(coordinator, None)
            node = None
        if code == TxnCode.CONCURRENT_TRANSACTIONS:
            concurrent += 1
            pause = concurrent_pause(policy, concurrent)
            log.debug("%s answered CONCURRENT_TRANSACTIONS; retrying in %.3fs", api, pause)
            await asyncio.sleep(pause)
            continue
        concurrent = 0
        if step in (Step.FIND_COORDINATOR, Step.RETRY):
            log.debug(
                "%s answered error code %d; retrying in %.2fs",
                api,
                code,
                policy.delay(retry.failures + 1),
            )
            await back_off()
            continue
        raise Refused(api, step, code)


def concurrent_pause(policy: RetryPolicy, in_a_row: int) -> float:
    """The wait before resending after the ``in_a_row``-th CONCURRENT_TRANSACTIONS answer
    in a row: :data:`CONCURRENT_TRANSACTIONS_BACKOFF_S`, doubling, never above the
    producer's own first backoff."""
    return min(policy.initial, CONCURRENT_TRANSACTIONS_BACKOFF_S * 2.0 ** min(in_a_row - 1, 16))


async def _find_coordinator(client: AIOKafkaClient, key: str, key_type: int) -> int | None:
    """The coordinator's node for ``key`` (None: not now - the caller backs off)."""
    node = client.get_random_node()
    if node is None:
        return None
    try:
        request = FindCoordinatorRequest(key, key_type)
        result = parse_find_coordinator(await client.send(node, request))
    except (KafkaError, OSError) as exc:
        log.debug("FindCoordinator(%s) failed: %r", key, exc)
        return None
    if result.error_code != 0:
        log.debug("FindCoordinator(%s) answered error code %d", key, result.error_code)
        return None
    return result.node_id
