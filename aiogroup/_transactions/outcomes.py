"""What a transactional offset commit may be asked, and what each broker answer means.

Pure: no I/O, no aiokafka state, so every rule is a unit test.  The committer
(:mod:`aiogroup._transactions.committer`) performs the requests and follows the
:class:`Step` these functions return.

The answers are grouped by what the caller must do, not by API: find the
coordinator again, retry after a backoff, give up because this sender is a zombie
(the group replaced the member, or another producer took the transactional id), or
give up for another reason.  Codes and their meaning follow Apache Kafka's message
specs and its producer's handling of AddOffsetsToTxn and TxnOffsetCommit answers.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "FENCED_MEMBER_CODES",
    "FENCED_PRODUCER_CODES",
    "Misuse",
    "MisuseKind",
    "Step",
    "TxnCode",
    "check_commit_input",
    "step_for",
    "worst_step",
]


class TxnCode(enum.IntEnum):
    """The error codes the two transaction APIs answer that the committer tells apart."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    UNKNOWN_MEMBER_ID = 25
    INVALID_PRODUCER_EPOCH = 47
    CONCURRENT_TRANSACTIONS = 51
    FENCED_INSTANCE_ID = 82
    PRODUCER_FENCED = 90
    FENCED_MEMBER_EPOCH = 110
    STALE_MEMBER_EPOCH = 113


class Step(enum.Enum):
    """What the committer does after an answer."""

    DONE = "done"
    #: The coordinator moved or is unreachable: look it up again, then resend.
    FIND_COORDINATOR = "find-coordinator"
    #: A passing condition (loading, another request of the same transaction in flight).
    RETRY = "retry"
    #: The group replaced the member whose identity the commit carries (KIP-447).
    FENCED_MEMBER = "fenced-member"
    #: Another producer holds the transactional id now (a newer epoch).
    FENCED_PRODUCER = "fenced-producer"
    #: Anything else: the transaction cannot carry these offsets.
    FAIL = "fail"


#: A member the group has replaced: a stale generation or epoch, an unknown member id,
#: or a static member whose instance id another process has taken over.
FENCED_MEMBER_CODES = frozenset(
    {
        TxnCode.ILLEGAL_GENERATION,
        TxnCode.UNKNOWN_MEMBER_ID,
        TxnCode.FENCED_INSTANCE_ID,
        TxnCode.FENCED_MEMBER_EPOCH,
        TxnCode.STALE_MEMBER_EPOCH,
    }
)
#: A producer whose transactional id has a newer epoch (another instance started).
FENCED_PRODUCER_CODES = frozenset({TxnCode.INVALID_PRODUCER_EPOCH, TxnCode.PRODUCER_FENCED})
_FIND_AGAIN = frozenset(
    {TxnCode.NOT_COORDINATOR, TxnCode.COORDINATOR_NOT_AVAILABLE, TxnCode.REQUEST_TIMED_OUT}
)
_PASSING = frozenset(
    {
        TxnCode.COORDINATOR_LOAD_IN_PROGRESS,
        TxnCode.CONCURRENT_TRANSACTIONS,
        TxnCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)

#: When an answer mixes outcomes, the one that decides: a fence beats a retry.
_PRECEDENCE = (
    Step.FENCED_PRODUCER,
    Step.FENCED_MEMBER,
    Step.FAIL,
    Step.FIND_COORDINATOR,
    Step.RETRY,
    Step.DONE,
)


def step_for(code: int) -> Step:
    """What one error code (AddOffsetsToTxn's, or one partition's of TxnOffsetCommit) means."""
    if code == TxnCode.NONE:
        return Step.DONE
    if code in FENCED_MEMBER_CODES:
        return Step.FENCED_MEMBER
    if code in FENCED_PRODUCER_CODES:
        return Step.FENCED_PRODUCER
    if code in _FIND_AGAIN:
        return Step.FIND_COORDINATOR
    if code in _PASSING:
        return Step.RETRY
    return Step.FAIL


def worst_step(codes: Collection[int]) -> tuple[Step, int]:
    """The deciding step of a TxnOffsetCommit answer (one code per partition) and its code.

    An empty answer is a failure: the broker must answer every partition sent.
    """
    if not codes:
        return Step.FAIL, -1
    steps = [(step_for(code), code) for code in codes]
    return min(steps, key=lambda pair: _PRECEDENCE.index(pair[0]))


class MisuseKind(enum.Enum):
    """Which error a misuse raises: the caller's answer differs for each."""

    #: Fix the program: the producer or consumer is set up wrong.
    CONFIGURATION = "configuration"
    #: Call order: no transaction open, nothing to commit.
    STATE = "state"
    #: The partitions moved to another member: redo the batch from the committed offsets
    #: (the consumer's CommitFailedError, as ``commit()`` raises for the same case).
    NOT_OWNED = "not-owned"


@dataclass(frozen=True, slots=True)
class Misuse:
    kind: MisuseKind
    message: str


def check_commit_input(
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    *,
    transactional_id: str | None,
    in_transaction: bool,
    owned: Collection[TopicPartition] | None,
    auto_commit: bool,
) -> Misuse | None:
    """Why these offsets cannot be sent to the transaction (None: they can).

    ``owned``: the partitions the consumer owns now, or None when only its metadata
    was given (then the coordinator is the only judge of ownership).  ``auto_commit``:
    the consumer commits on its own as well - those commits, outside the
    transaction, would move the group past records whose output is later aborted.
    """
    if transactional_id is None:
        return Misuse(
            MisuseKind.CONFIGURATION,
            "the producer has no transactional_id: create the AIOKafkaProducer with "
            "transactional_id=... to commit offsets inside its transactions",
        )
    if auto_commit:
        return Misuse(
            MisuseKind.CONFIGURATION,
            "the consumer has enable_auto_commit=True: its own commits, outside the "
            "transaction, would mark input as done whose output may still be aborted - "
            "create it with enable_auto_commit=False",
        )
    if not in_transaction:
        return Misuse(
            MisuseKind.STATE, "no transaction is open: await producer.begin_transaction() first"
        )
    if not offsets:
        return Misuse(MisuseKind.STATE, "no offsets to commit")
    if owned is not None:
        foreign = sorted(set(offsets) - set(owned))
        if foreign:
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in foreign)
            return Misuse(
                MisuseKind.NOT_OWNED, f"offsets of partitions this member does not own: {names}"
            )
    return None
