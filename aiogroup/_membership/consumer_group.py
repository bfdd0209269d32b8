"""The consumer-protocol (KIP-848) membership machine: every decision, none of the I/O.

What belongs here.  All of a consumer-protocol member's decisions: when to
heartbeat and what the heartbeat carries, how a target assignment from the
coordinator is reconciled (revoke first, then assign, then acknowledge), what
each ConsumerGroupHeartbeat error code does, how the member leaves, and what a
commit's error code means for the committer.  Nothing about sockets, tasks or
clocks: time comes in as ``now``; the shell performs the returned actions and
feeds back what happened.

How it works (h11's two tables).  ``handle(event, now)`` looks up
``(state, type(event))`` in :data:`EVENT_TRANSITIONS`; a miss is an illegal input
(the machine enters FATAL and raises :class:`ConsumerMembershipError`).  The
handler updates the machine's data and may move it only to one of the entry's
declared targets.  Then the ordered (sources, guard, target, reason) rules of
:data:`STATE_RULES` are applied until none fires; the first whose guard holds
moves the machine and runs the rule's entry step.  Last, the scheduler decides
whether a heartbeat or a coordinator lookup goes out now.  The diagram in
docs/architecture.md is drawn from both tables.

Facts (from Apache Kafka's ConsumerMembershipManager/AbstractMembershipManager,
ConsumerHeartbeatRequestManager and KIP-848):

* Join with epoch 0 and the full state: rebalance timeout, subscription, server
  assignor and an *empty* owned-partitions list.  Afterwards a field is sent only
  when it changed since the last heartbeat (or after an error, which resets what
  was "sent").  The member id is the client's own (KIP-1082) and kept across rejoins.
* The heartbeat interval is the coordinator's (``heartbeat_interval_ms``).
* A new target is reconciled revoke-first: ``on_partitions_revoked`` (only when
  something is revoked) runs while heartbeats keep flowing, then the fetch
  assignment is set and ``on_partitions_assigned`` runs once per reconciliation,
  even with nothing added; the next heartbeat carries the new owned partitions
  (ACKNOWLEDGING) and its success makes the member STABLE.
* FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID: ``on_partitions_lost`` (when owning
  anything), then rejoin with epoch 0.  FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID,
  GROUP_AUTHORIZATION_FAILED, INVALID_REQUEST, GROUP_MAX_SIZE_REACHED,
  UNSUPPORTED_ASSIGNOR, UNSUPPORTED_VERSION, INVALID_REGULAR_EXPRESSION and any code
  the RPC does not document are fatal.
* Leaving revokes what is owned, then sends epoch -1 (a static member: -2, so its
  ``group_instance_id`` keeps its assignment until the session expires).
* A poll gap over ``max_poll_interval`` leaves the group (STALE); the next poll rejoins.
  A poll waiting for records is polling (Java's poll(), aiokafka's fetch waiters): only
  an application that stops asking is taken out.
* The coordinator fences a member whose session (group.consumer.session.timeout.ms,
  or the group's consumer.session.timeout.ms) passed without a heartbeat; its
  session restarts when a heartbeat *arrives*.  So the member is surely still in
  the group until (send time of its last acknowledged heartbeat) + the session:
  :meth:`ConsumerMembership.membership_valid_until`, the shell's delivery gate.
  Until the shell learned the session (:class:`SessionTimeoutLearned`) the bound is
  the coordinator's heartbeat interval, which Kafka requires to be less than the
  session timeout (GroupCoordinatorConfig, GroupConfig): shorter, never later.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from aiogroup._membership import table
from aiogroup._membership.actions import (
    Action,
    AutoCommit,
    FindCoordinator,
    InvokeOnPartitionsAssigned,
    InvokeOnPartitionsLost,
    InvokeOnPartitionsRevoked,
    LogWarning,
    LookupSessionTimeout,
    RaiseToApplication,
    RefreshCommittedOffsets,
    RequestMetadata,
    SendConsumerGroupHeartbeat,
    SetAssignment,
)
from aiogroup._membership.backoff import Retrying, RetryPolicy
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.codes import code_name as code_name  # read by the tests here
from aiogroup._membership.commit_outcomes import CommitGate
from aiogroup._membership.events import (
    ApplicationPolled,
    BrokerIncompatible,
    CloseRequested,
    CommittedOffsetsUnavailable,
    ConsumerGroupHeartbeatFailed,
    ConsumerGroupHeartbeatResponseReceived,
    CoordinatorFound,
    CoordinatorLookupFailed,
    Event,
    Listener,
    ListenerCompleted,
    RoutineFailed,
    SessionTimeoutLearned,
    SessionTimeoutLookupFailed,
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
    "ConsumerMemberState",
    "ConsumerMembership",
    "ConsumerMembershipError",
    "HeartbeatReaction",
    "heartbeat_reaction",
    "mermaid_diagram",
]

#: A partition by topic name: ``(topic, partition)``, equal to (and hashed like) the
#: TopicPartition named tuple the shell builds from it.  The machine does not import
#: aiogroup.structs, which pulls in aiokafka.
TopicPartition = tuple[str, int]
IdPartition = tuple[uuid.UUID, int]
IdPartitions = frozenset[IdPartition]
_NONE: IdPartitions = frozenset()

#: member_epoch sentinels (ConsumerGroupHeartbeatRequest.json).
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2


class ConsumerMemberState(enum.Enum):
    """The Java client's MemberState names (Kafka users know them from its logs)."""

    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    RECONCILING = "RECONCILING"
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"
    FENCED = "FENCED"
    PREPARE_LEAVING = "PREPARE_LEAVING"
    LEAVING = "LEAVING"
    #: Left because the application stopped polling; the next poll rejoins.
    STALE = "STALE"
    #: Terminal: an unrecoverable error was raised to the application.
    FATAL = "FATAL"


