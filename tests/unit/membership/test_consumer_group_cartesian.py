"""Every (state, event type) pair and every error code of the consumer-protocol machine.

h2 style: each pair either follows a declared transition (the state it ends in is
the source, one of the entry's targets or one the state rules reach) or raises
the machine's protocol error and leaves it FATAL - nothing else.  Every state
rule must fire somewhere in this module, so no declared edge is dead.
"""

from __future__ import annotations

import uuid

import pytest

from aiogroup._membership import actions as acts
from aiogroup._membership import consumer_group as cg
from aiogroup._membership import events as E
from aiogroup._membership.actions import (
    InvokeOnPartitionsLost,
    RaiseToApplication,
    SendConsumerGroupHeartbeat,
)
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.commit_outcomes import (
    COMMIT_OUTCOMES,
    OFFSET_FETCH_OUTCOMES,
    CommitKind,
    CommitOutcome,
    CommitProtocol,
    commit_outcome,
    offset_fetch_outcome,
)
from aiogroup._membership.consumer_group import (
    EVENT_TRANSITIONS,
    EVENT_TYPES,
    HEARTBEAT_REACTIONS,
    STATE_RULES,
    ConsumerMembership,
    ConsumerMembershipError,
    ConsumerMemberState,
    HeartbeatReaction,
    heartbeat_reaction,
)
from aiogroup._membership.events import (
    ApplicationPolled,
    CloseRequested,
    ConsumerGroupHeartbeatFailed,
    ConsumerGroupHeartbeatResponseReceived,
    CoordinatorFound,
    CoordinatorLookupFailed,
    Listener,
    ListenerCompleted,
    Subscribed,
    TimerFired,
    TopicNamesResolved,
    UnsubscribeRequested,
)
from aiogroup._protocol.results import (
    HeartbeatResult,
    JoinGroupResult,
    LeaveGroupResult,
    OffsetCommitResult,
    SyncGroupResult,
)

S = ConsumerMemberState
CONSUMER = CommitProtocol.CONSUMER
A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)
FIRED: set[str] = set()


def ok(
    epoch: int, assignment: dict[uuid.UUID, tuple[int, ...]] | None = None
) -> ConsumerGroupHeartbeatResponseReceived:
    return ConsumerGroupHeartbeatResponseReceived(
        0, member_epoch=epoch, heartbeat_interval_ms=1000, assignment=assignment
    )


def member() -> tuple[ConsumerMembership, list[float]]:
    clock = [0.0]
    return ConsumerMembership("g", "m", max_poll_interval=100.0), clock


def feed(m: ConsumerMembership, clock: list[float], *events: E.Event) -> list[acts.Action]:
    out: list[acts.Action] = []
    for ev in events:
        out = m.handle(ev, clock[0])
        assert {type(a) for a in out} <= cg.ACTION_TYPES, out
    FIRED.update(why for _, _, why in m.trace)
    return out


def joined(
    assignment: dict[uuid.UUID, tuple[int, ...]] | None,
) -> tuple[ConsumerMembership, list[float]]:
    m, clock = member()
    feed(
        m,
        clock,
        TopicNamesResolved({A: "a", B: "b"}),
        Subscribed(frozenset({"a"})),
        CoordinatorFound(1),
        ok(1, assignment),
    )
    return m, clock


def in_state(state: ConsumerMemberState) -> tuple[ConsumerMembership, list[float]]:
    """A member brought to ``state`` through the public API (with a heartbeat in flight
    wherever the state heartbeats, so response events are meaningful)."""
    if state is S.UNSUBSCRIBED:
        return member()
    if state is S.JOINING:
        m, clock = member()
        feed(m, clock, Subscribed(frozenset({"a"})), CoordinatorFound(1))
        return m, clock
    if state is S.RECONCILING:
        m, clock = joined({A: (0,)})
        clock[0] = 1.0
        feed(m, clock, TimerFired())
        return m, clock
    if state is S.ACKNOWLEDGING:
        m, clock = joined({A: (0,)})
        feed(m, clock, ListenerCompleted(Listener.ASSIGNED))
        return m, clock
    if state is S.STABLE:
        m, clock = in_state(S.ACKNOWLEDGING)
        feed(m, clock, ok(1))
        clock[0] = 1.0
        feed(m, clock, TimerFired())
        return m, clock
    if state is S.FENCED:
        m, clock = in_state(S.STABLE)
        feed(m, clock, ConsumerGroupHeartbeatResponseReceived(110))
        return m, clock
    if state is S.PREPARE_LEAVING:
        m, clock = in_state(S.STABLE)
        feed(m, clock, UnsubscribeRequested())
        return m, clock
    if state is S.LEAVING:
        m, clock = in_state(S.PREPARE_LEAVING)
        feed(m, clock, ok(1), ListenerCompleted(Listener.REVOKED))
        return m, clock
    if state is S.STALE:
        m, clock = in_state(S.STABLE)
        feed(m, clock, ok(1))
        clock[0] = 100.0
        feed(m, clock, TimerFired(), ListenerCompleted(Listener.REVOKED))
        feed(m, clock, ok(1))  # the interval heartbeat, then the leave
        feed(m, clock, ok(1))
        return m, clock
    if state is S.FATAL:
        m, clock = in_state(S.STABLE)
        feed(m, clock, ConsumerGroupHeartbeatResponseReceived(30))
        return m, clock
    raise AssertionError(state)


