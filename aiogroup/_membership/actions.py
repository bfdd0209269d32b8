"""Outputs of the membership machines: imperative instructions the shell performs.

One vocabulary for every group protocol: finding the coordinator, running a
rebalance callback, installing an assignment, raising to the application, backing
off and warning are the same instructions whichever protocol decided them, so the
routine performs them in one way.  A protocol's own requests are named after their
API (``SendJoinGroup``, ``SendConsumerGroupHeartbeat``).

The shell executes them in list order; order matters (``MarkRevoking`` must run
before the listener it precedes is started).

Partitions travel as ``(topic, partition)`` pairs (:data:`Partition`): aiokafka's
TopicPartition is one, and the consumer-protocol machine, which may not import
aiokafka, builds plain pairs; the shell hands the application TopicPartitions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiogroup._membership.events import Listener
from aiogroup._protocol.results import JoinGroupMember

if TYPE_CHECKING:
    from aiogroup.structs import TopicPartition

#: A partition by topic name; equal to (and hashed like) aiokafka's TopicPartition.
Partition = tuple[str, int]

__all__ = [
    "AbandonJoin",
    "Action",
    "AutoCommit",
    "Backoff",
    "CancelListener",
    "ComputeAssignment",
    "DropAcquiredRecords",
    "FindCoordinator",
    "InvokeOnPartitionsAssigned",
    "InvokeOnPartitionsLost",
    "InvokeOnPartitionsRevoked",
    "LogWarning",
    "LookupMissingTopics",
    "LookupSessionTimeout",
    "MarkRevoking",
    "Partition",
    "RaiseToApplication",
    "RefreshCommittedOffsets",
    "RequestMetadata",
    "SendConsumerGroupHeartbeat",
    "SendHeartbeat",
    "SendJoinGroup",
    "SendLeaveGroup",
    "SendShareGroupHeartbeat",
    "SendSyncGroup",
    "SetAssignment",
]


@dataclass(frozen=True, slots=True)
class Action:
    """Base class, only so that lists can be typed."""


@dataclass(frozen=True, slots=True)
class FindCoordinator(Action):
    reason: str


@dataclass(frozen=True, slots=True)
class SendJoinGroup(Action):
    """Join (or rejoin); ``owned_partitions`` go into the subscription metadata (KIP-429).

    ``timeout``: how long to wait for the answer (seconds; None: the client's request
    timeout).  A broker may hold a JoinGroup until every member of the last generation
    has rejoined - up to the rebalance timeout - so this is the machine's decision, not
    the connection's default (see ``machine.JOIN_GROUP_TIMEOUT_LAPSE``).  Left out of
    equality: it is configuration, not what the action does.

    ``generation_id`` is the member's current generation (what a failure of this
    request is matched against); ``owned_generation`` is the generation of
    ``owned_partitions`` - the last one whose SyncGroup succeeded, -1 if none - and is
    what the subscription metadata carries (KIP-792).  They differ after a refused
    SyncGroup: the JoinGroup answer moved ``generation_id`` on, but no assignment came
    with it (see ``Membership.owned_generation``).  Left out of equality so that the
    scripted runs compare the request itself; tests of the rule read it directly.
    """

    reason: str
    member_id: str
    generation_id: int
    owned_partitions: frozenset[TopicPartition]
    timeout: float | None = field(default=None, compare=False)
    owned_generation: int = field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class AbandonJoin(Action):
    """Give up the JoinGroup in flight (the consumer is closing): its answer, if one
    still comes, is void.  ``leave``: (coordinator node, member id) to send LeaveGroup
    for once the routine ended - on a connection of its own, since the coordinator's
    may still hold the JoinGroup - or None (no member id yet, or a static member)."""

    leave: tuple[int, str] | None


@dataclass(frozen=True, slots=True)
class ComputeAssignment(Action):
    """We lead this generation: run the assignor over the members and report back."""

    generation_id: int
    protocol_name: str
    members: tuple[JoinGroupMember, ...]


@dataclass(frozen=True, slots=True)
class SendSyncGroup(Action):
    generation_id: int
    member_id: str
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class SendHeartbeat(Action):
    generation_id: int
    member_id: str


@dataclass(frozen=True, slots=True)
class SendConsumerGroupHeartbeat(Action):
    """One ConsumerGroupHeartbeat (KIP-848); None in an optional field means "unchanged"."""

    member_id: str
    member_epoch: int
    instance_id: str | None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: dict[uuid.UUID, tuple[int, ...]] | None = None


@dataclass(frozen=True, slots=True)
class SendShareGroupHeartbeat(Action):
    """One ShareGroupHeartbeat (KIP-932): epoch 0 joins, -1 leaves; ``None`` topics
    means "unchanged since the last heartbeat"."""

    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class DropAcquiredRecords(Action):
    """Share groups: the membership is gone (fenced, failed, left), so the broker has
    released every record this member held; forget them all, hand none of them out,
    and open fresh share sessions (epoch 0) when fetching again."""

    reason: str


@dataclass(frozen=True, slots=True)
class RequestMetadata(Action):
    """Some assigned topic ids have no name yet: refresh metadata, feed TopicNamesResolved."""

    topic_ids: frozenset[uuid.UUID]


@dataclass(frozen=True, slots=True)
class LookupSessionTimeout(Action):
    """Ask a broker for the group's session timeout (DescribeConfigs, KIP-848): feed
    SessionTimeoutLearned or SessionTimeoutLookupFailed."""


@dataclass(frozen=True, slots=True)
class SendLeaveGroup(Action):
    member_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class MarkRevoking(Action):
    """Stop delivering these partitions' records now: their callback is about to start."""

    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class InvokeOnPartitionsRevoked(Action):
    """Run on_partitions_revoked; when ``commit_first``, auto-commit their positions before."""

    partitions: frozenset[Partition]
    commit_first: bool