S = ConsumerMemberState
#: States in which the member is in the group and heartbeats at the broker's interval.
_IN_GROUP = frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE, S.PREPARE_LEAVING})
#: States that may take a new target assignment (Java: RECONCILING's previous states).
_CAN_RECONCILE = frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE})


C = ErrorCode


#: The events this machine takes (its table names each in some state).
EVENT_TYPES: tuple[type[Event], ...] = (
    Subscribed,
    UnsubscribeRequested,
    CloseRequested,
    CoordinatorFound,
    CoordinatorLookupFailed,
    ConsumerGroupHeartbeatResponseReceived,
    ConsumerGroupHeartbeatFailed,
    ListenerCompleted,
    TopicNamesResolved,
    TopicNamesLookupFailed,
    ApplicationPolled,
    TimerFired,
    SessionTimeoutLearned,
    SessionTimeoutLookupFailed,
    BrokerIncompatible,
    CommittedOffsetsUnavailable,
    RoutineFailed,
)


#: Every action this machine can return (the shell has a performer for each).
ACTION_TYPES: frozenset[type[Action]] = frozenset(
    {
        AutoCommit,
        FindCoordinator,
        LookupSessionTimeout,
        SendConsumerGroupHeartbeat,
        SetAssignment,
        InvokeOnPartitionsRevoked,
        InvokeOnPartitionsAssigned,
        InvokeOnPartitionsLost,
        RequestMetadata,
        RefreshCommittedOffsets,
        RaiseToApplication,
        LogWarning,
    }
)


class ConsumerMembershipError(RuntimeError):
    """The machine got an event it has no transition for (a bug in its caller)."""


# --- error tables ---------------------------------------------------------------------


H = HeartbeatReaction
#: ConsumerGroupHeartbeatResponse.json's documented codes (v0-v1) and what each does.
HEARTBEAT_REACTIONS: dict[int, HeartbeatReaction] = {
    **COMMON_HEARTBEAT_REACTIONS,
    C.UNSUPPORTED_ASSIGNOR: H.FATAL,
    C.UNRELEASED_INSTANCE_ID: H.FATAL,
    C.FENCED_INSTANCE_ID: H.FATAL,
    C.INVALID_REGULAR_EXPRESSION: H.FATAL,
}


def heartbeat_reaction(code: int) -> HeartbeatReaction:
    """Undocumented codes are fatal, as in Java's heartbeat manager."""
    return HEARTBEAT_REACTIONS.get(code, H.FATAL)


_FATAL_HINTS: dict[int, str] = {
    C.UNSUPPORTED_VERSION: (
        "the broker does not support the consumer group protocol (KIP-848); "
        "use group_protocol='classic' until it is upgraded"
    ),
    C.UNSUPPORTED_ASSIGNOR: "group_remote_assignor names an assignor the broker does not have",
    C.UNRELEASED_INSTANCE_ID: "another member still holds this group_instance_id",
    C.FENCED_INSTANCE_ID: "another member took over this group_instance_id",
}


# --- the machine ----------------------------------------------------------------------


class LeaveReason(enum.Enum):
    UNSUBSCRIBE = "unsubscribe"
    CLOSE = "close"
    POLL_TIMEOUT = "max_poll_interval exceeded"


@dataclass(slots=True)
class _Sent:
    """What the last heartbeats told the coordinator (Java's SentFields)."""

    rebalance_timeout_ms: int = -1
    topics: frozenset[str] | None = None
    regex: str | None = None
    assignor: str | None = None
    owned: IdPartitions | None = None


@dataclass(slots=True)
class _Reconciliation:
    """The one reconciliation in progress: where it is going and what is left to do."""

    goal: IdPartitions
    revoked: IdPartitions
    added: IdPartitions
    #: "revoke" until on_partitions_revoked returned, then "assign", then "done".
    step: str = "revoke"


@dataclass(slots=True)
class _Config:
    group_id: str
    member_id: str
    instance_id: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int
    retry_backoff: float
    max_poll_interval: float
    auto_commit: bool
    #: Seconds between interval auto-commits (None: auto-commit is off).
    auto_commit_interval: float | None


