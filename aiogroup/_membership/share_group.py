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
from collections import deque
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
from aiogroup._membership.backoff import DEFAULT_BACKOFF_MAX, Retrying, RetryPolicy
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


class ShareHeartbeatReaction(enum.Enum):
    OK = "ok"
    #: The coordinator moved or is down: find it again (backoff), then heartbeat at once.
    FIND_COORDINATOR = "find coordinator"
    RETRY_BACKOFF = "retry after backoff"
    #: Member or epoch gone: acquired records forgotten, rejoin with epoch 0.
    FENCED = "fenced: drop acquired records, rejoin with epoch 0"
    #: Tell the application (its next poll raises), keep heartbeating after a backoff.
    REPORT_RETRY = "report and retry"
    FATAL = "fatal"


H = ShareHeartbeatReaction
#: ShareGroupHeartbeatResponse.json's documented codes and what each does; any other
#: code is fatal (as in Java's heartbeat manager).
HEARTBEAT_REACTIONS: dict[int, ShareHeartbeatReaction] = {
    C.NONE: H.OK,
    C.NOT_COORDINATOR: H.FIND_COORDINATOR,
    C.COORDINATOR_NOT_AVAILABLE: H.FIND_COORDINATOR,
    C.REQUEST_TIMED_OUT: H.FIND_COORDINATOR,
    C.COORDINATOR_LOAD_IN_PROGRESS: H.RETRY_BACKOFF,
    C.UNKNOWN_MEMBER_ID: H.FENCED,
    C.FENCED_MEMBER_EPOCH: H.FENCED,
    C.TOPIC_AUTHORIZATION_FAILED: H.REPORT_RETRY,
    C.GROUP_AUTHORIZATION_FAILED: H.FATAL,
    C.INVALID_REQUEST: H.FATAL,
    C.GROUP_MAX_SIZE_REACHED: H.FATAL,
    C.UNSUPPORTED_VERSION: H.FATAL,
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

#: Tries at the group's session timeout before the heartbeat interval stays the bound.
SESSION_LOOKUP_ATTEMPTS = 3


class LeaveReason(enum.Enum):
    UNSUBSCRIBE = "unsubscribe"
    CLOSE = "close"


@dataclass(slots=True)
class _Config:
    group_id: str
    member_id: str
    retry_backoff: float
    retry_backoff_max: float


class ShareMembership:
    """One share-group member.  ``handle(event, now) -> actions``; no I/O inside."""

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
        if not group_id:
            raise ValueError("group_id must not be empty")
        if not member_id:
            raise ValueError("member_id must not be empty (the client generates it, KIP-1082)")
        if retry_backoff <= 0 or retry_backoff_max < retry_backoff:
            raise ValueError("retry backoff must be > 0 and at most retry_backoff_max")
        self.config = _Config(group_id, member_id, retry_backoff, retry_backoff_max)
        self.state = S.UNSUBSCRIBED
        self.member_id = member_id
        self.member_epoch = JOIN_EPOCH
        self.topics: frozenset[str] = frozenset()
        #: The subscription the last heartbeats carried (None: send it again).
        self.sent_topics: frozenset[str] | None = None
        #: The coordinator's latest assignment (None: none since joining).
        self.target: IdPartitions | None = None
        self.names: dict[uuid.UUID, str] = {}
        #: What the last SetAssignment gave the fetcher.
        self.fetching: frozenset[TopicPartition] = frozenset()
        self.coordinator_known = False
        #: Finding the coordinator: due now, then by KIP-580 backoff per failure in a row.
        self.coordinator_lookup = Retrying(
            RetryPolicy.from_backoff(retry_backoff, retry_backoff_max)
        )
        self.heartbeat_in_flight = False
        self.heartbeat_interval = 0.0
        self.next_heartbeat_at = now
        self.heartbeat_sent_at = now
        #: Send time of the last heartbeat answered without error (None: none yet).
        self.proven_at: float | None = None
        self.session_timeout: float | None = None
        self.leave_reason: LeaveReason | None = None
        self.leave_sent = False
        self.resubscribed = False
        self.names_lookup = Retrying(RetryPolicy.from_backoff(retry_backoff))
        self.learn_session_timeout = learn_session_timeout
        self.session_lookup = self._new_session_lookup()
        self.error: RaiseToApplication | None = None
        self.now = now
        self.trace: deque[tuple[ShareMemberState, ShareMemberState, str]] = deque(maxlen=256)
        self._out: list[Action] = []

    # -- public API --------------------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Action]:
        tr = table.transition_for(EVENT_TRANSITIONS, self.state, event, self._illegal)
        self.now = max(self.now, now)
        before = self.state
        tr.handler(self, event)
        if self.state is not before:
            if self.state not in tr.targets:
                raise AssertionError(f"{tr.handler.__name__} moved {before} -> {self.state}")
            self.trace.append((before, self.state, type(event).__name__))
        self._advance()
        self._schedule()
        self._lookup_names()
        self._lookup_session_timeout()
        out, self._out = self._out, []
        return out

    def _illegal(self, text: str) -> ShareMembershipError:
        self.state = S.FATAL
        return ShareMembershipError(text)

    def next_deadline(self) -> float | None:
        """When to feed TimerFired next (None: only an event can move the machine)."""
        deadlines: list[float] = []
        if self._wants_heartbeat() and not self.heartbeat_in_flight:
            if self.coordinator_known:
                deadlines.append(self.next_heartbeat_at)
            else:
                deadlines.extend(self.coordinator_lookup.deadline())
        if self.state is not S.FATAL:
            if self._unnamed_ids():
                deadlines.extend(self.names_lookup.deadline())
            if self._wants_session_timeout():
                deadlines.extend(self.session_lookup.deadline())
        return min(deadlines) if deadlines else None

    def membership_valid_until(self) -> float | None:
        """Until when the member surely holds its membership (the shell's delivery gate).

        None while it holds none (epoch 0: joining, fenced, left): then no record may
        be handed out.
        """
        if self.member_epoch <= 0 or self.proven_at is None or self.state not in _MEMBER:
            return None
        bound = (
            self.session_timeout if self.session_timeout is not None else self.heartbeat_interval
        )
        return self.proven_at + bound

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
    def failed(self) -> bool:
        return self.state is S.FATAL

    @property
    def joined(self) -> bool:
        """In the group with its assignment installed."""
        return self.state is S.STABLE

    @property
    def in_group(self) -> bool:
        return self.member_epoch > 0 and self.state in _MEMBER

    @property
    def state_name(self) -> str:
        return self.state.value

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the fetcher reads now (shared with other members)."""
        return self.fetching

    # -- helpers -----------------------------------------------------------------------

    def _new_session_lookup(self) -> Retrying:
        """Asking for the group's session timeout: a few tries from each join (a group
        config may have changed since the last one; without an answer the heartbeat
        interval, which is shorter, bounds the gate)."""
        backoff = self.config.retry_backoff
        return Retrying(
            RetryPolicy(
                backoff, max(backoff, DEFAULT_BACKOFF_MAX), attempts=SESSION_LOOKUP_ATTEMPTS
            ),
            done=not self.learn_session_timeout,
        )

    def _emit(self, action: Action) -> None:
        if isinstance(action, SetAssignment):
            self.fetching = action.partitions or frozenset()
        self._out.append(action)

    def _drop_everything(self, reason: str) -> None:
        """The membership is gone: the broker released our records; stop fetching."""
        self._emit(DropAcquiredRecords(reason))
        if self.fetching:
            self._emit(SetAssignment(frozenset()))

    def _named(self, parts: IdPartitions) -> frozenset[TopicPartition]:
        return frozenset((self.names[tid], p) for tid, p in parts if tid in self.names)

    def _unnamed_ids(self) -> frozenset[uuid.UUID]:
        if self.target is None or self.state not in _MEMBER:
            return frozenset()
        return frozenset(tid for tid, _ in self.target if tid not in self.names)

    def _wants_heartbeat(self) -> bool:
        if self.state is S.LEAVING:
            return not self.leave_sent
        return self.state in _MEMBER

    def _wants_session_timeout(self) -> bool:
        return self.state in _MEMBER and not self.session_lookup.done

    def _report(
        self, code: int | None, message: str, *, fatal: bool, exception: BaseException | None = None
    ) -> None:
        action = RaiseToApplication(message, code, exception, fatal)
        if fatal:
            self.error = action
        self._emit(action)

    def _fail(self, code: int, message: str | None) -> None:
        text = (
            f"ShareGroupHeartbeat of group {self.config.group_id!r} failed with {code_name(code)}"
        )
        if message:
            text += f": {message}"
        hint = _FATAL_HINTS.get(code)
        if hint:
            text += f" ({hint.format(group=self.config.group_id)})"
        self._report(code, text, fatal=True)
        self.state = S.FATAL
        self.member_epoch = JOIN_EPOCH
        self.target = None
        self._drop_everything("the member failed")

    def _coordinator_lost(self) -> None:
        """Find the coordinator again after the policy's backoff (KIP-580)."""
        self.coordinator_known = False
        self.coordinator_lookup.failed(self.now)
        self.next_heartbeat_at = self.now

    # -- scheduler ---------------------------------------------------------------------

    def _lookup_names(self) -> None:
        missing = self._unnamed_ids()
        if missing and self.names_lookup.due(self.now):
            self.names_lookup.sent()
            self._emit(RequestMetadata(missing))

    def _lookup_session_timeout(self) -> None:
        if self._wants_session_timeout() and self.session_lookup.due(self.now):
            self.session_lookup.sent()
            self._emit(LookupSessionTimeout())

    def _schedule(self) -> None:
        if not self._wants_heartbeat() or self.heartbeat_in_flight:
            return
        if not self.coordinator_known:
            if self.coordinator_lookup.due(self.now):
                self.coordinator_lookup.sent()
                self._emit(FindCoordinator(f"share heartbeat in {self.state.value}"))
            return
        if _urgent(self) or self.now >= self.next_heartbeat_at:
            self._emit(self._heartbeat())

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

    def _advance(self) -> None:
        for _ in range(16):
            rule = table.first_rule(STATE_RULES, self, self.state)
            if rule is None:
                return
            self.trace.append((self.state, rule.target, rule.reason))
            self.state = rule.target
            if rule.step is not None:
                rule.step(self)
        raise AssertionError("state rules did not settle")  # pragma: no cover


