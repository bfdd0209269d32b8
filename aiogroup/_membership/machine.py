"""The classic-protocol membership machine: every group decision, none of the I/O.

Why pure: rebalances and faults are where a consumer group goes wrong, so every path
must be a plain function call in a test.  Time comes in as ``now``, effects go out
as actions; :mod:`aiogroup._coordination.classic_routine` only performs them.

Why tables: one place to read what a member does.  :data:`TRANSITIONS` maps
(state, event type) to a handler and the states it may move to (a miss is a shell
bug and ends in FATAL); :data:`STATE_RULES` is the ordered (guard, target, reason)
list ``_advance`` applies from the resting states until nothing fires; error codes
react through one table per API (:data:`HEARTBEAT_ANSWERS` adds the state for
heartbeats; :data:`SESSION_ELAPSED` for a session without a proving answer).  The
diagram in docs/architecture.md is drawn from these tables.  EAGER and COOPERATIVE
differ only in the pre-join revocation.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership import table
from aiogroup._membership.backoff import Retrying, RetryPolicy
from aiogroup._membership.codes import ErrorCode, code_name
from aiogroup._membership.commit_outcomes import CommitGate
from aiogroup._membership.heartbeat import HeartbeatTimers

if TYPE_CHECKING:
    from aiogroup.structs import RebalanceProtocol, TopicPartition

__all__ = [
    "ACTION_TYPES",
    "AUTOMATIC_TRANSITIONS",
    "FIND_COORDINATOR_REACTIONS",
    "HEARTBEAT_ANSWERS",
    "HEARTBEAT_REACTIONS",
    "JOIN_GROUP_REACTIONS",
    "JOIN_GROUP_TIMEOUT_LAPSE",
    "LEAVE_GROUP_REACTIONS",
    "OFFSET_COMMIT_REACTIONS",
    "SESSION_ELAPSED",
    "SESSION_PROVING_CODES",
    "STATE_RULES",
    "SYNC_GROUP_REACTIONS",
    "SYNC_WAIT_WATCH",
    "TRANSITIONS",
    "HeartbeatAnswer",
    "MemberState",
    "Membership",
    "MembershipProtocolError",
    "Reaction",
    "StateRule",
    "heartbeat_answer",
    "mermaid_diagram",
    "reaction",
]

Partitions = frozenset["TopicPartition"]
_NO_PARTITIONS: frozenset[TopicPartition] = frozenset()


class MemberState(enum.Enum):
    """The Java client's four member states plus the stages aiogroup makes explicit."""

    #: Not a member of a generation in use (maybe holding an old generation to rejoin with).
    UNJOINED = "UNJOINED"
    #: A listener is releasing partitions (eager pre-join, cooperative post-sync, leaving).
    REVOKING = "REVOKING"
    #: JoinGroup in flight.
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    #: Joined; the leader is assigning and/or SyncGroup is in flight.
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    #: on_partitions_assigned is running for the generation just synced.
    ASSIGNING = "ASSIGNING"
    STABLE = "STABLE"
    #: on_partitions_lost is running: membership is gone, so is the right to commit.
    LOSING = "LOSING"
    #: LeaveGroup in flight.
    LEAVING = "LEAVING"
    CLOSED = "CLOSED"
    #: Terminal: an unrecoverable error was raised to the application.
    FATAL = "FATAL"


S = MemberState
_TERMINAL = frozenset({S.CLOSED, S.FATAL})
_RESTING = frozenset({S.UNJOINED, S.STABLE})
#: States in which the member holds a synced generation and must keep its session alive.
_HEARTBEATING = frozenset({S.STABLE, S.ASSIGNING, S.REVOKING})


class Reaction(enum.Enum):
    """What an error code does to the membership."""

    #: Nothing to do (success, or an error only the caller cares about).
    IGNORE = "ignore"
    #: Retry the same step after retry_backoff.
    RETRY_BACKOFF = "retry after backoff"
    #: The coordinator moved or is down: find it again, then retry.
    FIND_COORDINATOR = "find coordinator"
    #: The group is rebalancing: rejoin (eager members revoke first).
    REJOIN = "rejoin"
    #: Our generation/member id is gone: partitions lost, rejoin as a new member.
    LOSE = "membership lost"
    #: Another static member took our group_instance_id: lost, and fatal.
    FENCED = "fenced"
    #: Tell the application (next getmany raises), back off, retry.
    REPORT_RETRY = "report and retry"
    #: Tell the application and stop for good.
    FATAL = "fatal"
    #: JoinGroup v4+: the broker handed us a member id to join with; rejoin at once.
    REJOIN_WITH_MEMBER_ID = "rejoin with the given member id"


C = ErrorCode
R = Reaction

_COMMON: dict[int, Reaction] = {
    C.NONE: R.IGNORE,
    C.COORDINATOR_LOAD_IN_PROGRESS: R.RETRY_BACKOFF,
    C.COORDINATOR_NOT_AVAILABLE: R.FIND_COORDINATOR,
    C.NOT_COORDINATOR: R.FIND_COORDINATOR,
    C.REQUEST_TIMED_OUT: R.FIND_COORDINATOR,
    C.REBALANCE_IN_PROGRESS: R.REJOIN,
    C.ILLEGAL_GENERATION: R.LOSE,
    C.UNKNOWN_MEMBER_ID: R.LOSE,
    C.FENCED_INSTANCE_ID: R.FENCED,
    C.GROUP_AUTHORIZATION_FAILED: R.REPORT_RETRY,
}

#: JoinGroup.  A join that is itself answered REBALANCE_IN_PROGRESS (static members on
#: newer brokers) is retried after a backoff rather than in a tight loop.
JOIN_GROUP_REACTIONS: dict[int, Reaction] = {
    **_COMMON,
    C.REBALANCE_IN_PROGRESS: R.RETRY_BACKOFF,
    C.MEMBER_ID_REQUIRED: R.REJOIN_WITH_MEMBER_ID,
    C.INCONSISTENT_GROUP_PROTOCOL: R.FATAL,
    C.INVALID_SESSION_TIMEOUT: R.FATAL,
    C.INVALID_GROUP_ID: R.FATAL,
    C.GROUP_MAX_SIZE_REACHED: R.FATAL,
    C.UNSUPPORTED_VERSION: R.FATAL,
    C.INVALID_REQUEST: R.FATAL,
}
SYNC_GROUP_REACTIONS: dict[int, Reaction] = {
    **_COMMON,
    C.INCONSISTENT_GROUP_PROTOCOL: R.FATAL,
    C.UNSUPPORTED_VERSION: R.FATAL,
    C.INVALID_REQUEST: R.FATAL,
}
HEARTBEAT_REACTIONS: dict[int, Reaction] = {
    **_COMMON,
    C.UNSUPPORTED_VERSION: R.FATAL,
}
#: A leave is best effort: whatever the answer, the member is out afterwards.
LEAVE_GROUP_REACTIONS: dict[int, Reaction] = {
    C.NONE: R.IGNORE,
    C.UNKNOWN_MEMBER_ID: R.IGNORE,
    C.COORDINATOR_LOAD_IN_PROGRESS: R.IGNORE,
    C.COORDINATOR_NOT_AVAILABLE: R.FIND_COORDINATOR,
    C.NOT_COORDINATOR: R.FIND_COORDINATOR,
    C.FENCED_INSTANCE_ID: R.IGNORE,
    C.GROUP_AUTHORIZATION_FAILED: R.IGNORE,
    C.GROUP_ID_NOT_FOUND: R.IGNORE,
}
#: What a commit's answer does to the *membership*; the committing caller's own
#: outcome is in :data:`COMMIT_OUTCOMES`.
OFFSET_COMMIT_REACTIONS: dict[int, Reaction] = {
    **_COMMON,
    C.COORDINATOR_LOAD_IN_PROGRESS: R.IGNORE,
    C.GROUP_AUTHORIZATION_FAILED: R.IGNORE,
    C.UNKNOWN_TOPIC_OR_PARTITION: R.IGNORE,
    C.OFFSET_METADATA_TOO_LARGE: R.IGNORE,
    C.INVALID_COMMIT_OFFSET_SIZE: R.IGNORE,
    C.TOPIC_AUTHORIZATION_FAILED: R.IGNORE,
}
FIND_COORDINATOR_REACTIONS: dict[int, Reaction] = {
    C.NONE: R.IGNORE,
    C.COORDINATOR_NOT_AVAILABLE: R.RETRY_BACKOFF,
    C.COORDINATOR_LOAD_IN_PROGRESS: R.RETRY_BACKOFF,
    C.NOT_COORDINATOR: R.RETRY_BACKOFF,
    C.REQUEST_TIMED_OUT: R.RETRY_BACKOFF,
    C.GROUP_AUTHORIZATION_FAILED: R.REPORT_RETRY,
    C.INVALID_REQUEST: R.FATAL,
}
#: Reaction to a code a table does not list.
_DEFAULT_REACTION: dict[str, Reaction] = {
    "JoinGroup": R.FATAL,
    "SyncGroup": R.FATAL,
    "Heartbeat": R.REPORT_RETRY,
    "LeaveGroup": R.IGNORE,
    "OffsetCommit": R.IGNORE,
    "FindCoordinator": R.RETRY_BACKOFF,
}
_TABLES: dict[str, dict[int, Reaction]] = {
    "JoinGroup": JOIN_GROUP_REACTIONS,
    "SyncGroup": SYNC_GROUP_REACTIONS,
    "Heartbeat": HEARTBEAT_REACTIONS,
    "LeaveGroup": LEAVE_GROUP_REACTIONS,
    "OffsetCommit": OFFSET_COMMIT_REACTIONS,
    "FindCoordinator": FIND_COORDINATOR_REACTIONS,
}