class ConsumerMembership(HeartbeatMember[ConsumerMemberState]):
    """One consumer-protocol member.  ``handle(event, now) -> actions``; no I/O inside."""

    _ERROR = ConsumerMembershipError
    _LOOKUP_FOR = "heartbeat"
    _RULE_ROUNDS = 32

    def __init__(
        self,
        group_id: str,
        member_id: str,
        *,
        instance_id: str | None = None,
        server_assignor: str | None = None,
        rebalance_timeout_ms: int = 300_000,
        retry_backoff: float = 0.1,
        max_poll_interval: float = 300.0,
        auto_commit: bool = True,
        auto_commit_interval: float | None = None,
        learn_session_timeout: bool = False,
        now: float = 0.0,
    ) -> None:
        check_ids(group_id, member_id)
        if rebalance_timeout_ms <= 0 or retry_backoff <= 0 or max_poll_interval <= 0:
            raise ValueError("timeouts and backoff must be positive")
        if auto_commit_interval is not None and auto_commit_interval <= 0:
            raise ValueError("auto_commit_interval must be > 0 or None (no interval commits)")
        # The coordinator is looked up again one fixed backoff after each failure.
        super().__init__(
            group_id,
            member_id,
            initial=S.UNSUBSCRIBED,
            fatal=S.FATAL,
            in_group=_IN_GROUP,
            retry_backoff=retry_backoff,
            coordinator_policy=RetryPolicy(retry_backoff, retry_backoff, multiplier=1.0),
            learn_session_timeout=learn_session_timeout,
            now=now,
        )
        self.config = _Config(
            group_id,
            member_id,
            instance_id,
            server_assignor,
            rebalance_timeout_ms,
            retry_backoff,
            max_poll_interval,
            auto_commit,
            auto_commit_interval if auto_commit else None,
        )
        #: When the next interval auto-commit is due (Java's auto-commit timer).
        self.next_auto_commit = now + (auto_commit_interval or 0.0)
        self.member_epoch = JOIN_EPOCH
        self.regex: str | None = None
        self.owned: IdPartitions = _NONE
        self.reconciliation: _Reconciliation | None = None
        #: The listener running now (listeners never overlap), and those waiting.
        self.listener: Listener | None = None
        self.queued: list[Action] = []
        #: The partitions the running on_partitions_revoked releases (empty: none runs).
        #: When it returns they leave the fetcher, whatever overtook the revoke.
        self.revoking: frozenset[TopicPartition] = frozenset()
        self.sent = _Sent()
        #: The owned partitions the in-flight heartbeat reports (None: not reported).
        self.inflight_owned: IdPartitions | None = None
        #: True once a heartbeat carrying ``owned`` was answered without error.
        self.acknowledged = False
        self.last_poll = now
        #: A getone/getmany is waiting for records now: the application is polling.
        self.poll_waiting = False
        #: The application polled after the member started leaving for want of a poll.
        self.polled_since_poll_leave = False
        #: When the member last started leaving for want of a poll.
        self.poll_left_at = now
        self.leave_reason: LeaveReason | None = None
        #: Looking up committed offsets again after a failed lookup (the shell's refresh
        #: task asks first, on each new assignment): one backoff after each failure.
        self.committed_refresh = Retrying(RetryPolicy(retry_backoff, retry_backoff), due_at=None)

    # -- the hooks of HeartbeatMember ----------------------------------------------------

    def _event_table(self) -> dict[tuple[ConsumerMemberState, type[Event]], Transition]:
        return EVENT_TRANSITIONS

    def _state_rules(self) -> tuple[Rule, ...]:
        return STATE_RULES

    def _urgent(self) -> bool:
        return urgent_heartbeat(self)

    def _after_step(self) -> None:
        self._refresh_committed()
        self._auto_commit_on_interval()

    def _own_deadlines(self) -> list[float]:
        """The poll rule, interval auto-commits and the committed-offset refresh."""
        deadlines: list[float] = []
        if self.state in _IN_GROUP and not self.poll_waiting:
            deadlines.append(self.last_poll + self.config.max_poll_interval)
        if self.config.auto_commit_interval is not None and self.state is not S.FATAL:
            deadlines.append(self.next_auto_commit)
        if self.state is not S.FATAL:
            deadlines.extend(self.committed_refresh.deadline())
        return deadlines

    # -- public API --------------------------------------------------------------------

    def commit_gate(self) -> CommitGate:
        if self.state is S.FATAL:
            return CommitGate(
                self.member_epoch, self.member_id, "the member failed fatally", stopped=True
            )
        if self.member_epoch <= 0 or self.state not in _IN_GROUP:
            return CommitGate(
                self.member_epoch,
                self.member_id,
                f"not a member of group {self.config.group_id!r} (state {self.state.value})",
            )
        return CommitGate(self.member_epoch, self.member_id)

    @property
    def finished(self) -> bool:
        """Nothing more will happen: failed, or left after close()."""
        return self.state is S.FATAL or (
            self.state is S.UNSUBSCRIBED and self.leave_reason is LeaveReason.CLOSE
        )

    @property
    def awaiting_poll(self) -> bool:
        """Out of the group for want of a poll: only the application's next poll moves it."""
        return self.state is S.STALE and self.leave_reason is LeaveReason.POLL_TIMEOUT

    @property
    def joined(self) -> bool:
        """In the group with an assignment installed: reconciling, acknowledging or stable."""
        return self.state in (S.RECONCILING, S.ACKNOWLEDGING, S.STABLE)

    def owned_partitions(self) -> frozenset[TopicPartition]:
        return self._named(self.owned)

    # -- helpers -----------------------------------------------------------------------

    def _stop_fetching(self) -> None:
        """The fetcher stops serving everything (leaving, fenced, failed), if it served any."""
        if self.fetching:
            self._emit(SetAssignment(frozenset()))

    def _named(self, parts: IdPartitions) -> frozenset[TopicPartition]:
        return frozenset((self.names[tid], p) for tid, p in parts)

    def _invoke(self, action: Action) -> None:
        """Start a listener now, or after the one running (they never overlap)."""
        if self.listener is None:
            self._start_listener(action)
        else:
            self.queued.append(action)

    def _start_listener(self, action: Action) -> None:
        self.listener = _LISTENER_OF[type(action)]
        if isinstance(action, InvokeOnPartitionsRevoked):
            self.revoking = action.partitions
        self._emit(action)

    def _queued_revocations_become_lost(self) -> bool:
        """The membership is gone: what waits to be revoked is lost instead (Java).

        Only a listener not started yet can change; one already running finishes.
        True when some revocation was turned into a loss.
        """
        queued = [
            InvokeOnPartitionsLost(a.partitions) if isinstance(a, InvokeOnPartitionsRevoked) else a
            for a in self.queued
        ]
        changed = queued != self.queued
        self.queued = queued
        return changed

    def _reconcilable_target(self) -> IdPartitions | None:
        if self.target is None:
            return None
        return frozenset(tp for tp in self.target if tp[0] in self.names)

    def _reset_sent(self) -> None:
        self.sent = _Sent()

    def _wants_heartbeat(self) -> bool:
        if self.state is S.PREPARE_LEAVING:
            # Still a member while releasing; after a fence there is nothing to keep alive
            # (and an epoch-0 heartbeat would be a join).
            return self.member_epoch > 0
        return self.state in _IN_GROUP or self.state is S.LEAVING

    def _fail(self, code: int, message: str | None) -> None:
        text = heartbeat_error_text("ConsumerGroupHeartbeat", code, message, _FATAL_HINTS.get(code))
        self._report(code, text, fatal=True)
        held = _held(self)
        self.owned = _NONE
        self.reconciliation = None
        self.state = S.FATAL
        self._queued_revocations_become_lost()
        if held:
            self._invoke(InvokeOnPartitionsLost(self._named(held)))
        self._stop_fetching()

    # -- scheduler: what goes out now --------------------------------------------------

    def _refresh_committed(self) -> None:
        """A committed-offset lookup failed: ask again once its backoff has passed."""
        if self.state is not S.FATAL and self.committed_refresh.due(self.now):
            self.committed_refresh.sent()
            self._emit(RefreshCommittedOffsets())

    def _auto_commit_on_interval(self) -> None:
        """Every auto_commit_interval: commit the consumed positions while in the group
        (Java's auto-commit timer; out of the group the turn passes without a commit)."""
        interval = self.config.auto_commit_interval
        if interval is None or self.now < self.next_auto_commit:
            return
        self.next_auto_commit = self.now + interval
        if self.in_group:
            self._emit(AutoCommit("auto_commit_interval_ms elapsed"))

    def _heartbeat(self) -> SendConsumerGroupHeartbeat:
        cfg = self.config
        self.heartbeat_in_flight = True
        self.heartbeat_sent_at = self.now
        if self.state is S.LEAVING:
            self.inflight_owned = None
            self.leave_sent = True
            # Java: a static member always leaves with -2, so its instance id keeps
            # the assignment until the session expires or it comes back.
            return SendConsumerGroupHeartbeat(
                self.member_id,
                LEAVE_EPOCH if cfg.instance_id is None else LEAVE_STATIC_EPOCH,
                cfg.instance_id,
            )
        full = self.state is S.JOINING
        sent = self.sent
        rebalance = -1
        if full or sent.rebalance_timeout_ms != cfg.rebalance_timeout_ms:
            rebalance = sent.rebalance_timeout_ms = cfg.rebalance_timeout_ms
        names: tuple[str, ...] | None = None
        regex: str | None = None
        if self.regex is not None:
            if full or sent.regex != self.regex:
                regex = sent.regex = self.regex
        elif full or sent.topics != self.topics:
            names = tuple(sorted(self.topics))
            sent.topics = self.topics
        assignor: str | None = None
        if cfg.server_assignor is not None and (full or sent.assignor != cfg.server_assignor):
            assignor = sent.assignor = cfg.server_assignor
        owned: dict[uuid.UUID, tuple[int, ...]] | None = None
        # Joining: an empty list (the broker requires it).  Later: only when changed.
        reported = _NONE if self.member_epoch == JOIN_EPOCH else self.owned
        if full or sent.owned != reported:
            grouped: dict[uuid.UUID, list[int]] = {}
            for tid, p in reported:
                grouped.setdefault(tid, []).append(p)
            owned = {tid: tuple(sorted(ps)) for tid, ps in grouped.items()}
            sent.owned = reported
            self.inflight_owned = reported
        else:
            self.inflight_owned = None
        return SendConsumerGroupHeartbeat(
            self.member_id,
            self.member_epoch,
            cfg.instance_id,
            rebalance,
            names,
            regex,
            assignor,
            owned,
        )