M = ShareMembership


def _urgent(m: M) -> bool:
    """Leave at once (joining and a changed subscription move ``next_heartbeat_at``
    to now instead, so a backoff the coordinator asked for still holds)."""
    return m.state is S.LEAVING


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
    assert isinstance(ev, CoordinatorFound)
    m.coordinator_known = True
    # Not a success for the backoff: only a heartbeat answered resets it, so a
    # coordinator that is found and then refuses is asked at longer and longer waits.
    m.coordinator_lookup.in_flight = False
    m.next_heartbeat_at = m.now


def _on_coordinator_lookup_failed(m: M, ev: Event) -> None:
    assert isinstance(ev, CoordinatorLookupFailed)
    m.coordinator_known = False
    m.coordinator_lookup.failed(m.now)
    if ev.error_code == C.GROUP_AUTHORIZATION_FAILED:
        m._report(ev.error_code, "FindCoordinator: GROUP_AUTHORIZATION_FAILED", fatal=False)


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
        if ev.member_id and ev.member_id != m.member_id:
            m.member_id = ev.member_id
        m.member_epoch = ev.member_epoch
        if ev.heartbeat_interval_ms > 0:
            m.heartbeat_interval = ev.heartbeat_interval_ms / 1000
        m.proven_at = m.heartbeat_sent_at
        m.next_heartbeat_at = m.now + m.heartbeat_interval
        m.coordinator_lookup.failures = 0
        if ev.assignment is not None:
            m.target = frozenset((tid, p) for tid, parts in ev.assignment.items() for p in parts)
    elif reaction is H.FIND_COORDINATOR:
        m._coordinator_lost()
    elif reaction is H.RETRY_BACKOFF:
        m.next_heartbeat_at = m.now + m.config.retry_backoff
    elif reaction is H.REPORT_RETRY:
        text = f"ShareGroupHeartbeat failed with {code_name(ev.error_code)}"
        m._report(
            ev.error_code, f"{text}: {ev.error_message}" if ev.error_message else text, fatal=False
        )
        m.next_heartbeat_at = m.now + m.config.retry_backoff
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


