"""The share-group (KIP-932) membership machine: every decision, none of the I/O.

What belongs here.  A share member's decisions: when to heartbeat and what the
heartbeat carries, how the coordinator's assignment becomes the fetcher's (topic ids
to names), what each ShareGroupHeartbeat error code does, when the coordinator is
looked up again and after what backoff, until when the member surely still holds its
membership (the delivery gate), and how it leaves.  Time comes in as ``now``; the
shell (:mod:`aiogroup._coordination.share_routine`) performs the returned actions and
feeds back what happened, in the vocabulary every machine speaks
(:mod:`aiogroup._membership.events` / ``.actions``).

How it works: as :mod:`aiogroup._membership.consumer_group` - the event table
(:data:`EVENT_TRANSITIONS`: (state, event type) -> handler and direct targets; a
missing pair is an illegal input, FATAL and :class:`ShareMembershipError`), then the
ordered state rules (:data:`STATE_RULES`), then the scheduler (heartbeat or
coordinator lookup now?).

Facts (KIP-932, Apache Kafka's ShareMembershipManager / ShareHeartbeatRequestManager,
ShareGroupHeartbeat{Request,Response}.json):

* The member id is the client's own UUID (KIP-1082), sent from the first heartbeat
  and kept across rejoins; it joins with epoch 0 and its subscription, and later
  sends the subscription only when it changed (null: unchanged).  There are no owned
  partitions to report and no rebalance callbacks: a share group's assignment is not
  exclusive (several members may read one partition), so an assignment is installed
  as it comes.  The broker names partitions by topic id; the names come from Metadata.
* The heartbeat interval is the coordinator's.  There is no poll-interval eviction:
  the broker has none for share groups (records are bounded by their acquisition
  locks instead).
* UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH: the broker dropped the member and released
  every record it had acquired, so the member forgets them (:class:`DropAcquiredRecords`
  - none may be handed out or acknowledged any more), stops fetching and rejoins
  with epoch 0.
* NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / a lost connection: the coordinator is
  looked up again, after a backoff that doubles per consecutive failure up to
  ``retry_backoff_max`` (KIP-580, :mod:`aiogroup._membership.backoff`); a heartbeat
  answered without error resets it.
* GROUP_ID_NOT_FOUND / INCONSISTENT_GROUP_PROTOCOL: the group id belongs to a classic
  or consumer group (a group has one type); fatal, naming the id.
* Leaving sends epoch -1; the answer, whatever it is, ends the membership.
* The broker fences a member whose session (``share.session.timeout.ms``) passed
  without a heartbeat *arriving*.  So the member is surely in the group until (send
  time of its last acknowledged heartbeat) + the session
  (:meth:`ShareMembership.membership_valid_until`): past it the shell hands out no
  record.  Until the session timeout is learned (DescribeConfigs), the heartbeat
  interval bounds it - shorter, never later.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from aiogroup._membership import table
from aiogroup._membership.actions import (
    Action,
    DropAcquiredRecords,
    FindCoordinator,
    LookupSessionTimeout,
    RaiseToApplication,
    RequestMetadata,
    SendShareGroupHeartbeat,
    SetAssignment,
)
from aiogroup._membership.backoff import DEFAULT_BACKOFF_MAX, RetryPolicy
from aiogroup._membership.codes import ErrorCode, code_name
from aiogroup._membership.events import (
    BrokerIncompatible,
    CloseRequested,
    CoordinatorFound,
    CoordinatorLookupFailed,
    Event,
    RoutineFailed,
    SessionTimeoutLearned,
    SessionTimeoutLookupFailed,
    ShareGroupHeartbeatFailed,
    ShareGroupHeartbeatResponseReceived,
    Subscribed,
    TimerFired,
    TopicNamesLookupFailed,
    TopicNamesResolved,
    UnsubscribeRequested,
)
from aiogroup._membership.heartbeat_member import (
    COMMON_HEARTBEAT_REACTIONS,
    HeartbeatMember,
    HeartbeatReaction,
    add_plumbing,
    check_ids,
    heartbeat_error_text,
    ignore,
    on_coordinator_found,
)
from aiogroup._membership.heartbeat_member import (
    SESSION_LOOKUP_ATTEMPTS as SESSION_LOOKUP_ATTEMPTS,
)

__all__ = [
    "ACTION_TYPES",
    "EVENT_TRANSITIONS",
    "EVENT_TYPES",
    "HEARTBEAT_REACTIONS",
    "STATE_RULES",
    "ShareHeartbeatReaction",
    "ShareMemberState",
    "ShareMembership",
    "ShareMembershipError",
    "mermaid_diagram",
    "share_heartbeat_reaction",
]

#: ``(topic, partition)``, equal to (and hashed like) the shell's TopicPartition.
TopicPartition = tuple[str, int]
IdPartitions = frozenset[tuple[uuid.UUID, int]]

#: member_epoch sentinels (ShareGroupHeartbeatRequest.json).
JOIN_EPOCH = 0
LEAVE_EPOCH = -1


class ShareMemberState(enum.Enum):
    """Java's MemberState names, those a share member passes through."""

    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    #: An assignment arrived that names topic ids without a known name yet.
    RECONCILING = "RECONCILING"
    STABLE = "STABLE"
    #: The broker dropped the member: acquired records forgotten, then rejoin.
    FENCED = "FENCED"
    LEAVING = "LEAVING"
    #: Terminal: an unrecoverable error was raised to the application.
    FATAL = "FATAL"