# --- event handlers (referenced by the event table) -----------------------------------

M = ConsumerMembership


def urgent_heartbeat(m: M) -> bool:
    """Must the next heartbeat go out now rather than at the broker's interval?

    Joining (epoch 0), acknowledging a reconciliation not yet reported, and leaving.
    """
    if m.state is S.JOINING:
        return m.member_epoch == JOIN_EPOCH
    if m.state is S.ACKNOWLEDGING:
        return m.sent.owned != m.owned
    return m.state is S.LEAVING


def _held(m: M) -> IdPartitions:
    """What the member holds as far as its listeners know, mid-reconciliation included.

    During the revoke step the running on_partitions_revoked releases ``revoked``;
    from the assign step on, the fetcher already serves the goal.
    """
    rec = m.reconciliation
    if rec is None:
        return m.owned
    if rec.step == "revoke":
        return m.owned - rec.revoked
    return rec.goal


def _on_subscribed(m: M, ev: Event) -> None:
    assert isinstance(ev, Subscribed)
    m.topics, m.regex = ev.topics, ev.regex
    if m.state in (S.PREPARE_LEAVING, S.LEAVING):
        m.resubscribed = True
        return
    if m.state in (S.UNSUBSCRIBED, S.STALE):
        m.leave_reason = None
        m.last_poll = m.now
        _start_joining(m)


