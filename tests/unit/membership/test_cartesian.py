"""Every (state, event type) pair: a declared transition, or the defined error (h2 style)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aiogroup._membership import events as E
from aiogroup._membership.machine import (
    ACTION_TYPES,
    AUTOMATIC_TRANSITIONS,
    TRANSITIONS,
    Membership,
    MembershipProtocolError,
    MemberState,
    mermaid_diagram,
)
from aiogroup._protocol.results import (
    HeartbeatResult,
    JoinGroupResult,
    LeaveGroupResult,
    OffsetCommitResult,
    SyncGroupResult,
)

from .driver import (
    COOPERATIVE,
    EAGER,
    SESSION,
    heartbeat,
    join_error,
    join_ok,
    leave_ok,
    make,
    sync_ok,
    tps,
)

S = MemberState


def _subscribed(m: Membership) -> Membership:
    m.handle(E.SubscriptionChanged(True), 0.0)
    return m


def _preparing(m: Membership) -> Membership:
    _subscribed(m).handle(E.CoordinatorFound(1), 0.0)
    return m


def _completing_follower(m: Membership) -> Membership:
    _preparing(m).handle(join_ok(1), 0.0)
    return m


def _completing_leader(m: Membership) -> Membership:
    _preparing(m).handle(join_ok(1, leader="m1"), 0.0)
    return m


def _assigning(m: Membership) -> Membership:
    _completing_follower(m).handle(sync_ok(1, tps(0, 1)), 0.0)
    return m


def _stable(m: Membership) -> Membership:
    _assigning(m).handle(E.ListenerCompleted(E.Listener.ASSIGNED), 0.0)
    return m


def _revoking(m: Membership) -> Membership:
    _stable(m).handle(E.CloseRequested(), 0.1)
    return m


def _stable_empty_lapsed(m: Membership) -> Membership:
    """STABLE owning nothing, its session lapsed without a heartbeat answer: it keeps
    heartbeating (member id and generation kept) while the coordinator is looked up."""
    _completing_follower(m).handle(sync_ok(1, frozenset()), 0.0)
    m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 0.0)
    m.handle(E.TimerFired(), 1.0)  # a heartbeat goes out and is never answered
    m.handle(E.TimerFired(), SESSION)
    assert m.session_unproven and m.coordinator_id is None and m.generation_id == 1
    return m


def _losing_lapsed(m: Membership) -> Membership:
    """The session lapsed while owning partitions: lost, member id and generation kept."""
    _stable(m).handle(E.TimerFired(), 1.0)
    m.handle(E.TimerFired(), SESSION)
    assert m.generation_id == 1
    return m


def _losing(m: Membership) -> Membership:
    _stable(m).handle(E.TimerFired(), 1.0)
    m.handle(heartbeat(25, 1), 1.1)  # UNKNOWN_MEMBER_ID
    return m


def _leaving(m: Membership) -> Membership:
    _revoking(m).handle(E.ListenerCompleted(E.Listener.REVOKED), 0.2)
    return m


def _closed(m: Membership) -> Membership:
    _leaving(m).handle(leave_ok(), 0.3)
    return m


def _fatal(m: Membership) -> Membership:
    _preparing(m).handle(join_error(23), 0.0)
    return m


BUILDERS: dict[str, tuple[MemberState, Callable[[Membership], Membership]]] = {
    "unjoined": (S.UNJOINED, _subscribed),
    "preparing": (S.PREPARING_REBALANCE, _preparing),
    "completing-follower": (S.COMPLETING_REBALANCE, _completing_follower),
    "completing-leader": (S.COMPLETING_REBALANCE, _completing_leader),
    "assigning": (S.ASSIGNING, _assigning),
    "stable": (S.STABLE, _stable),
    "stable-empty-lapsed": (S.STABLE, _stable_empty_lapsed),
    "revoking": (S.REVOKING, _revoking),
    "losing": (S.LOSING, _losing),
    "losing-lapsed": (S.LOSING, _losing_lapsed),
    "leaving": (S.LEAVING, _leaving),
    "closed": (S.CLOSED, _closed),
    "fatal": (S.FATAL, _fatal),
}


def test_builders_cover_every_state() -> None:
    assert {state for state, _ in BUILDERS.values()} == set(MemberState)


def sample(event_type: type[E.Event], m: Membership) -> E.Event:
    gen = m.generation_id
    samples: dict[type[E.Event], E.Event] = {
        E.SubscriptionChanged: E.SubscriptionChanged(True, "topics changed"),
        E.MetadataChanged: E.MetadataChanged("partitions added"),
        E.CoordinatorFound: E.CoordinatorFound(2),
        E.CoordinatorRequested: E.CoordinatorRequested(),
        E.CoordinatorLookupFailed: E.CoordinatorLookupFailed(15),
        E.JoinGroupResponseReceived: E.JoinGroupResponseReceived(
            JoinGroupResult(0, gen + 1, "consumer", "range", "m2", "m1")
        ),
        E.AssignmentComputed: E.AssignmentComputed((("m1", b""),)),
        E.SyncGroupResponseReceived: E.SyncGroupResponseReceived(
            SyncGroupResult(0, b""), gen, tps(1, 2)
        ),
        E.HeartbeatResponseReceived: E.HeartbeatResponseReceived(HeartbeatResult(0), gen),
        E.LeaveGroupResponseReceived: E.LeaveGroupResponseReceived(LeaveGroupResult(0)),
        E.OffsetCommitResponseReceived: E.OffsetCommitResponseReceived(
            OffsetCommitResult({("t", 0): 0}), gen
        ),
        E.ListenerCompleted: E.ListenerCompleted(m.listener_kind or E.Listener.ASSIGNED),
        E.FindCoordinatorFailed: E.FindCoordinatorFailed("connection"),
        E.JoinGroupFailed: E.JoinGroupFailed("connection", gen),
        E.SyncGroupFailed: E.SyncGroupFailed("timeout", gen),
        E.HeartbeatFailed: E.HeartbeatFailed("connection", gen),
        E.LeaveGroupFailed: E.LeaveGroupFailed("timeout", gen),
        E.OffsetCommitFailed: E.OffsetCommitFailed("coordinator", gen),
        E.OffsetFetchFailed: E.OffsetFetchFailed("connection"),
        E.TimerFired: E.TimerFired(),
        E.ApplicationPolled: E.ApplicationPolled(0.5),
        E.CloseRequested: E.CloseRequested(),
        E.BrokerIncompatible: E.BrokerIncompatible("JoinGroup", ValueError("no v9")),
        E.CommittedOffsetsUnavailable: E.CommittedOffsetsUnavailable(ValueError("no"), False),
        E.SubscribedTopicsMissing: E.SubscribedTopicsMissing(frozenset({"t"})),
        E.RoutineFailed: E.RoutineFailed("group coordination failed: bug", ValueError("bug")),
        # The consumer protocol's own events: a classic member refuses every one.
        E.Subscribed: E.Subscribed(frozenset({"t"})),
        E.UnsubscribeRequested: E.UnsubscribeRequested(),
        E.ConsumerGroupHeartbeatResponseReceived: E.ConsumerGroupHeartbeatResponseReceived(0),
        E.ConsumerGroupHeartbeatFailed: E.ConsumerGroupHeartbeatFailed("connection"),
        E.TopicNamesResolved: E.TopicNamesResolved({}),
        E.SessionTimeoutLearned: E.SessionTimeoutLearned(45000),
        E.SessionTimeoutLookupFailed: E.SessionTimeoutLookupFailed(OSError("refused")),
        E.TopicNamesLookupFailed: E.TopicNamesLookupFailed(OSError("refused")),
        # Share groups' own answers (KIP-932): a classic member refuses them too.
        E.ShareGroupHeartbeatResponseReceived: E.ShareGroupHeartbeatResponseReceived(0),
        E.ShareGroupHeartbeatFailed: E.ShareGroupHeartbeatFailed("connection"),
    }
    return samples[event_type]


EVENT_TYPES = sorted(
    {cls for cls in vars(E).values() if isinstance(cls, type) and issubclass(cls, E.Event)}
    - {E.Event, E.RequestFailed},
    key=lambda c: c.__name__,
)


def _reachable(start: frozenset[MemberState]) -> set[MemberState]:
    seen = set(start) | {S.FATAL}
    todo = list(start)
    while todo:
        state = todo.pop()
        for nxt in AUTOMATIC_TRANSITIONS.get(state, {}):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_sample_covers_every_event_type() -> None:
    m = make()
    for event_type in EVENT_TYPES:
        assert type(sample(event_type, m)) is event_type


@pytest.mark.parametrize("protocol", [EAGER, COOPERATIVE], ids=["eager", "cooperative"])
@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda c: c.__name__)
def test_every_state_and_event(protocol: object, builder: str, event_type: type[E.Event]) -> None:
    state, build = BUILDERS[builder]
    m = build(make(protocol))  # type: ignore[arg-type]
    assert m.state is state
    event = sample(event_type, m)
    transition = TRANSITIONS.get((state, event_type))
    if transition is None:
        with pytest.raises(MembershipProtocolError):
            m.handle(event, 0.5)
        assert m.state is (state if state in (S.CLOSED, S.FATAL) else S.FATAL)
        return
    try:
        out = m.handle(event, 0.5)
    except MembershipProtocolError:
        # only a handler's own consistency check may refuse, and it leaves FATAL behind
        assert m.state is S.FATAL
        return
    assert m.state in _reachable(transition.targets)
    assert {type(a) for a in out} <= ACTION_TYPES, out


def test_mermaid_diagram_is_drawn_from_the_tables() -> None:
    text = mermaid_diagram()
    assert text.startswith("stateDiagram-v2\n")
    for state in MemberState:
        assert state.value in text
    assert "PREPARING_REBALANCE --> COMPLETING_REBALANCE: JoinGroupResponseReceived" in text
    assert "REVOKING --> ASSIGNING: ListenerCompleted" in text