def reaction(api: str, code: int) -> Reaction:
    """The membership's reaction to ``code`` in an answer from ``api``."""
    return _TABLES[api].get(code, _DEFAULT_REACTION[api])


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """What one Heartbeat answer means to a member in one state.

    ``keeps_session``: the answer proves the coordinator still knows this member
    in this generation, so it counts as a received heartbeat and restarts the
    client-side session clock.  ``reaction``: what the membership does about it.
    """

    keeps_session: bool
    reaction: Reaction


#: Answers that prove the coordinator still holds our member id and generation.  Kafka's
#: coordinator answers REBALANCE_IN_PROGRESS only after it found the member and checked
#: its generation, and it extends the member's session on that very heartbeat: it keeps
#: a heartbeating member through a rebalance for up to the rebalance timeout, waiting
#: for it to rejoin.  Java's heartbeat thread therefore counts that answer as received.
#: Treating it as "no proof" made a member whose revoke listener outlived the session
#: timeout declare itself dead while the broker was still waiting for it.
SESSION_PROVING_CODES = frozenset({C.NONE, C.REBALANCE_IN_PROGRESS})

#: What a member does when ``session_timeout`` passed in a heartbeating state with no
#: answer proving its session (it *lapsed*): suspect the *coordinator*, not the
#: membership - Java's heartbeat thread ("session timed out without receiving a
#: heartbeat response") marks the coordinator unknown, finds it again and keeps
#: member id and generation; only the broker ends a membership (UNKNOWN_MEMBER_ID,
#: ILLEGAL_GENERATION, FENCED_INSTANCE_ID -> LOSE/FENCED).  A coordinator failover
#: (the controller fences a dead broker after ``broker.session.timeout.ms``, 9 s by
#: default) can outlast the session, and the new coordinator restarts every member's
#: session when it loads the group: forgetting the member id there made every member
#: rejoin as a new one and the broker evict the old ids.
#:
#: aiogroup keeps its stronger safety on top.  From the lapse on, the proof deadline
#: (the shell's delivery gate, ``SubscriptionState.membership_valid_until``) has
#: passed: no record is handed out and commits are refused.  Partitions still owned
#: when the member next rests are *lost* to the application (the "lost" state rule):
#: the lapse is the earliest moment the broker may have evicted the member and handed
#: them on, so a running application must learn it then, not when a network cut heals
#: - Java's does not, and the chaos scenario "one member's connection cut for twice
#: the session" measured the overlap that follows (gate alone: 2 overlaps of ~2.3 s).
#: Then the member rejoins *under the same member id and generation*; the broker
#: judges it (Kafka gives a follower whose metadata is unchanged its current
#: assignment back without a rebalance, or answers UNKNOWN_MEMBER_ID).  A proving
#: answer that arrives while a listener still runs (REVOKING/ASSIGNING), or to a
#: member owning nothing, ends the lapse instead: an answer in
#: :data:`SESSION_PROVING_CODES` for the same (member id, generation) means the
#: group's generation did not move - it moves only by a rebalance completed without
#: us, which removes us and makes the answer UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION -
#: so nobody was given our partitions, and the gate reopens with a fresh deadline.
#: With no coordinator ever found (brokers gone) the member waits, as Java's does:
#: looking the coordinator up every ``retry_backoff``; ``stop()`` is bounded by its
#: own timeout.
SESSION_ELAPSED = R.FIND_COORDINATOR

#: States in which a cooperative member may own partitions with no heartbeat running:
#: its JoinGroup or SyncGroup is in flight (KIP-429 keeps consuming through them).
_JOIN_PHASE = frozenset({S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE})

#: The fraction of the session the event loop may go unseen, in the join phase with
#: partitions owned, before the membership is in doubt (the *loop watch*).
#:
#: While its JoinGroup or SyncGroup is pending, the broker keeps the member (Kafka
#: expires neither a member awaiting its join nor one awaiting its sync); once the
#: answer is sent, the member has a session to act on it.  A running loop reads that
#: answer within milliseconds, so the member is safe - unless the process stood still
#: (SIGSTOP, a long GC or a blocking call on the loop) while the answer waited: then
#: the session may have run out, the broker removed the member and gave its
#: partitions to others, and on waking the fetcher would still hand them out until
#: the stale answer was read and the SyncGroup failed.  No heartbeat runs here to
#: prove anything.  So the machine watches its own loop: it asks to be woken every
#: ``min(heartbeat_interval, limit / 3)`` and publishes ``last step + limit`` as the
#: delivery gate; a step that finds the loop unseen for ``limit`` or more latches the
#: gate shut and loses the generation (``_lose``): the stale answer is not taken, the
#: partitions owned are *lost* to the application when the join phase ends (as for a
#: lapsed session), and the member joins again.  Only a broker can tell whether it
#: was removed, and a broker that readmits a removed member (Tansu) would otherwise
#: let it resume its old partitions from old positions.  The fetcher checks the gate
#: before the first delivery after waking, before any stale answer is read.
LOOP_WATCH_FRACTION = 0.5

#: The SyncGroup wait.  A follower's SyncGroup is held until the leader has synced;
#: Kafka keeps a member awaiting its sync alive (it does not expire its session) and
#: restarts its session when it sends the answer.  The machine used to date a
#: SyncGroup's proof from its *sending* (so a frozen process could not reopen the
#: delivery gate with a stale answer), so an answer held for a session or more
#: arrived already lapsed: a heartbeat later the member declared its new partitions
#: lost and rejoined under its generation - with changed subscription metadata, which
#: by Kafka's join rule rebalances the whole group, and an eager slow member revokes
#: again (docs/reliability.md, "A slow listener costs one rebalance").  Heartbeats
#: cannot prove anything meanwhile: a broker answers one request per connection at a
#: time, so a beat waits behind the held SyncGroup (seen on Tansu).  Instead the
#: machine watches its own loop while the SyncGroup is pending, as in the join phase
#: (LOOP_WATCH_FRACTION): woken every ``min(heartbeat_interval, limit / 3)``, and when
#: the answer is read with the loop seen running less than ``limit`` before, the
#: answer cannot have waited unread longer than that step: its proof dates from the
#: previous step less one tick (never earlier than the sending).  A loop that stood
#: still keeps the old dating - a stale answer still proves nothing new.
SYNC_WAIT_WATCH = True

#: How much longer than the rebalance timeout a JoinGroup is awaited (seconds; Java's
#: ``JOIN_GROUP_TIMEOUT_LAPSE``, 5 s).
#:
#: The coordinator answers a JoinGroup only when every member of the last generation
#: has rejoined, or the rebalance timeout (the largest any member sent;
#: ``max_poll_interval_ms`` by default) has passed - so a joiner waits as long as the
#: slowest member's revoke listener.  Awaited for only ``request_timeout_ms`` (40 s),
#: a join held behind a longer listener failed on the client: the connection was
#: closed, the health check called the broker unreachable, the coordinator was looked
#: up again and the join re-sent while the group was forming - a race with the
#: slow member's own rejoin (docs/reliability.md, "A slow listener costs one
#: rebalance").  Java awaits its JoinGroup for max(request timeout, rebalance timeout
#: + 5 s) and so never gives up before the broker does; the machine decides the same
#: and puts it on :class:`~aiogroup._membership.actions.SendJoinGroup`.
JOIN_GROUP_TIMEOUT_LAPSE = 5.0

#: When a cooperative member that was handed nothing and revoked nothing sends its first
#: heartbeat, as a share of ``heartbeat_interval`` after the SyncGroup answer.
#:
#: A cooperative rebalance that moves partitions takes two rounds: in the first the owners
#: revoke what moves and rejoin at once; the member that is to receive it (a joiner, as a
#: rule) is handed nothing and learns of the second round only from its next heartbeat's
#: REBALANCE_IN_PROGRESS - a whole interval later (Java and librdkafka: the same wait;
#: measured on Kafka 4.4, the joiner's first partitions 1.0 s after the existing members
#: heard of it with a 1 s interval, against 0.01 s eager).  So that member beats once
#: early: the owners' rejoin follows their revoke listener, so a beat a tenth of an
#: interval after the sync catches a second round that fast listeners set off; a slower
#: one is caught by the regular beats, no later than before.  The cost is one heartbeat
#: per rebalance for a member left empty-handed.
FOLLOW_UP_BEAT = 0.1