def _start_joining(m: M) -> None:
    m.state = S.JOINING
    m.member_epoch = JOIN_EPOCH
    m.target = None
    m.acknowledged = False
    m._reset_sent()


def _on_leave_requested(m: M, ev: Event) -> None:
    reason = LeaveReason.CLOSE if isinstance(ev, CloseRequested) else LeaveReason.UNSUBSCRIBE
    m.resubscribed = False
    if m.state in (S.UNSUBSCRIBED, S.STALE):
        m.leave_reason = reason
        return
    if m.state in (S.PREPARE_LEAVING, S.LEAVING):
        # Close wins over unsubscribe (a static member leaves with -2 on close only).
        if reason is LeaveReason.CLOSE:
            m.leave_reason = reason
        return
    m.leave_reason = reason
    _prepare_leaving(m)


def _prepare_leaving(m: M) -> None:
    """Release what is owned: revoked while a member, lost when the epoch is gone (Java)."""
    m.state = S.PREPARE_LEAVING
    held = _held(m)
    m.reconciliation = None
    m.owned = _NONE
    if held:
        if m.member_epoch > 0:
            action: Action = InvokeOnPartitionsRevoked(
                m._named(held), commit_first=m.config.auto_commit
            )
            m._invoke(action)
            # The fetcher keeps the assignment until the revoke (and the auto-commit
            # before it, which reads the positions) returned; the shell stops fetching
            # the revoked partitions meanwhile.  The rules leaving PREPARE_LEAVING clear it.
            return
        m._invoke(InvokeOnPartitionsLost(m._named(held)))
    m._stop_fetching()


def _on_heartbeat_failed(m: M, ev: Event) -> None:
    assert isinstance(ev, ConsumerGroupHeartbeatFailed)
    m.heartbeat_in_flight = False
    m.inflight_owned = None
    m._reset_sent()
    if m.state is S.LEAVING and m.leave_sent:
        _finish_leaving(m)
        return
    # A lost connection usually means a moved coordinator: look it up again.
    m._coordinator_lost()
    m.next_heartbeat_at = m.now + m.config.retry_backoff


def _on_heartbeat_response(m: M, ev: Event) -> None:
    assert isinstance(ev, ConsumerGroupHeartbeatResponseReceived)
    if not m.heartbeat_in_flight:
        return  # pragma: no cover - the shell has one heartbeat in flight at most
    m.heartbeat_in_flight = False
    reported, m.inflight_owned = m.inflight_owned, None
    if m.state is S.LEAVING:
        if m.leave_sent:
            _finish_leaving(m)  # whatever the answer, the member is out
        return
    reaction = heartbeat_reaction(ev.error_code)
    if reaction is not H.OK:
        m._reset_sent()
    if reaction is H.OK:
        m._heartbeat_accepted(ev.member_id, ev.member_epoch, ev.heartbeat_interval_ms)
        if ev.assignment is not None and m.state in _CAN_RECONCILE:
            m.target = frozenset((tid, p) for tid, parts in ev.assignment.items() for p in parts)
            m._lookup_names()
        if reported is not None and reported == m.owned:
            m.acknowledged = True
    elif reaction is H.FIND_COORDINATOR:
        # Look the coordinator up again after a backoff (a group's coordinator may
        # still be loading), then heartbeat at once.
        m._coordinator_lost()
    elif reaction in (H.RETRY_BACKOFF, H.REPORT_RETRY):
        m._retry_later(
            "ConsumerGroupHeartbeat",
            ev.error_code,
            ev.error_message,
            report=reaction is H.REPORT_RETRY,
        )
    elif reaction is H.FENCED:
        _fence(m)
    else:
        m._fail(ev.error_code, ev.error_message)