S = ShareMemberState
C = ErrorCode
_MEMBER = (S.JOINING, S.RECONCILING, S.STABLE)

EVENT_TYPES: tuple[type[Event], ...] = (
    Subscribed,
    UnsubscribeRequested,
    CloseRequested,
    CoordinatorFound,
    CoordinatorLookupFailed,
    ShareGroupHeartbeatResponseReceived,
    ShareGroupHeartbeatFailed,
    TopicNamesResolved,
    TopicNamesLookupFailed,
    SessionTimeoutLearned,
    SessionTimeoutLookupFailed,
    TimerFired,
    BrokerIncompatible,
    RoutineFailed,
)

ACTION_TYPES: frozenset[type[Action]] = frozenset(
    {
        FindCoordinator,
        SendShareGroupHeartbeat,
        SetAssignment,
        DropAcquiredRecords,
        RequestMetadata,
        LookupSessionTimeout,
        RaiseToApplication,
    }
)


class ShareMembershipError(RuntimeError):
    """The machine got an event it has no transition for (a bug in its caller)."""


#: The share machine reacts as every heartbeat member does (fenced: acquired records
#: forgotten, rejoin with epoch 0).
ShareHeartbeatReaction = HeartbeatReaction
H = ShareHeartbeatReaction
#: ShareGroupHeartbeatResponse.json's documented codes and what each does; any other
#: code is fatal (as in Java's heartbeat manager).
HEARTBEAT_REACTIONS: dict[int, ShareHeartbeatReaction] = {
    **COMMON_HEARTBEAT_REACTIONS,
    C.GROUP_ID_NOT_FOUND: H.FATAL,
    C.INCONSISTENT_GROUP_PROTOCOL: H.FATAL,
    C.INVALID_GROUP_ID: H.FATAL,
}


def share_heartbeat_reaction(code: int) -> ShareHeartbeatReaction:
    return HEARTBEAT_REACTIONS.get(code, H.FATAL)


_IN_USE = (
    "the group id {group!r} is in use by a classic or consumer group; a share group "
    "needs a group id of its own"
)
_FATAL_HINTS: dict[int, str] = {
    C.UNSUPPORTED_VERSION: (
        "the broker does not serve share groups (KIP-932: ShareGroupHeartbeat); Apache "
        "Kafka 4.1+ with share.version enabled does"
    ),
    C.GROUP_ID_NOT_FOUND: _IN_USE,
    C.INCONSISTENT_GROUP_PROTOCOL: _IN_USE,
    C.GROUP_MAX_SIZE_REACHED: "the share group has group.share.max.size members already",
}