def _on_topic_names(m: M, ev: Event) -> None:
    assert isinstance(ev, TopicNamesResolved)
    m.names.update(ev.names)
    if m._unnamed_ids():
        m.names_lookup.failed(m.now)
    else:
        m.names_lookup.succeeded()


def _on_topic_names_failed(m: M, ev: Event) -> None:
    assert isinstance(ev, TopicNamesLookupFailed)
    m.names_lookup.failed(m.now)


def _on_session_timeout(m: M, ev: Event) -> None:
    assert isinstance(ev, SessionTimeoutLearned)
    m.session_lookup.succeeded()
    m.session_lookup.done = True
    if ev.session_timeout_ms > 0:
        m.session_timeout = ev.session_timeout_ms / 1000


def _on_session_lookup_failed(m: M, ev: Event) -> None:
    assert isinstance(ev, SessionTimeoutLookupFailed)
    m.session_lookup.failed(m.now)


def _on_broker_incompatible(m: M, ev: Event) -> None:
    assert isinstance(ev, BrokerIncompatible)
    m._report(
        None,
        f"{ev.api}: the broker does not support it: {ev.error}",
        fatal=False,
        exception=ev.error,
    )


def _on_routine_failed(m: M, ev: Event) -> None:
    assert isinstance(ev, RoutineFailed)
    m._report(None, ev.message, fatal=True, exception=ev.error)
    if m.state is not S.FATAL:
        m.state = S.FATAL
        m._drop_everything("the member failed")