def _fence(m: M) -> None:
    """The coordinator no longer knows this epoch: the partitions are lost, not revoked."""
    m.member_epoch = JOIN_EPOCH
    m.target = None
    if m.state is S.PREPARE_LEAVING:
        # Leaving anyway; the coordinator already dropped us, no leave heartbeat needed
        # (the epoch-0 rules of PREPARE_LEAVING end the leave).  A revoke the leave
        # queued behind a running listener is now a loss: as on any other fence the
        # fetcher stops before it starts (the shell marks only revocations).
        if m._queued_revocations_become_lost():
            m._stop_fetching()
        return
    held = _held(m)
    m.reconciliation = None
    m.owned = _NONE
    m.state = S.FENCED
    if held:
        m._invoke(InvokeOnPartitionsLost(m._named(held)))
    m._stop_fetching()


def _finish_leaving(m: M) -> None:
    m.member_epoch = JOIN_EPOCH
    m.target = None
    m.leave_sent = False
    m.state = S.STALE if m.leave_reason is LeaveReason.POLL_TIMEOUT else S.UNSUBSCRIBED


def _on_listener_completed(m: M, ev: Event) -> None:
    assert isinstance(ev, ListenerCompleted)
    if ev.kind is not m.listener:
        m.state = S.FATAL
        raise ConsumerMembershipError(f"{ev.kind.method} completed but {m.listener} was running")
    m.listener = None
    released, m.revoking = m.revoking, frozenset()
    if ev.error is not None:
        m._report(None, f"{ev.kind.method} raised: {ev.error!r}", fatal=False, exception=ev.error)
    rec = m.reconciliation
    if rec is not None and m.state is S.RECONCILING:
        if ev.kind is Listener.REVOKED and rec.step == "revoke":
            _assign_step(m, rec)
        elif ev.kind is Listener.ASSIGNED and rec.step == "assign":
            rec.step = "done"
            m.owned = rec.goal
            m.acknowledged = False
            # Report the partitions on the next heartbeat even if the set looks
            # unchanged (Java's local assignment epoch does the same).
            m.sent.owned = None
    if ev.kind is Listener.REVOKED and m.fetching & released:
        # The revoke was overtaken (a leave dropped its reconciliation, so no assign
        # step follows): the revoked partitions still leave the fetcher now.
        m._emit(SetAssignment(m.fetching - released))
    if m.queued and m.listener is None:
        m._start_listener(m.queued.pop(0))


def _assign_step(m: M, rec: _Reconciliation) -> None:
    rec.step = "assign"
    m._emit(SetAssignment(m._named(rec.goal)))
    m._invoke(InvokeOnPartitionsAssigned(m._named(rec.added), m.member_epoch))


def _on_polled(m: M, ev: Event) -> None:
    """The poll rule's input: a waiting poll is polling; after a poll leave, a rejoin is due."""
    assert isinstance(ev, ApplicationPolled)
    m.last_poll = min(ev.at, m.now)
    m.poll_waiting = ev.waiting
    if m.leave_reason is LeaveReason.POLL_TIMEOUT:
        # Also while the leave is still under way: the STALE rule rejoins when it ends.
        m.polled_since_poll_leave = True


def _on_late_heartbeat(m: M, ev: Event) -> None:
    """An answer to a heartbeat sent before the member left the group: only bookkeeping."""
    m.heartbeat_in_flight = False
    m.inflight_owned = None


def _on_committed_unavailable(m: M, ev: Event) -> None:
    """Only what asking again cannot cure reaches the application."""
    assert isinstance(ev, CommittedOffsetsUnavailable)
    m.committed_refresh.failed(m.now)
    if not ev.retriable:
        why = f"cannot fetch committed offsets: {ev.error!r}"
        m._report(None, why, fatal=False, exception=ev.error)


def _on_routine_failed(m: M, ev: Event) -> None:
    """The shell broke: finished here (no listener can run any more)."""
    assert isinstance(ev, RoutineFailed)
    m._report(None, ev.message, fatal=True, exception=ev.error)
    m.state = S.FATAL


_LISTENER_OF: dict[type[Action], Listener] = {
    InvokeOnPartitionsRevoked: Listener.REVOKED,
    InvokeOnPartitionsAssigned: Listener.ASSIGNED,
    InvokeOnPartitionsLost: Listener.LOST,
}


# --- the event table ------------------------------------------------------------------


Handler = Callable[["ConsumerMembership", Event], None]
Transition = table.Transition[ConsumerMemberState, Handler]


_t = table.transition


_MEMBER = (S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE)
EVENT_TRANSITIONS: dict[tuple[ConsumerMemberState, type[Event]], Transition] = {}
"""(state, event type) -> Transition.  A missing pair is an illegal input."""