def _heartbeat_answer(state: MemberState, code: int) -> HeartbeatAnswer:
    if state not in _HEARTBEATING:
        # The member stopped heartbeating (it is joining, losing, leaving, closed)
        # before this answer arrived: it describes a stage that is over.
        return HeartbeatAnswer(False, R.IGNORE)
    react = reaction("Heartbeat", code)
    if state is S.REVOKING and code == C.REBALANCE_IN_PROGRESS:
        # Already releasing partitions; what follows the listener (rejoin, install a
        # pending cooperative assignment then rejoin, or leave) is decided already.
        react = R.IGNORE
    return HeartbeatAnswer(code in SESSION_PROVING_CODES, react)


#: (state, error code) -> what the answer does; every state x every known code.  A code
#: no table knows is looked up through :func:`heartbeat_answer` (never proves the session).
HEARTBEAT_ANSWERS: dict[tuple[MemberState, int], HeartbeatAnswer] = {
    (state, code): _heartbeat_answer(state, code) for state in MemberState for code in C
}


def heartbeat_answer(state: MemberState, code: int) -> HeartbeatAnswer:
    """What a Heartbeat answered with ``code`` means to a member in ``state``."""
    found = HEARTBEAT_ANSWERS.get((state, code))
    return found if found is not None else _heartbeat_answer(state, code)


class MembershipProtocolError(RuntimeError):
    """The machine got an event it has no transition for (a bug in its caller)."""


def _fmt(parts: Iterable[TopicPartition]) -> str:
    return ", ".join(sorted(f"{tp.topic}-{tp.partition}" for tp in parts)) or "none"


