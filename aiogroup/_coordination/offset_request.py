"""One OffsetCommit or OffsetFetch across all its tries: what follows each try, decided purely.

:mod:`aiogroup._coordination.commit_outcome` says what one answer means (a
:class:`~aiogroup._coordination.commit_outcome.Verdict`).  Whether and when to try
again is a question about the whole operation - how many tries have failed in a
row, how long the next wait is, which error the caller gets and what it names -
and it is answered here, by a small pure object the commit client asks after each
try.  The client then only performs the :data:`Step` it is handed: it sends, waits
the delay it is told, awaits the next member epoch, returns or raises.  So the
backoff (KIP-580's doubling from ``retry.backoff.ms`` up to ``retry.backoff.max.ms``)
and every error mapping are unit-tested as data, without a clock or a broker.

There is no limit on tries: a commit or fetch is bounded by its caller's timeout
(``commit(timeout=…)``, ``request_timeout_ms`` for the member's own lookups) and by
the routine ending, as Java's ``commitSync(Duration)`` is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aiogroup._coordination.commit_outcome import Next, Verdict
from aiogroup._membership.backoff import RetryPolicy
from aiogroup.errors import authorization_error, is_authorization_error
from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = ["AwaitEpoch", "Backoff", "Done", "Fail", "OffsetRequest", "Step"]


@dataclass(frozen=True, slots=True)
class Done:
    """The request succeeded (for an OffsetFetch: each asked partition's offset)."""

    offsets: dict[TopicPartition, OffsetAndMetadata | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Fail:
    """Raise ``error`` to the caller; nothing is tried again."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Backoff:
    """Try again after ``delay`` seconds."""

    delay: float


@dataclass(frozen=True, slots=True)
class AwaitEpoch:
    """Try again with the member epoch the next heartbeat brings (KIP-848's
    STALE_MEMBER_EPOCH; a classic member's port waits one backoff instead)."""


Step = Done | Fail | Backoff | AwaitEpoch


class OffsetRequest:
    """The tries of one OffsetCommit (``api="OffsetCommit"``) or OffsetFetch.

    ``topics`` are the ones the request is about: an authorization refusal names
    them and the group, and the missing ACL (issue 30: never a bare code).
    """

    __slots__ = ("api", "failures", "group_id", "policy", "topics")

    def __init__(self, api: str, group_id: str, topics: Iterable[str], policy: RetryPolicy) -> None:
        self.api = api
        self.group_id = group_id
        self.topics = frozenset(topics)
        self.policy = policy
        #: Tries in a row that failed and were not waits for a newer epoch.
        self.failures = 0

    def answered(self, verdict: Verdict) -> Step:
        """The coordinator answered; ``verdict`` is what the answer means."""
        if verdict.next is Next.DONE:
            return Done(verdict.offsets)
        if verdict.next is Next.FAIL:
            assert verdict.error is not None, "a failing verdict carries its error"
            return Fail(self._named(verdict.error))
        if verdict.next is Next.RETRY_WITH_LATEST_EPOCH:
            return AwaitEpoch()  # not a failure of the coordinator: no backoff growth
        return self._again()

    def unanswered(self) -> Step:
        """The request got no answer (connection lost, timed out)."""
        return self._again()

    def _again(self) -> Step:
        self.failures += 1
        return Backoff(self.policy.delay(self.failures))

    def _named(self, error: Exception) -> Exception:
        if not is_authorization_error(error):
            return error
        named: Exception = authorization_error(
            getattr(error, "errno", 0),
            group_id=self.group_id,
            topics=self.topics,
            during=self.api,
        )
        named.__cause__ = error
        return named