@pytest.mark.parametrize("state", list(S))
def test_every_state_is_reachable(state: ConsumerMemberState) -> None:
    m, _ = in_state(state)
    assert m.state is state


SAMPLES: dict[type[E.Event], list[E.Event]] = {
    Subscribed: [Subscribed(frozenset({"a", "b"})), Subscribed(regex="a.*")],
    UnsubscribeRequested: [UnsubscribeRequested()],
    CloseRequested: [CloseRequested()],
    CoordinatorFound: [CoordinatorFound(1)],
    CoordinatorLookupFailed: [CoordinatorLookupFailed(-1, "x")],
    ConsumerGroupHeartbeatResponseReceived: [
        ok(2, {A: (0,), B: (1,)}),
        ok(1),
        *(ConsumerGroupHeartbeatResponseReceived(int(code)) for code in ErrorCode if code),
        ConsumerGroupHeartbeatResponseReceived(9999),
    ],
    ConsumerGroupHeartbeatFailed: [ConsumerGroupHeartbeatFailed("connection")],
    ListenerCompleted: [ListenerCompleted(kind) for kind in Listener],
    TopicNamesResolved: [TopicNamesResolved({uuid.UUID(int=0xC): "c"})],
    ApplicationPolled: [ApplicationPolled(0.0)],
    TimerFired: [TimerFired()],
    E.SessionTimeoutLearned: [E.SessionTimeoutLearned(6000), E.SessionTimeoutLearned(0)],
    E.SessionTimeoutLookupFailed: [E.SessionTimeoutLookupFailed(OSError("refused"))],
    E.TopicNamesLookupFailed: [E.TopicNamesLookupFailed(OSError("refused"))],
    E.BrokerIncompatible: [E.BrokerIncompatible("Metadata", ValueError("no v12"))],
    E.CommittedOffsetsUnavailable: [
        E.CommittedOffsetsUnavailable(ValueError("denied"), retriable=False),
        E.CommittedOffsetsUnavailable(ValueError("timeout"), retriable=True),
    ],
    E.RoutineFailed: [E.RoutineFailed("group coordination failed: bug", ValueError("bug"))],
}
assert set(SAMPLES) == set(EVENT_TYPES)
#: The classic protocol's own events: this machine refuses every one.
CLASSIC_SAMPLES: dict[type[E.Event], list[E.Event]] = {
    E.SubscriptionChanged: [E.SubscriptionChanged(True)],
    E.MetadataChanged: [E.MetadataChanged("partitions added")],
    E.CoordinatorRequested: [E.CoordinatorRequested()],
    E.JoinGroupResponseReceived: [
        E.JoinGroupResponseReceived(JoinGroupResult(0, 1, "consumer", "range", "m", "m"))
    ],
    E.AssignmentComputed: [E.AssignmentComputed()],
    E.SubscribedTopicsMissing: [E.SubscribedTopicsMissing(frozenset({"a"}))],
    E.SyncGroupResponseReceived: [E.SyncGroupResponseReceived(SyncGroupResult(0, b""), 1)],
    E.HeartbeatResponseReceived: [E.HeartbeatResponseReceived(HeartbeatResult(0), 1)],
    E.LeaveGroupResponseReceived: [E.LeaveGroupResponseReceived(LeaveGroupResult(0))],
    E.OffsetCommitResponseReceived: [
        E.OffsetCommitResponseReceived(OffsetCommitResult({("a", 0): 0}), 1)
    ],
    **{cls: [cls("connection")] for cls in E.REQUEST_FAILURES.values()},
    # A share group's (KIP-932) heartbeat answer: foreign to this machine as well.
    E.ShareGroupHeartbeatResponseReceived: [E.ShareGroupHeartbeatResponseReceived(0)],
}
del CLASSIC_SAMPLES[E.ConsumerGroupHeartbeatFailed]
VOCABULARY = {
    cls for cls in vars(E).values() if isinstance(cls, type) and issubclass(cls, E.Event)
} - {E.Event, E.RequestFailed}