class LeaveReason(enum.Enum):
    UNSUBSCRIBE = "unsubscribe"
    CLOSE = "close"


@dataclass(slots=True)
class _Config:
    group_id: str
    member_id: str
    retry_backoff: float
    retry_backoff_max: float


class ShareMembership(HeartbeatMember[ShareMemberState]):
    """One share-group member.  ``handle(event, now) -> actions``; no I/O inside."""

    _ERROR = ShareMembershipError
    _LOOKUP_FOR = "share heartbeat"
    _RULE_ROUNDS = 16

    def __init__(
        self,
        group_id: str,
        member_id: str,
        *,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = DEFAULT_BACKOFF_MAX,
        learn_session_timeout: bool = False,
        now: float = 0.0,
    ) -> None:
        check_ids(group_id, member_id)
        if retry_backoff <= 0 or retry_backoff_max < retry_backoff:
            raise ValueError("retry backoff must be > 0 and at most retry_backoff_max")
        # Finding the coordinator backs off by KIP-580 per failure in a row.
        super().__init__(
            group_id,
            member_id,
            initial=S.UNSUBSCRIBED,
            fatal=S.FATAL,
            in_group=_MEMBER,
            retry_backoff=retry_backoff,
            coordinator_policy=RetryPolicy.from_backoff(retry_backoff, retry_backoff_max),
            learn_session_timeout=learn_session_timeout,
            now=now,
        )
        self.config = _Config(group_id, member_id, retry_backoff, retry_backoff_max)
        self.member_epoch = JOIN_EPOCH
        #: The subscription the last heartbeats carried (None: send it again).
        self.sent_topics: frozenset[str] | None = None
        self.leave_reason: LeaveReason | None = None

    # -- the hooks of HeartbeatMember ----------------------------------------------------

    def _event_table(self) -> dict[tuple[ShareMemberState, type[Event]], Transition]:
        return EVENT_TRANSITIONS

    def _state_rules(self) -> tuple[Rule, ...]:
        return STATE_RULES

    def _wants_heartbeat(self) -> bool:
        if self.state is S.LEAVING:
            return not self.leave_sent
        return self.state in _MEMBER

    def _urgent(self) -> bool:
        """Leave at once (joining and a changed subscription move ``next_heartbeat_at``
        to now instead, so a backoff the coordinator asked for still holds)."""
        return self.state is S.LEAVING

    def _heartbeat(self) -> SendShareGroupHeartbeat:
        self.heartbeat_in_flight = True
        self.heartbeat_sent_at = self.now
        if self.state is S.LEAVING:
            self.leave_sent = True
            return SendShareGroupHeartbeat(self.member_id, LEAVE_EPOCH)
        topics: tuple[str, ...] | None = None
        if self.member_epoch == JOIN_EPOCH or self.sent_topics != self.topics:
            topics = tuple(sorted(self.topics))
            self.sent_topics = self.topics
        return SendShareGroupHeartbeat(self.member_id, self.member_epoch, topics)

    def _may_deliver(self) -> bool:
        return self.state in _MEMBER

    # -- public API --------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Nothing more will happen: failed, or left after close()."""
        return self.state is S.FATAL or (
            self.state is S.UNSUBSCRIBED and self.leave_reason is LeaveReason.CLOSE
        )

    @property
    def awaiting_poll(self) -> bool:
        """Never: a share group has no poll-interval rule."""
        return False

    @property
    def joined(self) -> bool:
        """In the group with its assignment installed."""
        return self.state is S.STABLE

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the fetcher reads now (shared with other members)."""
        return self.fetching

    # -- helpers -----------------------------------------------------------------------

    def _drop_everything(self, reason: str) -> None:
        """The membership is gone: the broker released our records; stop fetching."""
        self._emit(DropAcquiredRecords(reason))
        if self.fetching:
            self._emit(SetAssignment(frozenset()))

    def _named(self, parts: IdPartitions) -> frozenset[TopicPartition]:
        return frozenset((self.names[tid], p) for tid, p in parts if tid in self.names)

    def _unnamed_ids(self) -> frozenset[uuid.UUID]:
        """Only a member resolves names (a fenced or leaving one has no assignment)."""
        if self.state not in _MEMBER:
            return frozenset()
        return super()._unnamed_ids()

    def _fail(self, code: int, message: str | None) -> None:
        group = self.config.group_id
        hint = _FATAL_HINTS.get(code)
        text = heartbeat_error_text(
            f"ShareGroupHeartbeat of group {group!r}",
            code,
            message,
            hint.format(group=group) if hint else None,
        )
        self._report(code, text, fatal=True)
        self.state = S.FATAL
        self.member_epoch = JOIN_EPOCH
        self.target = None
        self._drop_everything("the member failed")


M = ShareMembership


# --- event handlers -------------------------------------------------------------------


def _on_subscribed(m: M, ev: Event) -> None:
    assert isinstance(ev, Subscribed)
    if ev.regex is not None:
        m._report(
            None,
            "share groups subscribe to topic names; a regex subscription is not supported",
            fatal=False,
        )
        return
    if m.state in _MEMBER and ev.topics != m.topics:
        m.next_heartbeat_at = m.now  # the coordinator learns of it at once
    m.topics = ev.topics
    if m.state is S.LEAVING:
        m.resubscribed = True
    elif m.state is S.UNSUBSCRIBED:
        m.leave_reason = None
        _start_joining(m)


def _start_joining(m: M) -> None:
    m.state = S.JOINING
    m.member_epoch = JOIN_EPOCH
    m.target = None
    m.sent_topics = None
    m.next_heartbeat_at = m.now
    if not m.session_lookup.in_flight:
        m.session_lookup = m._new_session_lookup()  # learn it again for this membership


def _on_leave_requested(m: M, ev: Event) -> None:
    reason = LeaveReason.CLOSE if isinstance(ev, CloseRequested) else LeaveReason.UNSUBSCRIBE
    m.resubscribed = False
    if m.state is S.LEAVING:
        if reason is LeaveReason.CLOSE:
            m.leave_reason = reason
        return
    m.leave_reason = reason
    if m.state is S.UNSUBSCRIBED:
        return
    held = m.member_epoch > 0 or m.heartbeat_in_flight
    m.target = None
    m._drop_everything("leaving the group")
    if held:
        # A member (or a join the broker may have taken): say goodbye with epoch -1.
        m.state = S.LEAVING
        m.leave_sent = False
    else:
        m.member_epoch = JOIN_EPOCH
        m.state = S.UNSUBSCRIBED


def _on_coordinator_found(m: M, ev: Event) -> None:
    on_coordinator_found(m, ev)
    m.next_heartbeat_at = m.now


def _on_heartbeat_failed(m: M, ev: Event) -> None:
    assert isinstance(ev, ShareGroupHeartbeatFailed)
    m.heartbeat_in_flight = False
    m.sent_topics = None
    if m.state is S.LEAVING and m.leave_sent:
        _finish_leaving(m)
        return
    # A lost connection usually means a moved coordinator: look it up again.
    m._coordinator_lost()


def _on_heartbeat_response(m: M, ev: Event) -> None:
    assert isinstance(ev, ShareGroupHeartbeatResponseReceived)
    m.heartbeat_in_flight = False
    if m.state is S.LEAVING:
        if m.leave_sent:
            _finish_leaving(m)
        else:
            # The join (or beat) sent before the leave was asked: the leave goes out now.
            m.member_epoch = max(m.member_epoch, ev.member_epoch)
        return
    reaction = share_heartbeat_reaction(ev.error_code)
    if reaction is not H.OK:
        m.sent_topics = None
    if reaction is H.OK:
        m._heartbeat_accepted(ev.member_id, ev.member_epoch, ev.heartbeat_interval_ms)
        if ev.assignment is not None:
            m.target = frozenset((tid, p) for tid, parts in ev.assignment.items() for p in parts)
    elif reaction is H.FIND_COORDINATOR:
        m._coordinator_lost()
    elif reaction in (H.RETRY_BACKOFF, H.REPORT_RETRY):
        m._retry_later(
            "ShareGroupHeartbeat",
            ev.error_code,
            ev.error_message,
            report=reaction is H.REPORT_RETRY,
        )
    elif reaction is H.FENCED:
        _fence(m, code_name(ev.error_code))
    else:
        m._fail(ev.error_code, ev.error_message)


def _fence(m: M, why: str) -> None:
    m.member_epoch = JOIN_EPOCH
    m.target = None
    m.proven_at = None
    m.state = S.FENCED
    m._drop_everything(f"fenced by the coordinator ({why})")


def _finish_leaving(m: M) -> None:
    m.member_epoch = JOIN_EPOCH
    m.target = None
    m.leave_sent = False
    m.proven_at = None
    m.state = S.UNSUBSCRIBED


def _on_routine_failed(m: M, ev: Event) -> None:
    assert isinstance(ev, RoutineFailed)
    m._report(None, ev.message, fatal=True, exception=ev.error)
    if m.state is not S.FATAL:
        m.state = S.FATAL
        m._drop_everything("the member failed")


def _on_late_heartbeat(m: M, ev: Event) -> None:
    """An answer to a heartbeat sent before the member left or failed: bookkeeping only."""
    m.heartbeat_in_flight = False


# --- the event table ------------------------------------------------------------------

Handler = Callable[["ShareMembership", Event], None]
Transition = table.Transition[ShareMemberState, Handler]


_t = table.transition


EVENT_TRANSITIONS: dict[tuple[ShareMemberState, type[Event]], Transition] = {}
"""(state, event type) -> Transition.  A missing pair is an illegal input."""

# Coordinator, topic names, session timeout, timers, an incompatible broker: the
# plumbing of every heartbeat member (FATAL swallows them).
add_plumbing(EVENT_TRANSITIONS, S, S.FATAL)
for _s in S:
    if _s is S.FATAL:
        continue
    EVENT_TRANSITIONS[(_s, CoordinatorFound)] = _t(_on_coordinator_found)
    EVENT_TRANSITIONS[(_s, RoutineFailed)] = _t(_on_routine_failed, S.FATAL)
    EVENT_TRANSITIONS[(_s, ShareGroupHeartbeatResponseReceived)] = _t(_on_late_heartbeat)
    EVENT_TRANSITIONS[(_s, ShareGroupHeartbeatFailed)] = _t(_on_late_heartbeat)
    EVENT_TRANSITIONS[(_s, Subscribed)] = _t(_on_subscribed)
    EVENT_TRANSITIONS[(_s, UnsubscribeRequested)] = _t(_on_leave_requested)
    EVENT_TRANSITIONS[(_s, CloseRequested)] = _t(_on_leave_requested)
EVENT_TRANSITIONS[(S.UNSUBSCRIBED, Subscribed)] = _t(_on_subscribed, S.JOINING)
for _s in (*_MEMBER, S.FENCED):
    EVENT_TRANSITIONS[(_s, UnsubscribeRequested)] = _t(
        _on_leave_requested, S.LEAVING, S.UNSUBSCRIBED
    )
    EVENT_TRANSITIONS[(_s, CloseRequested)] = _t(_on_leave_requested, S.LEAVING, S.UNSUBSCRIBED)
for _s in _MEMBER:
    EVENT_TRANSITIONS[(_s, ShareGroupHeartbeatResponseReceived)] = _t(
        _on_heartbeat_response, S.FENCED, S.FATAL
    )
    EVENT_TRANSITIONS[(_s, ShareGroupHeartbeatFailed)] = _t(_on_heartbeat_failed)
EVENT_TRANSITIONS[(S.LEAVING, ShareGroupHeartbeatResponseReceived)] = _t(
    _on_heartbeat_response, S.UNSUBSCRIBED
)
EVENT_TRANSITIONS[(S.LEAVING, ShareGroupHeartbeatFailed)] = _t(_on_heartbeat_failed, S.UNSUBSCRIBED)
# FATAL: finished; late answers, timers and a close are swallowed.
for _ev in (CloseRequested, UnsubscribeRequested, Subscribed):
    EVENT_TRANSITIONS[(S.FATAL, _ev)] = _t(ignore)
EVENT_TRANSITIONS[(S.FATAL, RoutineFailed)] = _t(_on_routine_failed)
EVENT_TRANSITIONS[(S.FATAL, ShareGroupHeartbeatResponseReceived)] = _t(_on_late_heartbeat)
EVENT_TRANSITIONS[(S.FATAL, ShareGroupHeartbeatFailed)] = _t(_on_late_heartbeat)


# --- the state-triggered rules --------------------------------------------------------

RuleStep = Callable[["ShareMembership"], None]
Rule = table.StateRule[ShareMemberState, "ShareMembership", RuleStep]


def _fully_named(m: M) -> bool:
    return m.target is not None and all(tid in m.names for tid, _ in m.target)


def _assignment_ready(m: M) -> bool:
    """Every topic of the assignment is named and the fetcher does not read it yet
    (or the member is not STABLE yet: the first assignment, maybe empty)."""
    if m.target is None or not _fully_named(m):
        return False
    return m.state is not S.STABLE or m._named(m.target) != m.fetching


def _install(m: M) -> None:
    assert m.target is not None
    m._emit(SetAssignment(m._named(m.target)))


def _assignment_unnamed(m: M) -> bool:
    return m.target is not None and not _fully_named(m)


def _install_named_part(m: M) -> None:
    assert m.target is not None
    named = m._named(m.target)
    if named != m.fetching:
        m._emit(SetAssignment(named))


def _records_dropped(m: M) -> bool:
    return True


def _rejoin(m: M) -> None:
    _start_joining(m)


def _resubscribed(m: M) -> bool:
    return m.resubscribed and m.leave_reason is not LeaveReason.CLOSE


def _rejoin_after_leave(m: M) -> None:
    m.resubscribed = False
    m.leave_reason = None
    _start_joining(m)


#: Ordered: the first rule whose source and guard match fires; then all are tried again.
STATE_RULES: tuple[Rule, ...] = (
    table.StateRule(
        "assignment-installed",
        frozenset(_MEMBER),
        _assignment_ready,
        S.STABLE,
        "assignment named and installed",
        _install,
    ),
    table.StateRule(
        "assignment-awaits-names",
        frozenset({S.JOINING, S.STABLE}),
        _assignment_unnamed,
        S.RECONCILING,
        "assignment names unknown topic ids",
        _install_named_part,
    ),
    table.StateRule(
        "rejoin-after-fence",
        frozenset({S.FENCED}),
        _records_dropped,
        S.JOINING,
        "acquired records dropped",
        _rejoin,
    ),
    table.StateRule(
        "subscribed-while-leaving",
        frozenset({S.UNSUBSCRIBED}),
        _resubscribed,
        S.JOINING,
        "subscribed while leaving",
        _rejoin_after_leave,
    ),
)


def mermaid_diagram() -> str:
    """:data:`EVENT_TRANSITIONS` and :data:`STATE_RULES` as a mermaid stateDiagram."""
    return table.mermaid_diagram(
        EVENT_TRANSITIONS, STATE_RULES, initial=S.UNSUBSCRIBED, finals=(S.FATAL,)
    )