def _on_late_heartbeat(m: M, ev: Event) -> None:
    """An answer to a heartbeat sent before the member left or failed: bookkeeping only."""
    m.heartbeat_in_flight = False


def _ignore(m: M, ev: Event) -> None:
    pass


# --- the event table ------------------------------------------------------------------

Handler = Callable[["ShareMembership", Event], None]
Transition = table.Transition[ShareMemberState, Handler]


def _t(handler: Handler, *targets: S) -> Transition:
    return table.Transition(handler, frozenset(targets))


EVENT_TRANSITIONS: dict[tuple[ShareMemberState, type[Event]], Transition] = {}
"""(state, event type) -> Transition.  A missing pair is an illegal input."""

for _s in S:
    if _s is S.FATAL:
        continue
    EVENT_TRANSITIONS[(_s, CoordinatorFound)] = _t(_on_coordinator_found)
    EVENT_TRANSITIONS[(_s, CoordinatorLookupFailed)] = _t(_on_coordinator_lookup_failed)
    EVENT_TRANSITIONS[(_s, TopicNamesResolved)] = _t(_on_topic_names)
    EVENT_TRANSITIONS[(_s, TopicNamesLookupFailed)] = _t(_on_topic_names_failed)
    EVENT_TRANSITIONS[(_s, SessionTimeoutLearned)] = _t(_on_session_timeout)
    EVENT_TRANSITIONS[(_s, SessionTimeoutLookupFailed)] = _t(_on_session_lookup_failed)
    EVENT_TRANSITIONS[(_s, TimerFired)] = _t(_ignore)
    EVENT_TRANSITIONS[(_s, BrokerIncompatible)] = _t(_on_broker_incompatible)
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
for _ev in (
    CoordinatorFound,
    CoordinatorLookupFailed,
    TimerFired,
    CloseRequested,
    UnsubscribeRequested,
    Subscribed,
    TopicNamesResolved,
    TopicNamesLookupFailed,
    SessionTimeoutLearned,
    SessionTimeoutLookupFailed,
    BrokerIncompatible,
):
    EVENT_TRANSITIONS[(S.FATAL, _ev)] = _t(_ignore)
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