class Membership:
    """One member's view of its group membership; single writer: the coordination routine.

    Deadlines (heartbeat, session, max poll interval, listener overrun, auto-commit,
    backoff) are checked after every event; the shell sleeps until
    :meth:`next_deadline` and feeds ``TimerFired``.  Heartbeats flow in STABLE,
    ASSIGNING and REVOKING, so a listener that outlives the session timeout keeps its
    member in the group; only the rebalance timeout bounds it.

    Listener contract decisions (from the Java ``ConsumerRebalanceListener`` docs):

    * EAGER: ``on_partitions_revoked`` runs at the start of every rebalance of a
      member that holds a generation, with *all* owned partitions, **even when that
      set is empty** ("always called at the start of a rebalance").  A member with no
      generation (first join, or after its membership was lost) has nothing to revoke
      and the callback is not called, as in Java's ``onJoinPrepare``.
    * COOPERATIVE: revoked only with the non-empty set of partitions leaving, after
      SyncGroup; then the member rejoins at once so they can be handed over.
    * ``on_partitions_assigned`` exactly once per completed rebalance, with the newly
      added partitions - an empty set when none were added.
    * ``on_partitions_lost`` (never revoked) when the broker says the membership is
      gone - UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID - or the
      session lapsed without a heartbeat answer (:data:`SESSION_ELAPSED`: the member
      id and generation are kept for the rejoin), and only with a non-empty set.
    * Leaving (close, unsubscribe, max-poll expiry): revoked only when non-empty.
    * Listeners never overlap: an event that needs another callback while one runs is
      remembered and acted on when ``ListenerCompleted`` arrives.
    """

    def __init__(
        self,
        *,
        protocol: RebalanceProtocol,
        session_timeout: float,
        heartbeat_interval: float,
        max_poll_interval: float,
        rebalance_timeout: float,
        retry_backoff: float,
        auto_commit_interval: float | None = None,
        static_member: bool = False,
        request_timeout: float | None = None,
        now: float = 0.0,
    ) -> None:
        if rebalance_timeout <= 0:
            raise ValueError(f"rebalance_timeout must be > 0, got {rebalance_timeout}")
        if request_timeout is not None and request_timeout <= 0:
            raise ValueError(f"request_timeout must be > 0 or None, got {request_timeout}")
        if auto_commit_interval is not None and auto_commit_interval <= 0:
            raise ValueError("auto_commit_interval must be > 0 or None (disabled)")
        self.protocol = protocol
        self._cooperative = protocol.value == "cooperative"
        self.timers = HeartbeatTimers(
            session_timeout=session_timeout,
            heartbeat_interval=heartbeat_interval,
            max_poll_interval=max_poll_interval,
            retry_backoff=retry_backoff,
        )
        self.rebalance_timeout = rebalance_timeout
        self.retry_backoff = retry_backoff
        self.auto_commit_interval = auto_commit_interval
        self.static_member = static_member
        #: How long a JoinGroup is awaited (see JOIN_GROUP_TIMEOUT_LAPSE).
        self.join_group_timeout = max(
            request_timeout or 0.0, rebalance_timeout + JOIN_GROUP_TIMEOUT_LAPSE
        )

        self.state = S.UNJOINED
        self.generation_id = -1
        #: The generation of :attr:`owned`: the last one whose SyncGroup succeeded (-1:
        #: none since the membership began).  The subscription metadata carries this,
        #: not :attr:`generation_id` (KIP-792: "the generation of the owned
        #: partitions").  The two part after a JoinGroup answer whose SyncGroup is then
        #: refused (REBALANCE_IN_PROGRESS): the rejoin keeps ``generation_id`` but was
        #: given nothing in it.  Sending that generation would change the metadata the
        #: member joined with, and a Stable group answers a known member's JoinGroup
        #: with the current generation only while its metadata is unchanged - otherwise
        #: it starts another round for the whole group (issue 24, seen on Tansu).
        self.owned_generation = -1
        self.member_id = ""
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.coordinator_id: int | None = None
        self.owned: frozenset[TopicPartition] = _NO_PARTITIONS

        self.subscribed = False
        self.closing = False
        self.fatal = False
        #: Why the next join happens (None: no rejoin requested).
        self.rejoin_reason: str | None = None
        self._finding_coordinator = False
        self._coordinator_wanted = False
        self._prejoin_done = False
        #: The generation was lost while a JoinGroup was in flight with partitions owned:
        #: its answer must not turn what is owned from lost into revoked.
        self._lost_during_join = False
        #: close() gave up the JoinGroup in flight: its answer, if it still comes, is void,
        #: and the shell (not the machine) sends the LeaveGroup.
        self._join_abandoned = False
        self._awaiting_assignment = False
        self._pending_assignment: frozenset[TopicPartition] | None = None
        self._revoking: frozenset[TopicPartition] = _NO_PARTITIONS
        self.listener_kind: E.Listener | None = None
        self._listener_deadline: float | None = None
        self._backoff_until: float | None = None
        #: Consecutive setbacks on the way into a generation (a refused or failed
        #: FindCoordinator / JoinGroup / SyncGroup, a failed assignor): each backoff
        #: doubles from retry_backoff up to Java's retry.backoff.max.ms (KIP-580), so a
        #: member refused for good (GROUP_AUTHORIZATION_FAILED) asks once a second, not
        #: ten times.  A formed generation or a kept session starts the count again.
        self._setbacks = Retrying(RetryPolicy.from_backoff(retry_backoff), due_at=None)
        #: Looking up committed offsets again after a failed lookup (the shell's refresh
        #: task asks first, on each new assignment): one backoff after each failure.
        self.committed_refresh = Retrying(RetryPolicy(retry_backoff, retry_backoff), due_at=None)
        #: Subscribed topics the metadata does not show yet, and the metadata lookups
        #: asked for them (KIP-580's doubling up to Java's retry.backoff.max.ms).
        self.missing_topics: frozenset[str] = frozenset()
        self.missing_lookup = Retrying(RetryPolicy.from_backoff(retry_backoff), due_at=None)
        self._poll_expired_at: float | None = None
        #: A getone/getmany is waiting for records now: the application is polling.
        self._poll_waiting = False
        self._stable_since = now
        self._next_auto_commit: float | None = None
        self._heartbeats_were_active = False
        #: The session lapsed without a proving answer; ends with a proof, the lost
        #: listener, a new generation or the generation's end (see SESSION_ELAPSED).
        self._session_lapsed = False
        #: When the last SyncGroup was sent: its success proves the session from then
        #: (or later, see SYNC_WAIT_WATCH).
        self._sync_sent_at = now
        #: The loop time of the step before the one being handled (SYNC_WAIT_WATCH).
        self._step_before = now
        #: The loop stood still in the join phase (see LOOP_WATCH_FRACTION): the
        #: delivery gate stays shut until the join phase ends.
        self._loop_stalled = False
        self._now = now

    # -- queries ---------------------------------------------------------------------------

    @property
    def failed(self) -> bool:
        """Stopped for good on an unrecoverable error (FATAL)."""
        return self.state is S.FATAL

    @property
    def joined(self) -> bool:
        """In a generation whose assignment is installed (its on_partitions_assigned may
        still run): what readiness means, whichever protocol."""
        return self.state in (S.STABLE, S.ASSIGNING)

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def in_generation(self) -> bool:
        return self.generation_id >= 0 and self.member_id != ""

    @property
    def finished(self) -> bool:
        """Nothing more will happen: closed, or failed."""
        return self.state in _TERMINAL

    @property
    def heartbeats_active(self) -> bool:
        return self.state in _HEARTBEATING and self.in_generation

    @property
    def sync_wait_watched(self) -> bool:
        """Joined, SyncGroup pending: the loop is watched (see SYNC_WAIT_WATCH)."""
        return SYNC_WAIT_WATCH and self.state is S.COMPLETING_REBALANCE and self.in_generation

    @property
    def _watch_tick(self) -> float:
        return min(self.timers.heartbeat_interval, self.loop_watch_limit / 3)

    @property
    def session_unproven(self) -> bool:
        """No answer has proven the session for ``session_timeout`` (see SESSION_ELAPSED)."""
        return self._session_lapsed or (
            self.heartbeats_active and self.timers.session_expired(self._now)
        )

    @property
    def awaiting_poll(self) -> bool:
        """Out of the group for want of a poll: only the application's next poll moves it."""
        return self._poll_expired_at is not None

    @property
    def loop_watched(self) -> bool:
        """Partitions owned in the join phase, no heartbeat running: the loop watch is on."""
        return self._cooperative and bool(self.owned) and self.state in _JOIN_PHASE

    @property
    def loop_watch_limit(self) -> float:
        return self.timers.session_timeout * LOOP_WATCH_FRACTION

    def membership_valid_until(self) -> float | None:
        """Until when records of owned partitions may be handed out (the delivery gate).

        Heartbeating: the proof deadline (see SESSION_ELAPSED).  In the join phase with
        partitions owned: the loop watch's (see LOOP_WATCH_FRACTION) - already past when
        the loop was seen standing still.  Otherwise None: nothing to bound.
        """
        if self.heartbeats_active:
            return self.timers.session_deadline()
        if self.loop_watched:
            return self._now if self._loop_stalled else self._now + self.loop_watch_limit
        return None

    def commit_gate(self, partitions: Iterable[TopicPartition]) -> CommitGate:
        """May offsets for ``partitions`` be committed now, and under which generation?"""
        parts = frozenset(partitions)
        gen, member = self.generation_id, self.member_id
        if self.state in _TERMINAL:
            why = "the consumer is closed" if self.state is S.CLOSED else "group membership failed"
            return CommitGate(gen, member, f"cannot commit: {why}", stopped=True)
        if self.state in (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE):
            return CommitGate(
                gen,
                member,
                "cannot commit: a rebalance is in progress; the partitions may be "
                "reassigned - commit again from on_partitions_assigned or after it",
            )
        if not self.in_generation:
            return CommitGate(
                gen,
                member,
                "cannot commit: this member is not part of an active generation "
                "(membership lost or not joined yet)",
            )
        if self.session_unproven:
            return CommitGate(
                gen,
                member,
                "cannot commit: no heartbeat answer has proven this member's session for "
                f"session_timeout_ms ({self.timers.session_timeout:g}s); the coordinator "
                "is being looked up again - commit after the membership is confirmed",
            )
        foreign = parts - self.owned
        if foreign:
            return CommitGate(
                gen,
                member,
                f"cannot commit partitions not assigned to this member: {_fmt(foreign)}",
            )
        return CommitGate(gen, member)

    def next_deadline(self) -> float | None:
        """The loop time at which ``TimerFired`` must be fed (None: no timer pending)."""
        deadlines: list[float] = []
        if self.state in _TERMINAL:
            return None
        if self._backoff_until is not None:
            deadlines.append(self._backoff_until)
        deadlines.extend(self.committed_refresh.deadline())
        deadlines.extend(self.missing_lookup.deadline())
        if self.heartbeats_active and not self._session_lapsed:
            # The lapse is due at the proof deadline, coordinator known or not.
            deadlines.append(self.timers.session_deadline())
        if self.heartbeats_active and self.coordinator_id is not None:
            # Without a coordinator nothing else is due: its lookup's answer wakes us.
            deadlines.append(self.timers.session_check_deadline())
            if not self.timers.in_flight:
                deadlines.append(self.timers.next_heartbeat_at())
        if self.sync_wait_watched and not self.loop_watched:
            deadlines.append(self._now + self._watch_tick)
        if self._listener_deadline is not None:
            deadlines.append(self._listener_deadline)
        if self._poll_watch_active():
            deadlines.append(self._poll_deadline())
        if self._poll_expired_at is not None:
            # Nothing wakes the routine when the application polls again; re-check.
            deadlines.append(self._now + self.timers.heartbeat_interval)
        if self._auto_commit_active() and self._next_auto_commit is not None:
            deadlines.append(self._next_auto_commit)
        if self.loop_watched and not self._loop_stalled:
            tick = min(self.timers.heartbeat_interval, self.loop_watch_limit / 3)
            deadlines.append(self._now + tick)
        return min(deadlines) if deadlines else None

    # -- the one entry point ----------------------------------------------------------------

    def handle(self, event: E.Event, now: float) -> list[A.Action]:
        """Feed one event at loop time ``now``; return the actions to perform, in order."""
        tr = table.transition_for(TRANSITIONS, self.state, event, self._illegal)
        if self.loop_watched and not self._loop_stalled:
            stood_still = now - self._now
            if stood_still >= self.loop_watch_limit:
                # An answer may have waited past the session (see LOOP_WATCH_FRACTION):
                # latched, and what is owned is lost, before the event is read.
                self._loop_stalled = True
                self._lose(
                    f"the event loop stood still for {stood_still:.1f}s while "
                    f"{'JoinGroup' if self.state is S.PREPARING_REBALANCE else 'SyncGroup'}"
                    " was in flight: the broker may have removed this member and handed "
                    "its partitions on"
                )
        self._step_before = self._now
        self._now = max(self._now, now)
        out: list[A.Action] = []
        tr.handler(self, event, out)
        if self.state not in tr.targets and self.state is not S.FATAL:
            bad = self.state
            self.state = S.FATAL
            raise MembershipProtocolError(
                f"{tr.handler.__name__} moved {bad.value}, outside its declared targets"
            )
        self._advance(out)
        self._tick(out)
        self._advance(out)
        if not self.loop_watched:
            self._loop_stalled = False  # the join phase is over: proofs take over
        return out

    def _illegal(self, text: str) -> MembershipProtocolError:
        """An event the table does not take here: a shell bug, and the member's end."""
        if self.state not in _TERMINAL:
            self.state = S.FATAL
        return MembershipProtocolError(text)

    # -- handlers ---------------------------------------------------------------------------

    def _ignore(self, event: E.Event, out: list[A.Action]) -> None:
        if isinstance(event, E.HeartbeatResponseReceived | E.RequestFailed):
            self.timers.answered()

    def _on_subscription_changed(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.SubscriptionChanged)
        self.subscribed = ev.subscribed
        self.rejoin_reason = ev.reason if ev.subscribed else None

    def _on_metadata_changed(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.MetadataChanged)
        if self.subscribed and self.state is not S.UNJOINED:
            self.rejoin_reason = ev.reason

    def _on_coordinator_found(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.CoordinatorFound)
        self.coordinator_id = ev.node_id
        self._finding_coordinator = False
        self._coordinator_wanted = False
        # A found coordinator gets a whole session to answer (Java resets its session
        # timer on discovery); the proof deadline, and so the delivery gate, stays.
        self.timers.coordinator_found(self._now)

    def _on_coordinator_lookup_failed(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.CoordinatorLookupFailed)
        self._finding_coordinator = False
        why = f"FindCoordinator failed: {code_name(ev.error_code)} {ev.detail}".strip()
        react = (
            reaction("FindCoordinator", ev.error_code) if ev.error_code >= 0 else R.RETRY_BACKOFF
        )
        if react is R.FATAL:
            self._go_fatal(out, why, ev.error_code)
            return
        if react is R.REPORT_RETRY:
            out.append(A.RaiseToApplication(why, error_code=ev.error_code))
        self._set_backoff(out, why)

    def _on_coordinator_requested(self, ev: E.Event, out: list[A.Action]) -> None:
        if self.coordinator_id is None:
            self._coordinator_wanted = True

    def _on_polled(self, ev: E.Event, out: list[A.Action]) -> None:
        """The poll rule: a waiting poll is polling; one taken out rejoins when it asks."""
        assert isinstance(ev, E.ApplicationPolled)
        self.timers.polled(ev.at)
        self._poll_waiting = ev.waiting
        expired = self._poll_expired_at
        if expired is not None and (ev.waiting or ev.at > expired):
            self._poll_expired_at = None
            self.rejoin_reason = "the application polled again after max_poll_interval_ms"
            out.append(
                A.LogWarning(
                    f"the application polled again {max(0.0, self._now - expired):.1f}s after "
                    "this member left its group because max_poll_interval_ms "
                    f"({self.timers.max_poll_interval:g}s) passed without a poll: rejoining"
                )
            )

    def _on_close(self, ev: E.Event, out: list[A.Action]) -> None:
        self.closing = True

    def _on_close_while_joining(self, ev: E.Event, out: list[A.Action]) -> None:
        """Close with a JoinGroup in flight: give it up (Java does too).

        A broker may hold a JoinGroup until every member of the last generation rejoined
        (up to the rebalance timeout; Tansu about half the session timeout), so waiting
        for its answer made stop() take seconds.  A dynamic member with an id leaves;
        the shell sends that LeaveGroup after the routine ends.  Then the closing rules
        run from UNJOINED: revoke what is still owned (cooperative), close.
        """
        self.closing = True
        leave = None
        if self.member_id and self.coordinator_id is not None and not self.static_member:
            leave = (self.coordinator_id, self.member_id)
        self._join_abandoned = True
        self._lost_during_join = False  # no answer is awaited any more
        out.append(A.AbandonJoin(leave))
        self.state = S.UNJOINED

    def _on_abandoned_join_answer(self, ev: E.Event, out: list[A.Action]) -> None:
        """The answer to a JoinGroup given up on close: void.  Anywhere else it would be
        an answer to a request the member never sent (a shell bug)."""
        if not self._join_abandoned:
            self.state = S.FATAL
            raise MembershipProtocolError(
                f"{type(ev).__name__} in state {self.state.value} without a JoinGroup in flight"
            )

    def _on_timer(self, ev: E.Event, out: list[A.Action]) -> None:
        """Deadlines are checked after every event (``_tick``); nothing else to do."""

    def _on_join_response(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.JoinGroupResponseReceived)
        r = ev.result
        self.state = S.UNJOINED
        lost_meanwhile, self._lost_during_join = self._lost_during_join, False
        if r.error_code != C.NONE:
            react = reaction("JoinGroup", r.error_code)
            if react is R.REJOIN_WITH_MEMBER_ID:
                self.member_id = r.member_id
                self.rejoin_reason = "JoinGroup: MEMBER_ID_REQUIRED, joining with the given id"
                return
            self._react(
                out, "JoinGroup", r.error_code, react, f"JoinGroup: {code_name(r.error_code)}"
            )
            if self.rejoin_reason is None and react is not R.FATAL:
                self.rejoin_reason = f"JoinGroup: {code_name(r.error_code)}"
            return
        if lost_meanwhile and self.owned:
            # A commit (say) answered UNKNOWN_MEMBER_ID while this join was in flight:
            # what is owned was lost with the old generation.  Taking this answer would
            # make it look revocable; instead keep the broker's member id, let the "lost"
            # rule run on_partitions_lost, and join again.
            self.member_id = r.member_id
            self.rejoin_reason = (
                "the membership was lost while JoinGroup was in flight: partitions lost first"
            )
            return
        self.generation_id = r.generation_id
        self.member_id = r.member_id
        self._session_lapsed = False
        self.protocol_name = r.protocol_name
        self.leader_id = r.leader
        # The broker counts the session from the join: a stage that heartbeats before
        # SyncGroup completes (a revocation after a failed sync) must not inherit the
        # previous generation's clock.
        self.timers.reset_session(self._now)
        if self.closing or not self.subscribed:
            return  # _advance leaves the group with the identity just received
        self.state = S.COMPLETING_REBALANCE
        if r.leader == r.member_id and not r.skip_assignment:
            self._awaiting_assignment = True
            out.append(A.ComputeAssignment(r.generation_id, r.protocol_name or "", r.members))
        else:
            self._sync_sent_at = self._now
            out.append(A.SendSyncGroup(r.generation_id, r.member_id, r.protocol_name, ()))

    def _on_assignment_computed(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.AssignmentComputed)
        if not self._awaiting_assignment:
            self.state = S.FATAL
            raise MembershipProtocolError("AssignmentComputed without ComputeAssignment")
        self._awaiting_assignment = False
        for member_id, error in ev.peer_errors:
            # One bad peer must not stop the group: it was assigned nothing; say so.
            why = f"member {member_id} sent undecodable subscription metadata: {error}"
            out.append(A.RaiseToApplication(why, exception=error))
        if self.closing or not self.subscribed or not self.in_generation:
            self.state = S.UNJOINED
            return
        if ev.error is not None:
            why = f"the assignor failed: {ev.error!r}"
            out.append(A.RaiseToApplication(why, exception=ev.error))
            self.state = S.UNJOINED
            self.rejoin_reason = why
            self._set_backoff(out, why)
            return
        self._sync_sent_at = self._now
        out.append(
            A.SendSyncGroup(self.generation_id, self.member_id, self.protocol_name, ev.assignments)
        )

    def _on_sync_response(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.SyncGroupResponseReceived)
        if self._awaiting_assignment:
            self.state = S.FATAL
            raise MembershipProtocolError("SyncGroup answered before the leader sent it")
        self.state = S.UNJOINED
        if ev.generation_id != self.generation_id:
            # The generation was lost while SyncGroup was in flight (a commit answered
            # UNKNOWN_MEMBER_ID, say): the answer is stale; the rejoin is already due.
            return
        code = ev.result.error_code
        if code != C.NONE:
            why = f"SyncGroup: {code_name(code)}"
            react = reaction("SyncGroup", code)
            self._react(out, "SyncGroup", code, react, why)
            if self.rejoin_reason is None and react is not R.FATAL:
                self.rejoin_reason = why
            return
        if self.closing or not self.subscribed:
            return
        if ev.partitions is None:
            # An assignment nobody can read.  The member holds nothing in this
            # generation: partitions kept from an earlier one (cooperative) are in doubt
            # - the unread assignment may have moved them - so they are released, and
            # the rejoin says "nothing owned, as of this generation".  That metadata
            # differs from what the member joined with, so the group computes a new
            # assignment instead of handing back the same bytes (a Stable group answers
            # a known member's unchanged JoinGroup with the current generation).
            why = f"undecodable assignment from the group leader: {ev.decode_error!r}"
            out.append(A.RaiseToApplication(why, exception=ev.decode_error))
            self.rejoin_reason = why
            self.owned_generation = self.generation_id
            if self.owned:
                self._start_revoke(
                    out, self.owned, commit_first=self.auto_commit_interval is not None
                )
            self._set_backoff(out, why)
            return
        new = ev.partitions
        self._prejoin_done = False
        self.owned_generation = self.generation_id
        # The broker restarted the session when it received the SyncGroup, no earlier
        # than its sending: an answer read late must not stretch the delivery gate.
        proven_at = self._sync_sent_at
        if SYNC_WAIT_WATCH and self._now - self._step_before < self.loop_watch_limit:
            # The loop ran a step ago: the answer was read within a step of its coming.
            proven_at = max(proven_at, self._step_before - self._watch_tick)
        self.timers.reset_session(self._now, proven_at=proven_at)
        # ... and heartbeating starts from this reset: the tick must not restart the
        # session clock again at the answer's reading.
        self._heartbeats_were_active = True
        self.timers.polled(self._now)
        self._stable_since = self._now
        self._setbacks.succeeded()
        revoked = self.owned - new
        if revoked:
            self._pending_assignment = new
            self.rejoin_reason = (
                f"cooperative rebalance: released {_fmt(revoked)}, rejoining so they can move"
            )
            self._start_revoke(out, revoked, commit_first=self.auto_commit_interval is not None)
            return
        if self._cooperative and not new:
            # Handed nothing: a second round may follow at once (FOLLOW_UP_BEAT).
            self.timers.beat_early(self._now + FOLLOW_UP_BEAT * self.timers.heartbeat_interval)
        self._install(out, new)

    def _install(self, out: list[A.Action], new: frozenset[TopicPartition]) -> None:
        added = new - self.owned
        self.owned = new
        out.append(A.SetAssignment(new))
        self._start_listener(E.Listener.ASSIGNED)
        self.state = S.ASSIGNING
        out.append(A.InvokeOnPartitionsAssigned(added, self.generation_id))

    def _on_heartbeat_response(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.HeartbeatResponseReceived)
        if (
            ev.generation_id != self.generation_id
            or not self.heartbeats_active
            or not self.timers.in_flight
        ):
            self.timers.answered()
            return
        code = ev.result.error_code
        answer = heartbeat_answer(self.state, code)
        if answer.keeps_session and not self.timers.answer_is_current(self._now):
            # The beat left more than a session ago (its answer was read late: a slow
            # broker, or this process stopped with the answer unread).  It proves the
            # session only up to a deadline already past, so it is taken as no answer:
            # the broker may have evicted us since, and the lapse rule decides.
            self.timers.answered()
            return
        if answer.keeps_session:
            self.timers.succeeded(self._now)
            self._session_lapsed = False
            self._setbacks.succeeded()
        elif answer.reaction in (R.RETRY_BACKOFF, R.FIND_COORDINATOR, R.REPORT_RETRY):
            self.timers.failed(self._now)
        else:
            self.timers.answered()
        self._react(out, "Heartbeat", code, answer.reaction, f"Heartbeat: {code_name(code)}")

    def _on_leave_response(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.LeaveGroupResponseReceived)
        if reaction("LeaveGroup", ev.result.error_code) is R.FIND_COORDINATOR:
            self._coordinator_dead()
        self._reset_generation()
        self.state = S.UNJOINED

    def _on_commit_response(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.OffsetCommitResponseReceived)
        if ev.generation_id != self.generation_id or not self.in_generation:
            return
        for code in sorted(set(ev.result.errors.values())):
            react = reaction("OffsetCommit", code)
            self._react(out, "OffsetCommit", code, react, f"OffsetCommit: {code_name(code)}")

    def _on_listener_completed(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.ListenerCompleted)
        if ev.kind is not self.listener_kind:
            self.state = S.FATAL
            running = "nothing" if self.listener_kind is None else self.listener_kind.method
            raise MembershipProtocolError(f"{ev.kind.method} completed while {running} ran")
        self.listener_kind = None
        self._listener_deadline = None
        if ev.error is not None:
            out.append(
                A.RaiseToApplication(f"{ev.kind.method} raised {ev.error!r}", exception=ev.error)
            )
        if ev.kind is E.Listener.ASSIGNED:
            self.state = S.STABLE
            if self.auto_commit_interval is not None:
                self._next_auto_commit = self._now + self.auto_commit_interval
            return
        if ev.kind is E.Listener.LOST:
            self.owned = _NO_PARTITIONS
            out.append(A.SetAssignment(None))
            self.state = S.UNJOINED
            if self._session_lapsed:
                # Nothing owned is left to protect: the rejoin under the same member
                # id and generation lets the broker judge the membership.  The lost
                # callback was this rebalance's preparation (Java's onJoinPrepare
                # calls onPartitionsLost instead of onPartitionsRevoked then).
                self._session_lapsed = False
                self._prejoin_done = True
                self.rejoin_reason = (
                    f"no heartbeat answer for session_timeout_ms "
                    f"({self.timers.session_timeout:g}s); rejoining under the same member id"
                )
            return
        self.owned = self.owned - self._revoking
        self._revoking = _NO_PARTITIONS
        pending, self._pending_assignment = self._pending_assignment, None
        if (
            pending is not None
            and self.in_generation
            and not self.closing
            and self.subscribed
            and not self._session_lapsed  # what is kept is lost next; nothing new
        ):
            self._install(out, pending)
            return
        out.append(A.SetAssignment(self.owned if self.owned else None))
        self.state = S.UNJOINED

    def _on_find_coordinator_failed(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.FindCoordinatorFailed)
        self._finding_coordinator = False
        self._set_backoff(out, _failure_reason(ev))

    def _on_join_or_sync_failed(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.JoinGroupFailed | E.SyncGroupFailed)
        why = _failure_reason(ev)
        self._lost_during_join = False  # no answer is coming
        self._coordinator_dead()
        self.state = S.UNJOINED
        self.rejoin_reason = why
        self._set_backoff(out, why)

    def _on_leave_failed(self, ev: E.Event, out: list[A.Action]) -> None:
        """A leave is best effort: the member is out whether or not the broker heard it."""
        self._reset_generation()
        self.state = S.UNJOINED

    def _on_heartbeat_failed(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.HeartbeatFailed)
        if ev.generation_id != self.generation_id or not self.heartbeats_active:
            self.timers.answered()
            return
        self.timers.failed(self._now)
        self._coordinator_dead()

    def _on_offsets_request_failed(self, ev: E.Event, out: list[A.Action]) -> None:
        """A commit or offset fetch got no answer: look the coordinator up again."""
        self._coordinator_dead()

    def _on_broker_incompatible(self, ev: E.Event, out: list[A.Action]) -> None:
        """Reported, not fatal: the request's own failure event decides what follows."""
        assert isinstance(ev, E.BrokerIncompatible)
        why = f"{ev.api}: the broker does not support it: {ev.error}"
        out.append(A.RaiseToApplication(why, exception=ev.error))

    def _on_committed_unavailable(self, ev: E.Event, out: list[A.Action]) -> None:
        """Only what asking again cannot cure reaches the application (the shell retries)."""
        assert isinstance(ev, E.CommittedOffsetsUnavailable)
        self.committed_refresh.failed(self._now)
        if not ev.retriable:
            why = f"cannot fetch committed offsets: {ev.error!r}"
            out.append(A.RaiseToApplication(why, exception=ev.error))

    def _on_topics_missing(self, ev: E.Event, out: list[A.Action]) -> None:
        """Each report that topics are still missing is a failed lookup: the next one is
        due after a longer backoff; none once every topic shows."""
        assert isinstance(ev, E.SubscribedTopicsMissing)
        self.missing_topics = ev.topics
        if ev.topics:
            self.missing_lookup.failed(self._now)
        else:
            self.missing_lookup = Retrying(self.missing_lookup.policy, due_at=None)

    def _on_routine_failed(self, ev: E.Event, out: list[A.Action]) -> None:
        assert isinstance(ev, E.RoutineFailed)
        out.append(A.RaiseToApplication(ev.message, exception=ev.error, fatal=True))
        if self.state not in _TERMINAL:
            self.fatal = True
            self.state = S.FATAL

    # -- reactions ----------------------------------------------------------------------------

    def _react(self, out: list[A.Action], api: str, code: int, react: Reaction, why: str) -> None:
        if react is R.IGNORE:
            return
        # A heartbeat is retried on the session's clock (the session rule, not a growing
        # backoff, decides when a silent coordinator is given up on).
        grow = api != "Heartbeat"
        if react is R.RETRY_BACKOFF:
            self._set_backoff(out, why, grow=grow)
        elif react is R.FIND_COORDINATOR:
            self._coordinator_dead()
        elif react is R.REJOIN:
            self.rejoin_reason = why
        elif react is R.LOSE:
            self._lose(why)
        elif react is R.FENCED:
            self._lose(why)
            self.fatal = True
            out.append(A.RaiseToApplication(why, error_code=code, fatal=True))
        elif react is R.REPORT_RETRY:
            out.append(A.RaiseToApplication(why, error_code=code))
            self._set_backoff(out, why, grow=grow)
        elif react is R.FATAL:
            self._go_fatal(out, why, code)
        else:  # REJOIN_WITH_MEMBER_ID outside JoinGroup: a table mistake
            raise MembershipProtocolError(f"{react} is not a reaction for {api}")

    def _go_fatal(self, out: list[A.Action], why: str, code: int | None) -> None:
        self.fatal = True
        self._reset_generation()
        out.append(A.RaiseToApplication(why, error_code=code, fatal=True))

    def _lose(self, why: str) -> None:
        """Our generation is gone: forget it, so owned partitions are *lost*, and rejoin."""
        if self.state is S.PREPARING_REBALANCE and self.owned:
            self._lost_during_join = True
        self._reset_generation()
        self.rejoin_reason = why
        self._pending_assignment = None

    def _reset_generation(self) -> None:
        self.generation_id = -1
        self.owned_generation = -1
        self.member_id = ""
        self.protocol_name = None
        self.leader_id = None
        self._prejoin_done = False
        self._session_lapsed = False
        self.timers.answered()

    def _coordinator_dead(self) -> None:
        # A lookup already in flight stays the one lookup: its answer is still awaited.
        self.coordinator_id = None

    def _set_backoff(self, out: list[A.Action], why: str, *, grow: bool = True) -> None:
        """Hold the next request back: ``retry_backoff``, doubling over consecutive
        setbacks (``grow``) up to the policy's maximum."""
        delay = self.retry_backoff
        if grow:
            self._setbacks.failed(self._now)
            delay = self._setbacks.policy.delay(self._setbacks.failures)
        self._backoff_until = self._now + delay
        out.append(A.Backoff(delay, why))

    # -- stages -------------------------------------------------------------------------------

    def _start_listener(self, kind: E.Listener) -> None:
        self.listener_kind = kind
        self._listener_deadline = self._now + self.rebalance_timeout

    def _start_revoke(self, out: list[A.Action], parts: Partitions, *, commit_first: bool) -> None:
        self._revoking = parts
        if parts:
            out.append(A.MarkRevoking(parts))
        self._start_listener(E.Listener.REVOKED)
        self.state = S.REVOKING
        out.append(A.InvokeOnPartitionsRevoked(parts, commit_first and bool(parts)))

    def _start_lost(self, out: list[A.Action]) -> None:
        out.append(A.MarkRevoking(self.owned))
        self._start_listener(E.Listener.LOST)
        self.state = S.LOSING
        out.append(A.InvokeOnPartitionsLost(self.owned))

    def _send_leave(self, out: list[A.Action], why: str) -> None:
        self.state = S.LEAVING
        out.append(A.SendLeaveGroup(self.member_id, why))

    def _send_join(self, out: list[A.Action]) -> None:
        # Java's needsJoinPrepare: one preparation (eager revoke) per rebalance, however
        # many JoinGroup/SyncGroup retries it takes; cleared when a SyncGroup succeeds.
        self._prejoin_done = True
        why = self.rejoin_reason or "joining the group"
        self.rejoin_reason = None
        self.state = S.PREPARING_REBALANCE
        out.append(
            A.SendJoinGroup(
                why,
                self.member_id,
                self.generation_id,
                self.owned,
                self.join_group_timeout,
                owned_generation=self.owned_generation,
            )
        )

    # -- state-triggered rules ----------------------------------------------------------------

    def _advance(self, out: list[A.Action]) -> None:
        """Apply :data:`STATE_RULES` from the resting states until nothing changes."""
        while self.state in _RESTING:
            before = (self.state, len(out), self.generation_id)
            self._advance_once(out)
            if (self.state, len(out), self.generation_id) == before:
                return

    def _advance_once(self, out: list[A.Action]) -> StateRule | None:
        """Perform the first rule whose guard holds; returns it (None: nothing to do)."""
        rule = table.first_rule(STATE_RULES, self, self.state)
        if rule is not None and rule.step is not None:
            rule.step(self, out)
        return rule

    def _rest(self) -> None:
        if self.in_generation:
            self._reset_generation()
        self.state = S.UNJOINED

    def _close(self) -> None:
        self._reset_generation()
        self.state = S.CLOSED

    def _prejoin_revoke(self, out: list[A.Action]) -> None:
        self._prejoin_done = True
        self._start_revoke(out, self.owned, commit_first=_auto_commits(self))

    # -- deadlines ----------------------------------------------------------------------------

    def _poll_deadline(self) -> float:
        return max(self.timers.last_poll, self._stable_since) + self.timers.max_poll_interval

    def _poll_watch_active(self) -> bool:
        """Only a member that owns partitions and whose application is not waiting in a
        poll can be idle; one owning nothing keeps nobody's records waiting."""
        return (
            self.state is S.STABLE
            and bool(self.owned)
            and self._poll_expired_at is None
            and not self._poll_waiting
        )

    def _auto_commit_active(self) -> bool:
        return (
            self.auto_commit_interval is not None
            and self.state is S.STABLE
            and self.in_generation
            and bool(self.owned)
            and self.coordinator_id is not None
        )

    def _tick(self, out: list[A.Action]) -> None:
        now = self._now
        if self.state in _TERMINAL:
            return
        if self._backoff_until is not None and now >= self._backoff_until:
            self._backoff_until = None
            self._advance(out)
        if self._listener_deadline is not None and now >= self._listener_deadline:
            self._listener_deadline = None
            assert self.listener_kind is not None
            out.append(
                A.CancelListener(
                    self.listener_kind,
                    f"{self.listener_kind.method} overran the rebalance timeout "
                    f"({self.rebalance_timeout:g}s)",
                )
            )
        active = self.heartbeats_active
        if active and not self._heartbeats_were_active:
            # Heartbeating resumes (e.g. a revoke after a failed JoinGroup): as in Java,
            # the session clock restarts; the first answer tells whether it survived.
            self.timers.reset_session(now)
        self._heartbeats_were_active = active
        if active:
            lapses = not self._session_lapsed and self.timers.session_expired(now)
            if lapses or (self.coordinator_id is not None and self.timers.session_check_due(now)):
                why = (
                    f"no heartbeat answer for session_timeout_ms ({self.timers.session_timeout:g}s)"
                )
                if lapses:
                    self._session_lapsed = True
                # Java disconnects from the suspected coordinator, failing the beat in
                # flight; here it is given up so the next one goes to the new coordinator.
                self.timers.failed(now)
                self._react(out, "Heartbeat", -1, SESSION_ELAPSED, why)
            elif (
                self.coordinator_id is not None
                and not self.timers.in_flight
                and now >= self.timers.next_heartbeat_at()
            ):
                self.timers.sent(now)
                out.append(A.SendHeartbeat(self.generation_id, self.member_id))
        if self._poll_watch_active() and now >= self._poll_deadline():
            self._poll_expired_at = now
            idle = now - max(self.timers.last_poll, self._stable_since)
            out.append(
                A.LogWarning(
                    f"the application has not polled (getone/getmany/getmany_arrow/async "
                    f"for) for {idle:.1f}s, longer than max_poll_interval_ms "
                    f"({self.timers.max_poll_interval:g}s): leaving the group so its "
                    "partitions go to live members; the next poll rejoins"
                )
            )
        if self._auto_commit_active() and self._next_auto_commit is not None:
            if now >= self._next_auto_commit:
                self._next_auto_commit = now + (self.auto_commit_interval or 0.0)
                out.append(A.AutoCommit("auto_commit_interval_ms elapsed"))
        if self.committed_refresh.due(now):
            self.committed_refresh.sent()
            out.append(A.RefreshCommittedOffsets())
        if self.missing_topics and self.missing_lookup.due(now):
            self.missing_lookup.sent()
            out.append(A.LookupMissingTopics(self.missing_topics))
        if (
            self.coordinator_id is None
            and not self._finding_coordinator
            and self._backoff_until is None
            and self._wants_coordinator()
        ):
            self._finding_coordinator = True
            out.append(A.FindCoordinator(self._coordinator_reason()))

    def _wants_coordinator(self) -> bool:
        if self.state in _TERMINAL or self.state is S.LEAVING:
            return False
        if self._coordinator_wanted or self.heartbeats_active:
            return True
        return self.state is S.UNJOINED and self.subscribed and not self.closing

    def _coordinator_reason(self) -> str:
        if self.session_unproven:
            return (
                "session timed out without a heartbeat answer: finding the coordinator "
                "again (member id and generation kept)"
            )
        if self.heartbeats_active:
            return "coordinator lost while in a generation"
        if self.state is S.UNJOINED and self.subscribed:
            return "needed to join the group"
        return "needed for offset commit/fetch"