# Coordinator, topic names, session timeout, timers, an incompatible broker: the
# plumbing of every heartbeat member (FATAL swallows them).
add_plumbing(EVENT_TRANSITIONS, S, S.FATAL)
for _s in S:
    if _s is S.FATAL:
        continue
    EVENT_TRANSITIONS[(_s, ApplicationPolled)] = _t(_on_polled)
    EVENT_TRANSITIONS[(_s, ListenerCompleted)] = _t(_on_listener_completed)
    EVENT_TRANSITIONS[(_s, ConsumerGroupHeartbeatResponseReceived)] = _t(_on_late_heartbeat)
    EVENT_TRANSITIONS[(_s, ConsumerGroupHeartbeatFailed)] = _t(_on_late_heartbeat)
    EVENT_TRANSITIONS[(_s, CommittedOffsetsUnavailable)] = _t(_on_committed_unavailable)
    EVENT_TRANSITIONS[(_s, RoutineFailed)] = _t(_on_routine_failed, S.FATAL)
for _s in (S.UNSUBSCRIBED, S.STALE):
    EVENT_TRANSITIONS[(_s, Subscribed)] = _t(_on_subscribed, S.JOINING)
    EVENT_TRANSITIONS[(_s, UnsubscribeRequested)] = _t(_on_leave_requested)
    EVENT_TRANSITIONS[(_s, CloseRequested)] = _t(_on_leave_requested)
for _s in (*_MEMBER, S.FENCED):
    EVENT_TRANSITIONS[(_s, Subscribed)] = _t(_on_subscribed)
    EVENT_TRANSITIONS[(_s, UnsubscribeRequested)] = _t(_on_leave_requested, S.PREPARE_LEAVING)
    EVENT_TRANSITIONS[(_s, CloseRequested)] = _t(_on_leave_requested, S.PREPARE_LEAVING)
for _s in (S.PREPARE_LEAVING, S.LEAVING):
    EVENT_TRANSITIONS[(_s, Subscribed)] = _t(_on_subscribed)
    EVENT_TRANSITIONS[(_s, UnsubscribeRequested)] = _t(_on_leave_requested)
    EVENT_TRANSITIONS[(_s, CloseRequested)] = _t(_on_leave_requested)
for _s in (*_MEMBER, S.PREPARE_LEAVING):
    EVENT_TRANSITIONS[(_s, ConsumerGroupHeartbeatResponseReceived)] = _t(
        _on_heartbeat_response, S.FENCED, S.FATAL
    )
    EVENT_TRANSITIONS[(_s, ConsumerGroupHeartbeatFailed)] = _t(_on_heartbeat_failed)
# Fenced while releasing: no FENCED detour, the leave ends without a leave heartbeat.
EVENT_TRANSITIONS[(S.PREPARE_LEAVING, ConsumerGroupHeartbeatResponseReceived)] = _t(
    _on_heartbeat_response, S.FATAL
)
EVENT_TRANSITIONS[(S.LEAVING, ConsumerGroupHeartbeatResponseReceived)] = _t(
    _on_heartbeat_response, S.UNSUBSCRIBED, S.STALE
)
EVENT_TRANSITIONS[(S.LEAVING, ConsumerGroupHeartbeatFailed)] = _t(
    _on_heartbeat_failed, S.UNSUBSCRIBED, S.STALE
)
# FATAL: the machine is finished; late answers, timers and a close are swallowed.
for _ev in (
    ApplicationPolled,
    CloseRequested,
    UnsubscribeRequested,
    Subscribed,
    CommittedOffsetsUnavailable,
):
    EVENT_TRANSITIONS[(S.FATAL, _ev)] = _t(ignore)
EVENT_TRANSITIONS[(S.FATAL, RoutineFailed)] = _t(_on_routine_failed)
EVENT_TRANSITIONS[(S.FATAL, ConsumerGroupHeartbeatResponseReceived)] = _t(_on_late_heartbeat)
EVENT_TRANSITIONS[(S.FATAL, ConsumerGroupHeartbeatFailed)] = _t(_on_late_heartbeat)
# The lost listener started on the way into FATAL still reports back.
EVENT_TRANSITIONS[(S.FATAL, ListenerCompleted)] = _t(_on_listener_completed)


# --- the state-triggered rules --------------------------------------------------------


#: The engine moves the machine to the rule's target, then runs its step.
RuleStep = Callable[["ConsumerMembership"], None]
Rule = table.StateRule[ConsumerMemberState, "ConsumerMembership", RuleStep]


def _poll_expired(m: M) -> bool:
    """No poll for max_poll_interval, and none waiting for records now."""
    return not m.poll_waiting and m.now >= m.last_poll + m.config.max_poll_interval


def _start_poll_leave(m: M) -> None:
    m.leave_reason = LeaveReason.POLL_TIMEOUT
    m.polled_since_poll_leave = False
    m._emit(
        LogWarning(
            f"the application has not polled (getone/getmany/getmany_arrow/async for) for "
            f"{m.now - m.last_poll:.1f}s, longer than max_poll_interval_ms "
            f"({m.config.max_poll_interval:g}s): leaving the group so its partitions go to "
            "live members; the next poll rejoins"
        )
    )
    m.poll_left_at = m.now
    _prepare_leaving(m)


def _polled_again(m: M) -> bool:
    return m.leave_reason is LeaveReason.POLL_TIMEOUT and m.polled_since_poll_leave


