"""What an OffsetCommit or OffsetFetch error code means for its caller, per protocol.

Why here, pure: committing is where a member that lost its generation must be
stopped, and the rule differs by group protocol - a classic member's commit carries
its generation, a consumer-protocol (KIP-848) member's its member epoch, and Java
retries an auto-commit's STALE_MEMBER_EPOCH with the next epoch where it fails an
application's.  One outcome enum and one gate for both; the differences are the
tables below (data), chosen by :class:`CommitProtocol`.

:mod:`aiogroup._coordination.commit_outcome` turns a whole answer into a verdict
from these outcomes; the shells only send, sleep and raise.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from aiogroup._membership.codes import ErrorCode as C

__all__ = [
    "COMMIT_OUTCOMES",
    "OFFSET_FETCH_OUTCOMES",
    "CommitGate",
    "CommitKind",
    "CommitOutcome",
    "CommitProtocol",
    "commit_outcome",
    "offset_fetch_outcome",
]


class CommitProtocol(enum.Enum):
    """Which identity a commit carries: a generation (classic) or a member epoch."""

    CLASSIC = "classic"
    CONSUMER = "consumer"


class CommitKind(enum.Enum):
    #: commit() called by the application.
    USER = "user"
    #: Auto-commit, on the interval or before a revocation.
    AUTO = "auto"


class CommitOutcome(enum.Enum):
    """What a commit()/committed() caller does with an error code."""

    OK = "ok"
    RETRY = "retry after backoff"
    FIND_COORDINATOR_AND_RETRY = "find coordinator and retry"
    #: KIP-848: retry with the member id and epoch the latest heartbeat brought.
    RETRY_WITH_LATEST_EPOCH = "retry with the latest member epoch"
    #: The generation (or epoch) moved on: CommitFailedError (the Java client's contract).
    COMMIT_FAILED = "commit failed"
    #: Not committed before (OffsetFetch of an unknown topic/partition).
    NO_OFFSET = "no committed offset"
    RAISE = "raise"


O = CommitOutcome  # noqa: E741 - short table alias, like C

_COMMIT_COMMON: dict[int, CommitOutcome] = {
    C.NONE: O.OK,
    C.COORDINATOR_LOAD_IN_PROGRESS: O.RETRY,
    C.UNKNOWN_TOPIC_OR_PARTITION: O.RETRY,
    C.REQUEST_TIMED_OUT: O.FIND_COORDINATOR_AND_RETRY,
    C.COORDINATOR_NOT_AVAILABLE: O.FIND_COORDINATOR_AND_RETRY,
    C.NOT_COORDINATOR: O.FIND_COORDINATOR_AND_RETRY,
    C.REBALANCE_IN_PROGRESS: O.COMMIT_FAILED,
    C.ILLEGAL_GENERATION: O.COMMIT_FAILED,
    C.UNKNOWN_MEMBER_ID: O.COMMIT_FAILED,
    C.OFFSET_METADATA_TOO_LARGE: O.RAISE,
    C.INVALID_COMMIT_OFFSET_SIZE: O.RAISE,
    C.TOPIC_AUTHORIZATION_FAILED: O.RAISE,
    C.GROUP_AUTHORIZATION_FAILED: O.RAISE,
}
#: Classic: a fenced static member raises FencedInstanceIdError (Java's contract).
_CLASSIC_COMMIT = {**_COMMIT_COMMON, C.FENCED_INSTANCE_ID: O.RAISE}
#: Consumer protocol: a fenced epoch or instance means the member moved on.
_CONSUMER_COMMIT = {
    **_COMMIT_COMMON,
    C.FENCED_MEMBER_EPOCH: O.COMMIT_FAILED,
    C.FENCED_INSTANCE_ID: O.COMMIT_FAILED,
}

#: (protocol, kind, code) -> outcome; a code not listed raises.
COMMIT_OUTCOMES: Mapping[tuple[CommitProtocol, CommitKind, int], CommitOutcome] = MappingProxyType(
    {
        **{
            (CommitProtocol.CLASSIC, kind, code): out
            for kind in CommitKind
            for code, out in _CLASSIC_COMMIT.items()
        },
        **{
            (CommitProtocol.CONSUMER, kind, code): out
            for kind in CommitKind
            for code, out in _CONSUMER_COMMIT.items()
        },
        # Java: an application commit meeting STALE_MEMBER_EPOCH fails; an
        # auto-commit (also the one before a revocation) retries it.
        (CommitProtocol.CONSUMER, CommitKind.USER, C.STALE_MEMBER_EPOCH): O.COMMIT_FAILED,
        (CommitProtocol.CONSUMER, CommitKind.AUTO, C.STALE_MEMBER_EPOCH): (
            O.RETRY_WITH_LATEST_EPOCH
        ),
    }
)

_FETCH_COMMON: dict[int, CommitOutcome] = {
    C.NONE: O.OK,
    C.COORDINATOR_LOAD_IN_PROGRESS: O.RETRY,
    C.UNSTABLE_OFFSET_COMMIT: O.RETRY,
    C.REQUEST_TIMED_OUT: O.FIND_COORDINATOR_AND_RETRY,
    C.COORDINATOR_NOT_AVAILABLE: O.FIND_COORDINATOR_AND_RETRY,
    C.NOT_COORDINATOR: O.FIND_COORDINATOR_AND_RETRY,
    C.UNKNOWN_TOPIC_OR_PARTITION: O.NO_OFFSET,
    C.GROUP_ID_NOT_FOUND: O.NO_OFFSET,
    C.GROUP_AUTHORIZATION_FAILED: O.RAISE,
    C.TOPIC_AUTHORIZATION_FAILED: O.RAISE,
}
#: (protocol, code) -> outcome.  OffsetFetch v9+ under the consumer protocol carries
#: the member id and epoch: Java retries STALE_MEMBER_EPOCH with the latest epoch
#: while the member has one; UNKNOWN_MEMBER_ID fails the fetch.
OFFSET_FETCH_OUTCOMES: Mapping[tuple[CommitProtocol, int], CommitOutcome] = MappingProxyType(
    {
        **{(CommitProtocol.CLASSIC, code): out for code, out in _FETCH_COMMON.items()},
        **{(CommitProtocol.CONSUMER, code): out for code, out in _FETCH_COMMON.items()},
        (CommitProtocol.CONSUMER, C.STALE_MEMBER_EPOCH): O.RETRY_WITH_LATEST_EPOCH,
        (CommitProtocol.CONSUMER, C.UNKNOWN_MEMBER_ID): O.RAISE,
    }
)


def commit_outcome(
    protocol: CommitProtocol, kind: CommitKind, code: int, *, in_group: bool = True
) -> CommitOutcome:
    """What a committer does with ``code``; a stale epoch is retryable only in the group."""
    out = COMMIT_OUTCOMES.get((protocol, kind, code), O.RAISE)
    if out is O.RETRY_WITH_LATEST_EPOCH and not in_group:
        return O.COMMIT_FAILED
    return out


def offset_fetch_outcome(
    protocol: CommitProtocol, code: int, *, in_group: bool = True
) -> CommitOutcome:
    """What an offset fetcher does with ``code`` (a stale epoch out of the group raises)."""
    out = OFFSET_FETCH_OUTCOMES.get((protocol, code), O.RAISE)
    if out is O.RETRY_WITH_LATEST_EPOCH and not in_group:
        return O.RAISE
    return out


@dataclass(frozen=True, slots=True)
class CommitGate:
    """The machine's answer to "may these offsets be committed now, as whom?".

    ``refusal`` is None when allowed; then ``generation_id`` and ``member_id`` are
    the identity to commit under - under the consumer protocol the member epoch
    stands in the generation's place, as in the OffsetCommit request and in Java's
    group metadata (KIP-447).  ``refusal`` explains why not, naming partitions;
    ``stopped``: refused because the member closed or failed, not for a rebalance.
    """

    generation_id: int
    member_id: str
    refusal: str | None = None
    stopped: bool = False

    @property
    def allowed(self) -> bool:
        return self.refusal is None