def _failure_reason(ev: E.RequestFailed) -> str:
    return f"{ev.api} failed ({ev.kind}) {ev.detail}".strip()


# -- event-triggered transitions ------------------------------------------------------------
#
# (state, event type) -> the handler and the states it may move to directly.  A missing
# pair is an illegal input; the state-triggered rules below then run from the resting states.

Handler = Callable[[Membership, E.Event, list[A.Action]], None]


Transition = table.Transition[MemberState, Handler]


_t = table.transition


_LIVE = tuple(s for s in MemberState if s not in _TERMINAL)
M = Membership

TRANSITIONS: dict[tuple[MemberState, type[E.Event]], Transition] = {}
"""(state, event type) -> Transition.  A missing pair is an illegal input."""

#: Events any live state accepts without changing state by itself (the resting-state
#: rules then decide what follows).
_ANYWHERE: dict[type[E.Event], Handler] = {
    E.SubscriptionChanged: M._on_subscription_changed,
    E.MetadataChanged: M._on_metadata_changed,
    E.CoordinatorFound: M._on_coordinator_found,
    E.CoordinatorLookupFailed: M._on_coordinator_lookup_failed,
    E.ApplicationPolled: M._on_polled,
    E.CloseRequested: M._on_close,
    E.TimerFired: M._on_timer,
    E.OffsetCommitResponseReceived: M._on_commit_response,
    E.CoordinatorRequested: M._on_coordinator_requested,
    E.HeartbeatResponseReceived: M._on_heartbeat_response,
    E.FindCoordinatorFailed: M._on_find_coordinator_failed,
    E.HeartbeatFailed: M._on_heartbeat_failed,
    E.OffsetCommitFailed: M._on_offsets_request_failed,
    E.OffsetFetchFailed: M._on_offsets_request_failed,
    E.BrokerIncompatible: M._on_broker_incompatible,
    E.CommittedOffsetsUnavailable: M._on_committed_unavailable,
    E.SubscribedTopicsMissing: M._on_topics_missing,
}
for _s in _LIVE:
    for _ev, _handler in _ANYWHERE.items():
        TRANSITIONS[(_s, _ev)] = _t(_handler, _s)
    # The shell's own failure ends the member wherever it is.
    TRANSITIONS[(_s, E.RoutineFailed)] = _t(M._on_routine_failed, S.FATAL)
