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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from aiogroup._support.timeouts import wait_for
from aiogroup._transactions.committer import ProducerTxnView, Refused, commit_in_transaction
from aiogroup._transactions.outcomes import MisuseKind, Step, TxnCode, check_commit_input
from aiogroup.errors import (
    CommitFailedError,
    ConfigurationError,
    IllegalStateError,
    KafkaTimeoutError,
    TransactionFencedError,
    error_for_code,
)
from aiogroup.group_metadata import ConsumerGroupMetadata
from aiogroup.structs import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from aiogroup.consumer import GroupConsumer

__all__ = ["DEFAULT_TIMEOUT_S", "send_offsets_to_transaction", "transaction"]

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
    try:
        await wait_for(commit_in_transaction(view, normalized, metadata), timeout)
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


@asynccontextmanager
async def transaction(producer: Any, *, timeout: float = DEFAULT_TIMEOUT_S) -> AsyncIterator[None]:
    """``async with transaction(producer):`` - begin, then commit, or abort on an exception.

    aiokafka's ``producer.transaction()`` aborts unconditionally on an exception, and
    aborting a transaction that ``send_offsets_to_transaction`` has already aborted
    breaks aiokafka's state machine (it asserts).  This one aborts only a transaction
    still open, so the exception the body raised - ``TransactionFencedError`` above
    all - is the one the caller sees.  Every step is bounded by ``timeout``.
    """
    view = ProducerTxnView(producer)
    if view.transactional_id is None:
        raise ConfigurationError(
            "transaction(): the producer has no transactional_id: create the "
            "AIOKafkaProducer with transactional_id=..."
        )
    await wait_for(producer.begin_transaction(), timeout)
    try:
        yield
    except BaseException:
        if view.abortable:
            await _abort(producer, timeout)
        raise
    await wait_for(producer.commit_transaction(), timeout)


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