def test_samples_cover_the_whole_vocabulary() -> None:
    assert set(SAMPLES) | set(CLASSIC_SAMPLES) == VOCABULARY
    assert not set(SAMPLES) & set(CLASSIC_SAMPLES)


ALL_SAMPLES = {**SAMPLES, **CLASSIC_SAMPLES}
PAIRS = [
    (state, event)
    for state in S
    for etype in sorted(ALL_SAMPLES, key=lambda c: c.__name__)
    for event in ALL_SAMPLES[etype]
]
RULE_TARGETS = {rule.target for rule in STATE_RULES}


@pytest.mark.parametrize(
    ("state", "event"), PAIRS, ids=lambda x: getattr(x, "value", type(x).__name__)
)
def test_every_pair_is_a_declared_move_or_the_protocol_error(
    state: ConsumerMemberState, event: E.Event
) -> None:
    m, clock = in_state(state)
    clock[0] += 0.5
    tr = EVENT_TRANSITIONS.get((state, type(event)))
    try:
        feed(m, clock, event)
    except ConsumerMembershipError:
        assert m.state is S.FATAL
        # Undeclared pair, or a listener completing that is not the one running.
        assert tr is None or isinstance(event, ListenerCompleted)
        if isinstance(event, ListenerCompleted):
            assert event.kind is not m.listener or m.listener is None
        return
    assert tr is not None, f"{type(event).__name__} accepted in {state} without a table entry"
    assert m.state in {state} | tr.targets | RULE_TARGETS
    # Whatever happened, the machine never has two heartbeats out or a dangling listener.
    assert m.listener is not None or not m.queued


def test_every_state_rule_fires_somewhere() -> None:
    FIRED.clear()
    # Scenarios that need a specific path for the rarer rules.
    m, clock = in_state(S.FENCED)
    feed(m, clock, ListenerCompleted(Listener.LOST))
    assert m.state is S.JOINING
    m, clock = joined({})  # first target equals owned (nothing): still assigned once
    m, clock = in_state(S.STALE)
    feed(m, clock, ApplicationPolled(clock[0]))
    m, clock = member()
    feed(m, clock, Subscribed(frozenset({"a"})), CloseRequested())  # nothing to leave
    m, clock = in_state(S.STABLE)
    feed(m, clock, ok(1))
    clock[0] = 100.0
    feed(m, clock, TimerFired())
    feed(m, clock, ConsumerGroupHeartbeatResponseReceived(110), ListenerCompleted(Listener.REVOKED))
    assert m.state is S.STALE
    m, clock = in_state(S.LEAVING)
    feed(m, clock, Subscribed(frozenset({"b"})), ok(1))
    assert m.state is S.JOINING
    for state in S:
        in_state(state)
    reasons = {rule.reason for rule in STATE_RULES}
    assert reasons <= FIRED, reasons - FIRED


# --- error codes ----------------------------------------------------------------------

DOCUMENTED_HEARTBEAT_CODES = {
    # ConsumerGroupHeartbeatResponse.json "Supported errors" (v0-v1), plus NONE and
    # the transport-level ones every RPC can see.
    0,
    30,
    16,
    15,
    14,
    42,
    25,
    110,
    112,
    111,
    81,
    128,
    29,
    82,
    35,
    7,
}


def test_every_documented_heartbeat_code_has_a_reaction() -> None:
    assert DOCUMENTED_HEARTBEAT_CODES <= set(HEARTBEAT_REACTIONS)
    assert heartbeat_reaction(9999) is HeartbeatReaction.FATAL