# Terminal states swallow late answers, failures and timers, nothing else - except the
# routine's failure, which the application still hears.
for _s in _TERMINAL:
    for _ev in (
        *_ANYWHERE,
        E.JoinGroupResponseReceived,
        E.JoinGroupFailed,
        E.SyncGroupFailed,
        E.LeaveGroupFailed,
    ):
        TRANSITIONS[(_s, _ev)] = _t(M._ignore, _s)
    TRANSITIONS[(_s, E.RoutineFailed)] = _t(M._on_routine_failed, _s)
# The request that a stage waits on ends it, answered or failed; its failure is legal
# only in that stage (anywhere else the shell reported a request it never sent).
TRANSITIONS[(S.PREPARING_REBALANCE, E.JoinGroupResponseReceived)] = _t(
    M._on_join_response, S.COMPLETING_REBALANCE, S.UNJOINED
)
TRANSITIONS[(S.PREPARING_REBALANCE, E.CloseRequested)] = _t(M._on_close_while_joining, S.UNJOINED)
# After close() gave up the JoinGroup, its answer may still be on its way.
for _s in (S.UNJOINED, S.REVOKING, S.LEAVING):
    TRANSITIONS[(_s, E.JoinGroupResponseReceived)] = _t(M._on_abandoned_join_answer, _s)
    TRANSITIONS[(_s, E.JoinGroupFailed)] = _t(M._on_abandoned_join_answer, _s)