def _rejoin_after_poll_leave(m: M) -> None:
    m._emit(
        LogWarning(
            f"the application polled again {m.now - m.poll_left_at:.1f}s after this member "
            "left its group because max_poll_interval_ms "
            f"({m.config.max_poll_interval:g}s) passed without a poll: rejoining"
        )
    )
    m.leave_reason = None
    m.polled_since_poll_leave = False
    m.last_poll = m.now
    _start_joining(m)


def _new_target(m: M) -> bool:
    goal = m._reconcilable_target()
    return goal is not None and goal != m.owned and m.listener is None and not m.queued


def _start_reconciliation(m: M) -> None:
    goal = m._reconcilable_target()
    assert goal is not None
    rec = _Reconciliation(goal, m.owned - goal, goal - m.owned)
    m.reconciliation = rec
    if rec.revoked:
        m._invoke(InvokeOnPartitionsRevoked(m._named(rec.revoked), m.config.auto_commit))
    else:
        _assign_step(m, rec)


def _first_target_is_current(m: M) -> bool:
    """Joined, and the first assignment equals what is owned (e.g. nothing): assign anyway.

    Not while some of it names topics not resolved yet: that is not "nothing", and
    the names are on their way (RequestMetadata).
    """
    goal = m._reconcilable_target()
    return goal is not None and m.target == goal and goal == m.owned and m.member_epoch > 0


def _reconciled(m: M) -> bool:
    rec = m.reconciliation
    return rec is not None and rec.step == "done"


def _acknowledged(m: M) -> bool:
    return m.acknowledged and m._reconcilable_target() in (None, m.owned)


def _lost_done(m: M) -> bool:
    return m.listener is None and not m.queued


def _release_done(m: M) -> bool:
    return m.listener is None and not m.queued


def _end_fencing(m: M) -> None:
    m.member_epoch = JOIN_EPOCH
    m.target = None
    m.acknowledged = False
    m._reset_sent()


def _left_without_heartbeat(m: M) -> None:
    m.target = None
    m._stop_fetching()


def _start_leave_heartbeat(m: M) -> None:
    m._stop_fetching()


def _resubscribed(m: M) -> bool:
    return m.resubscribed and m.leave_reason is not LeaveReason.CLOSE


def _rejoin_after_leave(m: M) -> None:
    m.resubscribed = False
    m.leave_reason = None
    m.last_poll = m.now
    m.member_epoch = JOIN_EPOCH
    m.target = None
    m.acknowledged = False
    m._reset_sent()


def _nothing_to_leave(m: M) -> bool:
    """Released, and the coordinator does not count us (never joined, or fenced)."""
    return _release_done(m) and m.member_epoch == JOIN_EPOCH and not m.heartbeat_in_flight


def _member_released(m: M) -> bool:
    return _release_done(m) and m.member_epoch > 0


#: Ordered: the first rule whose source and guard match fires; then all are tried again.
STATE_RULES: tuple[Rule, ...] = (
    table.StateRule(
        "max-poll-interval-exceeded",
        frozenset(_MEMBER),
        _poll_expired,
        S.PREPARE_LEAVING,
        "max_poll_interval exceeded",
        _start_poll_leave,
    ),
    table.StateRule(
        "new-target-assignment",
        frozenset({S.JOINING, S.STABLE, S.ACKNOWLEDGING}),
        _new_target,
        S.RECONCILING,
        "new target assignment",
        _start_reconciliation,
    ),
    table.StateRule(
        "first-target-equals-owned",
        frozenset({S.JOINING}),
        _first_target_is_current,
        S.RECONCILING,
        "first target equals owned",
        _start_reconciliation,
    ),
    table.StateRule(
        "reconciled", frozenset({S.RECONCILING}), _reconciled, S.ACKNOWLEDGING, "reconciled"
    ),
    table.StateRule(
        "acknowledged", frozenset({S.ACKNOWLEDGING}), _acknowledged, S.STABLE, "acknowledged"
    ),
    table.StateRule(
        "partitions-lost",
        frozenset({S.FENCED}),
        _lost_done,
        S.JOINING,
        "partitions lost",
        _end_fencing,
    ),
    table.StateRule(
        "not-a-member-poll-timeout",
        frozenset({S.PREPARE_LEAVING}),
        lambda m: _nothing_to_leave(m) and m.leave_reason is LeaveReason.POLL_TIMEOUT,
        S.STALE,
        "not a member (poll timeout)",
        _left_without_heartbeat,
    ),
    table.StateRule(
        "not-a-member",
        frozenset({S.PREPARE_LEAVING}),
        _nothing_to_leave,
        S.UNSUBSCRIBED,
        "not a member",
        _left_without_heartbeat,
    ),
    table.StateRule(
        "partitions-released",
        frozenset({S.PREPARE_LEAVING}),
        _member_released,
        S.LEAVING,
        "partitions released",
        _start_leave_heartbeat,
    ),
    table.StateRule(
        "the-application-polled-again",
        frozenset({S.STALE}),
        _polled_again,
        S.JOINING,
        "the application polled again",
        _rejoin_after_poll_leave,
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