@dataclass(frozen=True, slots=True)
class InvokeOnPartitionsAssigned(Action):
    """Run on_partitions_assigned with the *newly added* partitions (maybe none).

    ``generation_id``: the generation they were assigned in (the member epoch under
    the consumer protocol), for the log line.
    """

    partitions: frozenset[Partition]
    generation_id: int


@dataclass(frozen=True, slots=True)
class InvokeOnPartitionsLost(Action):
    partitions: frozenset[Partition]


@dataclass(frozen=True, slots=True)
class CancelListener(Action):
    """The running listener overran the rebalance timeout; cancel it."""

    kind: Listener
    reason: str


@dataclass(frozen=True, slots=True)
class SetAssignment(Action):
    """Install this assignment on the subscription state (None: no assignment at all).

    Performed before the listener that follows, so the fetcher serves exactly these.
    """

    partitions: frozenset[Partition] | None


@dataclass(frozen=True, slots=True)
class AutoCommit(Action):
    """Commit the positions of every assigned, positioned partition."""

    reason: str


@dataclass(frozen=True, slots=True)
class LookupMissingTopics(Action):
    """Classic: ask for metadata again, then feed SubscribedTopicsMissing with those of
    ``topics`` it still does not show."""

    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class RefreshCommittedOffsets(Action):
    """Look up again the committed offsets that assigned partitions wait for: the last
    lookup failed (CommittedOffsetsUnavailable) and its backoff has passed."""


@dataclass(frozen=True, slots=True)
class Backoff(Action):
    """Informational: the machine will not retry before ``seconds`` have passed."""

    seconds: float
    reason: str


@dataclass(frozen=True, slots=True)
class RaiseToApplication(Action):
    """Hand an error to the application's next getone/getmany.

    Either a Kafka ``error_code`` (the shell maps it to the exception class) or an
    ``exception`` object from a listener or peer data.  ``fatal`` means the member
    stopped for good (FATAL state).
    """

    message: str
    error_code: int | None = None
    exception: BaseException | None = None
    fatal: bool = False


@dataclass(frozen=True, slots=True)
class LogWarning(Action):
    """Tell the operator something the application did cost (or restored) membership.

    Informational, like ``Backoff``: a WARNING line, nothing else happens.
    """

    message: str