TRANSITIONS[(S.PREPARING_REBALANCE, E.JoinGroupFailed)] = _t(M._on_join_or_sync_failed, S.UNJOINED)
TRANSITIONS[(S.COMPLETING_REBALANCE, E.AssignmentComputed)] = _t(
    M._on_assignment_computed, S.COMPLETING_REBALANCE, S.UNJOINED
)
TRANSITIONS[(S.COMPLETING_REBALANCE, E.SyncGroupResponseReceived)] = _t(
    M._on_sync_response, S.ASSIGNING, S.REVOKING, S.UNJOINED
)
TRANSITIONS[(S.COMPLETING_REBALANCE, E.SyncGroupFailed)] = _t(M._on_join_or_sync_failed, S.UNJOINED)
TRANSITIONS[(S.LEAVING, E.LeaveGroupResponseReceived)] = _t(M._on_leave_response, S.UNJOINED)
TRANSITIONS[(S.LEAVING, E.LeaveGroupFailed)] = _t(M._on_leave_failed, S.UNJOINED)
TRANSITIONS[(S.REVOKING, E.ListenerCompleted)] = _t(
    M._on_listener_completed, S.ASSIGNING, S.UNJOINED
)
TRANSITIONS[(S.ASSIGNING, E.ListenerCompleted)] = _t(M._on_listener_completed, S.STABLE)
TRANSITIONS[(S.LOSING, E.ListenerCompleted)] = _t(M._on_listener_completed, S.UNJOINED)
del _s, _ev, _handler