@pytest.mark.parametrize("code", [*sorted(int(c) for c in ErrorCode), 9999])
def test_each_heartbeat_code_from_stable(code: int) -> None:
    m, clock = in_state(S.STABLE)
    out = feed(
        m,
        clock,
        ConsumerGroupHeartbeatResponseReceived(code, member_epoch=1, heartbeat_interval_ms=1000),
    )
    reaction = heartbeat_reaction(code)
    assert not m.heartbeat_in_flight or reaction is HeartbeatReaction.FIND_COORDINATOR
    if reaction is HeartbeatReaction.OK:
        assert m.state is S.STABLE and out == []
    elif reaction is HeartbeatReaction.FIND_COORDINATOR:
        # Looked up again after a backoff (not in a tight loop), then heartbeat at once.
        assert m.state is S.STABLE and not m.coordinator_known and out == []
        assert m.next_deadline() == pytest.approx(1.1)
        clock[0] = 1.1
        assert [type(a).__name__ for a in feed(m, clock, TimerFired())] == ["FindCoordinator"]
        assert [type(a).__name__ for a in feed(m, clock, CoordinatorFound(1))] == [
            "SendConsumerGroupHeartbeat"
        ]
    elif reaction is HeartbeatReaction.RETRY_BACKOFF:
        assert m.state is S.STABLE and out == []
        assert m.next_deadline() == pytest.approx(1.1)
    elif reaction is HeartbeatReaction.REPORT_RETRY:
        assert m.state is S.STABLE
        assert [type(a) for a in out] == [RaiseToApplication]
    elif reaction is HeartbeatReaction.FENCED:
        assert m.state is S.FENCED and m.member_epoch == 0
        assert [type(a) for a in out][:1] == [InvokeOnPartitionsLost]
    else:
        assert m.state is S.FATAL
        assert isinstance(out[0], RaiseToApplication) and out[0].fatal
        assert cg.code_name(code) in out[0].message


@pytest.mark.parametrize("code", [*sorted(int(c) for c in ErrorCode), 9999])
def test_each_heartbeat_code_while_leaving_ends_the_leave(code: int) -> None:
    m, clock = in_state(S.LEAVING)
    feed(m, clock, ConsumerGroupHeartbeatResponseReceived(code))
    assert m.state is S.UNSUBSCRIBED


@pytest.mark.parametrize("code", [*sorted(int(c) for c in ErrorCode), 9999])
@pytest.mark.parametrize("kind", list(CommitKind))
def test_each_commit_code(code: int, kind: CommitKind) -> None:
    out = commit_outcome(CONSUMER, kind, code, in_group=True)
    assert out is COMMIT_OUTCOMES.get((CONSUMER, kind, code), CommitOutcome.RAISE)
    if code == ErrorCode.STALE_MEMBER_EPOCH:
        # Java: commitSync fails; auto-commit retries with the latest epoch.
        expected = (
            CommitOutcome.COMMIT_FAILED
            if kind is CommitKind.USER
            else CommitOutcome.RETRY_WITH_LATEST_EPOCH
        )
        assert out is expected
        assert commit_outcome(CONSUMER, kind, code, in_group=False) is CommitOutcome.COMMIT_FAILED
    if code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
        assert out is CommitOutcome.COMMIT_FAILED


@pytest.mark.parametrize("code", [*sorted(int(c) for c in ErrorCode), 9999])
def test_each_offset_fetch_code(code: int) -> None:
    out = offset_fetch_outcome(CONSUMER, code, in_group=True)
    assert out is OFFSET_FETCH_OUTCOMES.get((CONSUMER, code), CommitOutcome.RAISE)
    if code == ErrorCode.STALE_MEMBER_EPOCH:
        assert out is CommitOutcome.RETRY_WITH_LATEST_EPOCH
        assert offset_fetch_outcome(CONSUMER, code, in_group=False) is CommitOutcome.RAISE


def test_heartbeat_keeps_flowing_in_every_member_state() -> None:
    """No state that holds an epoch can starve its session of heartbeats."""
    for state in (S.JOINING, S.RECONCILING, S.ACKNOWLEDGING, S.STABLE, S.PREPARE_LEAVING):
        m, clock = in_state(state)
        if m.heartbeat_in_flight:
            feed(m, clock, ok(max(m.member_epoch, 1)))
        deadline = m.next_deadline()
        if m.state not in (S.LEAVING, S.UNSUBSCRIBED):
            assert deadline is not None
            clock[0] = deadline
            out = feed(m, clock, TimerFired())
            assert (
                any(isinstance(a, SendConsumerGroupHeartbeat) for a in out) or m.heartbeat_in_flight
            )
