"""Inputs to the membership machines: things that *happened*, named in the past tense.

One vocabulary for every group protocol.  The events of a member's life - the
timer, the application's polls, its listeners ending, a close, a broker too old, a
crash of the routine, a coordinator found or not - are the same events whichever
protocol the member speaks, so both machines (classic and the consumer protocol,
KIP-848) take these very classes and the routine builds them without knowing which
machine it drives.  A protocol's own wire answers are named after their API
(``JoinGroupResponseReceived``, ``ConsumerGroupHeartbeatResponseReceived``); each
machine's transition table says which events it accepts.

Each event is a frozen, slotted dataclass.  Responses carry the generation their
request was sent under so the machine can drop a reply that arrives after the
member moved on (a heartbeat answered after a rejoin must not touch the new
generation).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from aiogroup._protocol.results import (
    HeartbeatResult,
    JoinGroupResult,
    LeaveGroupResult,
    OffsetCommitResult,
    SyncGroupResult,
)

if TYPE_CHECKING:  # the machine must not import aiokafka at run time
    from aiogroup.structs import TopicPartition

__all__ = [
    "API_NAMES",
    "FAILURE_KINDS",
    "REQUEST_FAILURES",
    "ApplicationPolled",
    "AssignmentComputed",
    "BrokerIncompatible",
    "CloseRequested",
    "CommittedOffsetsUnavailable",
    "ConsumerGroupHeartbeatFailed",
    "ConsumerGroupHeartbeatResponseReceived",
    "CoordinatorFound",
    "CoordinatorLookupFailed",
    "CoordinatorRequested",
    "Event",
    "FindCoordinatorFailed",
    "HeartbeatFailed",
    "HeartbeatResponseReceived",
    "JoinGroupFailed",
    "JoinGroupResponseReceived",
    "LeaveGroupFailed",
    "LeaveGroupResponseReceived",
    "Listener",
    "ListenerCompleted",
    "MetadataChanged",
    "OffsetCommitFailed",
    "OffsetCommitResponseReceived",
    "OffsetFetchFailed",
    "RequestFailed",
    "RoutineFailed",
    "SessionTimeoutLearned",
    "SessionTimeoutLookupFailed",
    "ShareGroupHeartbeatFailed",
    "ShareGroupHeartbeatResponseReceived",
    "Subscribed",
    "SubscribedTopicsMissing",
    "SubscriptionChanged",
    "SyncGroupFailed",
    "SyncGroupResponseReceived",
    "TimerFired",
    "TopicNamesLookupFailed",
    "TopicNamesResolved",
    "UnsubscribeRequested",
    "request_failed",
]

#: connection: the socket broke; timeout: no answer in time; coordinator: the broker
#: said it is not (or no longer) the coordinator, seen outside a table-driven API.
FAILURE_KINDS = frozenset({"connection", "timeout", "coordinator"})


class Listener(enum.Enum):
    """The three rebalance callbacks (Java's ConsumerRebalanceListener)."""

    REVOKED = "revoked"
    ASSIGNED = "assigned"
    LOST = "lost"

    @property
    def method(self) -> str:
        """The callback's name on the listener: ``on_partitions_<kind>``."""
        return f"on_partitions_{self.value}"


@dataclass(frozen=True, slots=True)
class Event:
    """Base class, only so that tables can be typed."""


@dataclass(frozen=True, slots=True)
class SubscriptionChanged(Event):
    """The application subscribed, changed topics or a pattern's matches, or unsubscribed."""

    subscribed: bool
    reason: str = "subscription changed"


@dataclass(frozen=True, slots=True)
class MetadataChanged(Event):
    """A subscribed topic's partition count changed (the group must rebalance)."""

    reason: str


@dataclass(frozen=True, slots=True)
class CoordinatorFound(Event):
    """FindCoordinator named the group's coordinator and a connection to it works."""

    node_id: int

    def __post_init__(self) -> None:
        if self.node_id < 0:
            raise ValueError(f"coordinator node_id must be >= 0, got {self.node_id}")


@dataclass(frozen=True, slots=True)
class CoordinatorRequested(Event):
    """A commit or offset fetch needs the coordinator (also without group membership)."""


@dataclass(frozen=True, slots=True)
class CoordinatorLookupFailed(Event):
    """FindCoordinator returned an error code, or failed in transport (code -1)."""

    error_code: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class JoinGroupResponseReceived(Event):
    result: JoinGroupResult


@dataclass(frozen=True, slots=True)
class AssignmentComputed(Event):
    """The leader's assignor finished: member_id -> encoded assignment, or an error."""

    assignments: tuple[tuple[str, bytes], ...] = ()
    error: BaseException | None = None
    #: Members whose subscription metadata could not be decoded (they got nothing):
    #: (member id, the decoding error).
    peer_errors: tuple[tuple[str, BaseException], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResponseReceived(Event):
    """SyncGroup answered; the shell already decoded the assignment bytes.

    ``partitions`` is None when the response carried an error or the bytes could
    not be decoded (``decode_error`` then says why).
    """

    result: SyncGroupResult
    generation_id: int
    partitions: frozenset[TopicPartition] | None = None
    decode_error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponseReceived(Event):
    result: HeartbeatResult
    generation_id: int


@dataclass(frozen=True, slots=True)
class LeaveGroupResponseReceived(Event):
    result: LeaveGroupResult


@dataclass(frozen=True, slots=True)
class OffsetCommitResponseReceived(Event):
    """Only its effect on membership matters here; the caller handles its own result."""

    result: OffsetCommitResult
    generation_id: int


@dataclass(frozen=True, slots=True)
class ListenerCompleted(Event):
    """A rebalance listener coroutine finished (error holds what it raised, if anything)."""

    kind: Listener
    error: BaseException | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Listener):
            raise TypeError(f"listener kind must be a Listener, got {self.kind!r}")


@dataclass(frozen=True, slots=True)
class RequestFailed(Event):
    """A group request got no usable answer (transport failure, not an error code).

    Abstract: one subclass per API, so the transition table states which member
    states accept which failure (a JoinGroup failure outside PREPARING_REBALANCE is
    a shell bug the table rejects) instead of a handler checking ``api`` inside.
    """

    kind: str
    generation_id: int = -1
    detail: str = ""

    #: The API's Kafka name, set by each subclass.
    api: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if not self.api:
            raise TypeError("RequestFailed is abstract; use the subclass for the API")
        if self.kind not in FAILURE_KINDS:
            raise ValueError(f"failure kind must be one of {sorted(FAILURE_KINDS)}")


@dataclass(frozen=True, slots=True)
class FindCoordinatorFailed(RequestFailed):
    api: ClassVar[str] = "FindCoordinator"


@dataclass(frozen=True, slots=True)
class JoinGroupFailed(RequestFailed):
    api: ClassVar[str] = "JoinGroup"


@dataclass(frozen=True, slots=True)
class SyncGroupFailed(RequestFailed):
    api: ClassVar[str] = "SyncGroup"


@dataclass(frozen=True, slots=True)
class HeartbeatFailed(RequestFailed):
    api: ClassVar[str] = "Heartbeat"


@dataclass(frozen=True, slots=True)
class LeaveGroupFailed(RequestFailed):
    api: ClassVar[str] = "LeaveGroup"


@dataclass(frozen=True, slots=True)
class OffsetCommitFailed(RequestFailed):
    api: ClassVar[str] = "OffsetCommit"


@dataclass(frozen=True, slots=True)
class OffsetFetchFailed(RequestFailed):
    api: ClassVar[str] = "OffsetFetch"


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatFailed(RequestFailed):
    """A consumer-protocol heartbeat got no answer (connection lost, timeout)."""

    api: ClassVar[str] = "ConsumerGroupHeartbeat"


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatFailed(RequestFailed):
    """A share-group heartbeat (KIP-932) got no answer (connection lost, timeout)."""

    api: ClassVar[str] = "ShareGroupHeartbeat"


#: API name -> its failure event, for the shell's one generic request path.
REQUEST_FAILURES: dict[str, type[RequestFailed]] = {
    cls.api: cls
    for cls in (
        FindCoordinatorFailed,
        JoinGroupFailed,
        SyncGroupFailed,
        HeartbeatFailed,
        LeaveGroupFailed,
        OffsetCommitFailed,
        OffsetFetchFailed,
        ConsumerGroupHeartbeatFailed,
        ShareGroupHeartbeatFailed,
    )
}
#: The group APIs whose transport failures the machines react to.
API_NAMES = frozenset(REQUEST_FAILURES)


def request_failed(api: str, kind: str, generation_id: int = -1, detail: str = "") -> RequestFailed:
    """The failure event for ``api`` (a ValueError names an API the machine does not know)."""
    cls = REQUEST_FAILURES.get(api)
    if cls is None:
        raise ValueError(f"unknown api {api!r}; expected one of {sorted(API_NAMES)}")
    return cls(kind, generation_id, detail)


@dataclass(frozen=True, slots=True)
class TimerFired(Event):
    """The deadline from ``Membership.next_deadline()`` was reached (maybe spuriously)."""


@dataclass(frozen=True, slots=True)
class ApplicationPolled(Event):
    """The application's polls as of loop time ``at`` (max_poll_interval_ms).

    ``at``: when the last getone/getmany/getmany_arrow started or returned.
    ``waiting``: one is in progress now, waiting for records - the application is
    asking, so it is polling for as long as it waits (Java's poll(), aiokafka's
    fetch waiters); a quiet topic must not cost the member its membership.
    """

    at: float
    waiting: bool = False


@dataclass(frozen=True, slots=True)
class BrokerIncompatible(Event):
    """The broker speaks no version of ``api`` this client can use (sent nothing)."""

    api: str
    error: BaseException


@dataclass(frozen=True, slots=True)
class SubscribedTopicsMissing(Event):
    """Classic: the metadata an assignment was made on (or the metadata asked for since)
    does not show these subscribed topics yet; empty once it shows them all.

    A topic created just before the group formed can be missing from the metadata the
    assignment was computed on; the group is then stable with its partitions owned by
    nobody, and the periodic refresh (``metadata_max_age_ms``, 5 minutes by default)
    would be the first to notice.  The machine asks for metadata again by its retry
    policy (LookupMissingTopics), as Java's client does for a subscribed topic it
    cannot see; once the topic shows, its partition count changes and the member
    rejoins (MetadataChanged).
    """

    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class CommittedOffsetsUnavailable(Event):
    """Looking up the committed offsets that positions start from failed.

    ``retriable``: asking again may succeed (the shell asks again after a backoff
    either way); the machine decides whether the application hears of it.
    """

    error: BaseException
    retriable: bool


@dataclass(frozen=True, slots=True)
class RoutineFailed(Event):
    """The coordination routine failed (a bug): the member stops, the application hears."""

    message: str
    error: BaseException


@dataclass(frozen=True, slots=True)
class CloseRequested(Event):
    """The consumer is stopping: revoke, leave (dynamic members), then CLOSED."""


# --- the consumer protocol (KIP-848) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscribed(Event):
    """The application subscribed (or changed its subscription): topic names or a regex.

    The consumer protocol sends the subscription itself, where the classic one only
    needs to know it changed (:class:`SubscriptionChanged`).
    """

    topics: frozenset[str] = frozenset()
    #: A broker-side RE2J pattern (Kafka 4, heartbeat v1+); exclusive with ``topics``.
    regex: str | None = None

    def __post_init__(self) -> None:
        if self.regex is not None and self.topics:
            raise ValueError("subscribe to topic names or to a regex, not both")
        if self.regex is None and not self.topics:
            raise ValueError("a subscription needs at least one topic (or a regex)")


@dataclass(frozen=True, slots=True)
class UnsubscribeRequested(Event):
    """The application unsubscribed: revoke what is owned, then leave."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResponseReceived(Event):
    """ConsumerGroupHeartbeat answered (error code, epoch, maybe a new target)."""

    error_code: int
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    member_id: str | None = None
    #: The target assignment by topic id, or None when unchanged.
    assignment: Mapping[uuid.UUID, tuple[int, ...]] | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class TopicNamesResolved(Event):
    """Metadata named more topic ids (the assignment speaks ids; listeners speak names)."""

    names: Mapping[uuid.UUID, str]


@dataclass(frozen=True, slots=True)
class SessionTimeoutLearned(Event):
    """The coordinator's session timeout for this group, as the broker configures it
    (DescribeConfigs): the delivery gate's bound from now on.  0: the broker answered
    without it (the heartbeat interval stays the bound)."""

    session_timeout_ms: int


@dataclass(frozen=True, slots=True)
class TopicNamesLookupFailed(Event):
    """The Metadata request for topic ids got no answer (the machine decides when to
    ask again)."""

    error: BaseException


@dataclass(frozen=True, slots=True)
class SessionTimeoutLookupFailed(Event):
    """DescribeConfigs for the group's session timeout got no answer."""

    error: BaseException


# --- share groups (KIP-932) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatResponseReceived(Event):
    """ShareGroupHeartbeat answered (error code, epoch, maybe a new assignment).

    Share groups reuse the consumer protocol's subscription events (:class:`Subscribed`,
    :class:`UnsubscribeRequested`) and topic-name lookups; only the wire answer is theirs.
    """

    error_code: int
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    member_id: str | None = None
    #: The assignment by topic id, or None when unchanged.
    assignment: Mapping[uuid.UUID, tuple[int, ...]] | None = None
    error_message: str | None = None
