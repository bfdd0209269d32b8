"""What an OffsetCommit or OffsetFetch answer means for the caller: a pure function.

Both group protocols classify each error code with the tables of
:mod:`aiogroup._membership.commit_outcomes`; this module turns
a whole answer into one :class:`Verdict` - done, retry after the backoff, retry
with the epoch the next heartbeat brings, or fail with a named error - plus
whether the coordinator moved (the machine is told, it finds the coordinator
again).  The performer (:mod:`aiogroup._coordination.commit_client`) only sends,
sleeps and raises, so every decision here is unit-tested without a broker.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiogroup._membership.codes import code_name
from aiogroup._membership.commit_outcomes import (
    CommitKind,
    CommitOutcome,
    CommitProtocol,
    commit_outcome,
    offset_fetch_outcome,
)
from aiogroup._protocol.results import OffsetCommitResult, OffsetFetchResult
from aiogroup.errors import CommitFailedError, error_for_code
from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "CommitRules",
    "Next",
    "Verdict",
    "commit_verdict",
    "fetch_verdict",
    "positions_to_commit",
]


class Next(enum.Enum):
    """What the caller does after an answer."""

    DONE = "done"
    RETRY = "retry after the backoff"
    #: KIP-848: STALE_MEMBER_EPOCH - retried once the next heartbeat brought the epoch.
    RETRY_WITH_LATEST_EPOCH = "retry with the latest member epoch"
    FAIL = "raise to the caller"


def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class CommitRules:
    """How one member classifies commit and fetch answers: its protocol's tables.

    ``kind``: the application's commit or an auto-commit (they differ on a stale
    member epoch); ``in_group`` is asked at each answer, since a retried commit may
    outlive the membership it started under.  ``rebalanced`` is the
    CommitFailedError text, formatted with ``tp`` and ``code``.
    """

    protocol: CommitProtocol
    rebalanced: str
    kind: CommitKind = CommitKind.USER
    in_group: Callable[[], bool] = _always

    def commit(self, code: int) -> CommitOutcome:
        return commit_outcome(self.protocol, self.kind, code, in_group=self.in_group())

    def fetch(self, code: int) -> CommitOutcome:
        return offset_fetch_outcome(self.protocol, code, in_group=self.in_group())


@dataclass(frozen=True, slots=True)
class Verdict:
    next: Next
    #: The coordinator moved or is unavailable: tell the machine before retrying.
    coordinator_moved: bool = False
    #: With ``Next.FAIL``: what the caller raises.
    error: Exception | None = None
    #: OffsetFetch with ``Next.DONE``: each asked partition's committed offset (None: none).
    offsets: dict[TopicPartition, OffsetAndMetadata | None] = field(default_factory=dict)


def commit_verdict(result: OffsetCommitResult, rules: CommitRules) -> Verdict:
    """An OffsetCommit answer -> done / retry / fail (the first failing partition, in order)."""
    retry: Next | None = None
    moved = False
    for (topic, partition), code in sorted(result.errors.items()):
        outcome = rules.commit(code)
        tp = TopicPartition(topic, partition)
        if outcome is CommitOutcome.OK:
            continue
        if outcome is CommitOutcome.COMMIT_FAILED:
            text = rules.rebalanced.format(tp=tp, code=code_name(code))
            return Verdict(Next.FAIL, moved, CommitFailedError(text))
        if outcome in (CommitOutcome.RAISE, CommitOutcome.NO_OFFSET):
            error = error_for_code(code)(f"OffsetCommit of {tp}: {code_name(code)}")
            return Verdict(Next.FAIL, moved, error)
        if outcome is CommitOutcome.RETRY_WITH_LATEST_EPOCH:
            retry = Next.RETRY_WITH_LATEST_EPOCH
        else:
            moved = moved or outcome is CommitOutcome.FIND_COORDINATOR_AND_RETRY
            retry = retry or Next.RETRY
    return Verdict(retry or Next.DONE, moved)


def fetch_verdict(
    result: OffsetFetchResult,
    partitions: Sequence[TopicPartition],
    group_id: str,
    rules: CommitRules,
) -> Verdict:
    """An OffsetFetch answer -> the committed offsets, or retry / fail.

    A code that cannot be retried fails the whole fetch (first in answer order,
    the group-level code first); any retriable one retries it all.
    """
    codes = [result.error_code] + [row[3] for row in result.partitions.values()]
    outcomes = [rules.fetch(code) for code in codes]
    if CommitOutcome.RAISE in outcomes:
        bad = codes[outcomes.index(CommitOutcome.RAISE)]
        return Verdict(Next.FAIL, error=error_for_code(bad)(f"OffsetFetch for group {group_id}"))
    moved = CommitOutcome.FIND_COORDINATOR_AND_RETRY in outcomes
    if moved or {CommitOutcome.RETRY, CommitOutcome.RETRY_WITH_LATEST_EPOCH} & set(outcomes):
        return Verdict(Next.RETRY, moved)
    found: dict[TopicPartition, OffsetAndMetadata | None] = {}
    for tp in partitions:
        row = result.partitions.get((tp.topic, tp.partition))
        if row is None or row[0] < 0 or row[3] != 0:
            found[tp] = None  # never committed (or its topic is gone: NO_OFFSET)
        else:
            found[tp] = OffsetAndMetadata(row[0], row[2] or "")
    return Verdict(Next.DONE, offsets=found)


class _Position(Protocol):
    @property
    def tp(self) -> TopicPartition: ...
    @property
    def revoking(self) -> bool: ...
    @property
    def has_valid_position(self) -> bool: ...
    @property
    def position(self) -> int | None: ...


def positions_to_commit(
    states: Iterable[_Position],
    partitions: Iterable[TopicPartition] | None,
    *,
    revoking: bool,
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The one rule for what a commit without offsets commits: the consumed positions
    of ``partitions`` (None: every assigned partition) that have one.

    ``revoking``: include partitions whose revocation has begun.  The application's
    ``commit()`` does (Java's ``commitSync()`` commits every consumed position, and a
    revoke listener commits the partitions it is handed that way); the interval
    auto-commit does not - the commit before the revocation (``commit_first``) is
    theirs, made with the positions the revoke step saw.  Named partitions are
    committed whatever their state.
    """
    wanted = None if partitions is None else frozenset(partitions)
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for st in states:
        if wanted is None and st.revoking and not revoking:
            continue
        if wanted is not None and st.tp not in wanted:
            continue
        if st.has_valid_position and st.position is not None:
            offsets[st.tp] = OffsetAndMetadata(st.position, "")
    return offsets