# -- state-triggered rules ------------------------------------------------------------------
#
# What a member does on its own, from a resting state, once an event has been handled:
# an ordered table of (guard, target, reason) that ``Membership._advance`` applies until
# nothing changes, and that the diagram draws.  The first rule whose guard holds wins,
# so each guard is read knowing the rules above it did not fire; the guards still
# spell out the conditions that matter to their own rule.


#: A rule's step moves the machine to its target itself (several steps share helpers
#: that set the state), with the action list to append to.
RuleStep = Callable[[Membership, list[A.Action]], None]
StateRule = table.StateRule[MemberState, Membership, RuleStep]


def _auto_commits(m: Membership) -> bool:
    return m.auto_commit_interval is not None


def _leaving_reason(m: Membership) -> str | None:
    if not m.subscribed:
        return "unsubscribed"
    if m._poll_expired_at is not None:
        return "max_poll_interval_ms passed without a poll; leaving until the next poll"
    return None


def _leave_revoke(m: Membership, out: list[A.Action]) -> None:
    """Revoke everything before leaving.  It is also this generation's eager pre-join
    revoke: if the leave is called off (the application polls again, or subscribes
    again) before the LeaveGroup, the member rejoins in its generation without a
    second, empty revoke."""
    m._prejoin_done = True
    m._start_revoke(out, m.owned, commit_first=_auto_commits(m) and not m.subscribed)


def _can_send_leave(m: Membership) -> bool:
    """LeaveGroup makes sense: in a generation, dynamic (static members just go quiet),
    and not already handed to the shell with an abandoned JoinGroup."""
    return (
        m.in_generation
        and not m.static_member
        and m.coordinator_id is not None
        and not m._join_abandoned
    )


def _may_join(m: Membership) -> bool:
    return (
        m._backoff_until is None
        and m.coordinator_id is not None
        and (m.state is S.UNJOINED or m.rejoin_reason is not None)
    )


_BOTH = frozenset({S.UNJOINED, S.STABLE})

STATE_RULES: tuple[StateRule, ...] = (
    table.StateRule(
        "lost",
        _BOTH,
        lambda m: bool(m.owned) and (not m.in_generation or m._session_lapsed),
        S.LOSING,
        "owned partitions without a generation (fenced, unknown member, illegal "
        "generation) or with a lapsed session",
        lambda m, out: m._start_lost(out),
    ),
    table.StateRule(
        "close-revoke",
        _BOTH,
        lambda m: m.closing and bool(m.owned) and m.in_generation,
        S.REVOKING,
        "closing: revoke owned partitions",
        lambda m, out: m._start_revoke(out, m.owned, commit_first=_auto_commits(m)),
    ),
    table.StateRule(
        "close-leave",
        _BOTH,
        lambda m: m.closing and not m.owned and _can_send_leave(m),
        S.LEAVING,
        "closing: leave the group (dynamic member)",
        lambda m, out: m._send_leave(out, "the consumer is closing"),
    ),
    table.StateRule(
        "close",
        _BOTH,
        lambda m: m.closing,
        S.CLOSED,
        "closing, nothing left to release",
        lambda m, out: m._close(),
    ),
    table.StateRule(
        "fatal",
        _BOTH,
        lambda m: m.fatal,
        S.FATAL,
        "fatal error raised",
        lambda m, out: setattr(m, "state", S.FATAL),
    ),
    table.StateRule(
        "leave-revoke",
        _BOTH,
        lambda m: _leaving_reason(m) is not None and bool(m.owned),
        S.REVOKING,
        "unsubscribed or max poll expired: revoke owned partitions",
        lambda m, out: _leave_revoke(m, out),
    ),
    table.StateRule(
        "leave",
        _BOTH,
        lambda m: _leaving_reason(m) is not None and not m.owned and _can_send_leave(m),
        S.LEAVING,
        "unsubscribed or max poll expired, nothing owned: leave (dynamic member)",
        lambda m, out: m._send_leave(out, _leaving_reason(m) or ""),
    ),
    table.StateRule(
        "rest",
        _BOTH,
        lambda m: _leaving_reason(m) is not None,
        S.UNJOINED,
        "unsubscribed or max poll expired, nothing to release or leave: rest",
        lambda m, out: m._rest(),
    ),
    table.StateRule(
        "prejoin-revoke",
        # Not from UNJOINED: an eager member there in a generation has already revoked
        # for this rebalance (a failed JoinGroup keeps ``_prejoin_done`` until a sync).
        frozenset({S.STABLE}),
        lambda m: _may_join(m) and not m._cooperative and m.in_generation and not m._prejoin_done,
        S.REVOKING,
        "eager rebalance: revoke everything before joining",
        lambda m, out: m._prejoin_revoke(out),
    ),
    table.StateRule(
        "join",
        _BOTH,
        _may_join,
        S.PREPARING_REBALANCE,
        "coordinator known, nothing blocking: SendJoinGroup",
        lambda m, out: m._send_join(out),
    ),
)

#: The rules as edges, by source state: {state: {target: reason}} (self-loops left out).
#: Every action this machine can return (the shell has a performer for each).
ACTION_TYPES: frozenset[type[A.Action]] = frozenset(
    {
        A.AbandonJoin,
        A.RefreshCommittedOffsets,
        A.LookupMissingTopics,
        A.FindCoordinator,
        A.SendJoinGroup,
        A.ComputeAssignment,
        A.SendSyncGroup,
        A.SendHeartbeat,
        A.SendLeaveGroup,
        A.MarkRevoking,
        A.InvokeOnPartitionsRevoked,
        A.InvokeOnPartitionsAssigned,
        A.InvokeOnPartitionsLost,
        A.CancelListener,
        A.SetAssignment,
        A.AutoCommit,
        A.Backoff,
        A.RaiseToApplication,
        A.LogWarning,
    }
)

AUTOMATIC_TRANSITIONS: dict[MemberState, dict[MemberState, str]] = table.automatic_transitions(
    STATE_RULES
)


def mermaid_diagram() -> str:
    """:data:`TRANSITIONS` and :data:`STATE_RULES` as a mermaid stateDiagram."""
    return table.mermaid_diagram(
        TRANSITIONS, STATE_RULES, initial=S.UNJOINED, finals=(S.CLOSED, S.FATAL)
    )
