"""Heartbeat answers x member states: which answers keep the session, and what follows.

Issue 12: a member whose revoke listener outlived the session timeout counted the
coordinator's REBALANCE_IN_PROGRESS answers as "no proof", declared its own session
expired after ``session_timeout`` and stopped heartbeating - while the broker was
waiting for it to rejoin.  Kafka's coordinator answers REBALANCE_IN_PROGRESS only to
a member it knows, in its generation, and extends that member's session; the Java
heartbeat thread counts it as received.  These tests pin the table for every
(state, error code) pair and drive the long-listener scenarios through the machine.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.machine import (
    HEARTBEAT_ANSWERS,
    HeartbeatAnswer,
    Membership,
    MemberState,
    Reaction,
    heartbeat_answer,
)
from aiogroup._protocol.results import OffsetCommitResult
from aiogroup.structs import RebalanceProtocol

from .driver import (
    BACKOFF,
    COOPERATIVE,
    EAGER,
    HEARTBEAT,
    SESSION,
    heartbeat,
    join_ok,
    leave_ok,
    sync_ok,
    tps,
)

S = MemberState
R = Reaction
C = ErrorCode
CODES = [*ErrorCode, 9999]  # 9999: a code no table knows
HEARTBEATING = (S.STABLE, S.ASSIGNING, S.REVOKING)
#: The issue's scenario: max_poll_interval (and so the rebalance timeout) 120 s.
REBALANCE = 120.0
SLOW = 5 * SESSION  # the listener runs five times the session timeout

# -- the table, written out by hand (the machine's table must agree) -------------------------

#: In a heartbeating state: code -> (keeps the session?, reaction).
EXPECTED_IN_HEARTBEATING_STATE: dict[int, tuple[bool, Reaction]] = {
    C.NONE: (True, R.IGNORE),
    C.REBALANCE_IN_PROGRESS: (True, R.REJOIN),  # REVOKING: IGNORE, see below
    C.ILLEGAL_GENERATION: (False, R.LOSE),
    C.UNKNOWN_MEMBER_ID: (False, R.LOSE),
    C.FENCED_INSTANCE_ID: (False, R.FENCED),
    C.COORDINATOR_LOAD_IN_PROGRESS: (False, R.RETRY_BACKOFF),
    C.COORDINATOR_NOT_AVAILABLE: (False, R.FIND_COORDINATOR),
    C.NOT_COORDINATOR: (False, R.FIND_COORDINATOR),
    C.REQUEST_TIMED_OUT: (False, R.FIND_COORDINATOR),
    C.GROUP_AUTHORIZATION_FAILED: (False, R.REPORT_RETRY),
    C.UNSUPPORTED_VERSION: (False, R.FATAL),
}


def expected(state: MemberState, code: int) -> HeartbeatAnswer:
    if state not in HEARTBEATING:
        return HeartbeatAnswer(False, R.IGNORE)
    keeps, react = EXPECTED_IN_HEARTBEATING_STATE.get(code, (False, R.REPORT_RETRY))
    if state is S.REVOKING and code == C.REBALANCE_IN_PROGRESS:
        react = R.IGNORE  # already releasing; the rejoin (or leave) follows the listener
    return HeartbeatAnswer(keeps, react)


@pytest.mark.parametrize("state", list(MemberState), ids=lambda s: s.value)
@pytest.mark.parametrize("code", CODES, ids=str)
def test_table_entry(state: MemberState, code: int) -> None:
    assert heartbeat_answer(state, code) == expected(state, code)


def test_table_covers_every_state_and_known_code() -> None:
    assert set(HEARTBEAT_ANSWERS) == {(s, c) for s in MemberState for c in ErrorCode}


def test_only_success_and_rebalance_in_progress_prove_the_session() -> None:
    proving = {code for (_, code), a in HEARTBEAT_ANSWERS.items() if a.keeps_session}
    assert proving == {C.NONE, C.REBALANCE_IN_PROGRESS}


# -- every (state, code) pair fed to a machine in that state ------------------------------------


def machine(protocol: RebalanceProtocol = EAGER) -> Membership:
    return Membership(
        protocol=protocol,
        session_timeout=SESSION,
        heartbeat_interval=HEARTBEAT,
        max_poll_interval=REBALANCE,
        rebalance_timeout=REBALANCE,
        retry_backoff=BACKOFF,
    )


def _joined(m: Membership, generation: int = 1) -> None:
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    m.handle(join_ok(generation), 0.0)


def _beat(m: Membership, now: float) -> None:
    """Advance to ``now`` and make sure a heartbeat is in flight."""
    out = m.handle(E.TimerFired(), now)
    assert A.SendHeartbeat(m.generation_id, m.member_id) in out, out
    assert m.timers.in_flight


def in_stable() -> Membership:
    m = machine()
    _joined(m)
    m.handle(sync_ok(1, tps(0, 1)), 0.0)
    m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 0.0)
    _beat(m, 1.0)
    return m


def in_stable_lapsed() -> Membership:
    """STABLE owning nothing after a session without an answer: the coordinator was
    looked up again and the first heartbeat to it is in flight (a member that owned
    partitions would have been told they are lost, see SESSION_ELAPSED)."""
    m = machine()
    _joined(m)
    m.handle(sync_ok(1, frozenset()), 0.0)
    m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 0.0)
    _beat(m, 1.0)
    out = m.handle(E.TimerFired(), SESSION)
    assert [type(a) for a in out] == [A.FindCoordinator] and m.coordinator_id is None
    out = m.handle(E.CoordinatorFound(2), SESSION + 0.2)
    assert out == [A.SendHeartbeat(1, "m1")]
    assert m.session_unproven and m.timers.in_flight and m.state is S.STABLE
    return m


def in_assigning() -> Membership:
    m = machine()
    _joined(m)
    m.handle(sync_ok(1, tps(0, 1)), 0.0)
    _beat(m, 1.0)
    return m


def in_revoking_eager() -> Membership:
    m = in_stable()
    m.handle(heartbeat(C.REBALANCE_IN_PROGRESS, 1), 1.1)
    assert m.state is S.REVOKING
    _beat(m, 2.1)
    return m


def in_revoking_cooperative() -> Membership:
    m = machine(COOPERATIVE)
    _joined(m)
    m.handle(sync_ok(1, tps(0, 1)), 0.0)
    m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 0.0)
    m.handle(E.MetadataChanged("a member joined"), 0.5)
    m.handle(join_ok(2), 0.6)
    m.handle(sync_ok(2, tps(0)), 0.7)
    assert m.state is S.REVOKING
    _beat(m, 1.7)
    return m


def in_revoking_leaving() -> Membership:
    m = in_stable()
    m.handle(E.SubscriptionChanged(False), 1.1)
    assert m.state is S.REVOKING
    return m


def in_unjoined() -> Membership:
    m = machine()
    m.handle(E.SubscriptionChanged(True), 0.0)
    return m


def in_preparing() -> Membership:
    """A cooperative rejoin while a heartbeat is still in flight."""
    m = machine(COOPERATIVE)
    _joined(m)
    m.handle(sync_ok(1, tps(0, 1)), 0.0)
    m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 0.0)
    _beat(m, 1.0)
    m.handle(E.MetadataChanged("partitions added"), 1.1)
    assert m.state is S.PREPARING_REBALANCE
    return m


def in_completing() -> Membership:
    m = machine()
    _joined(m)
    return m


def in_losing() -> Membership:
    m = in_stable()
    m.handle(E.OffsetCommitResponseReceived(OffsetCommitResult({("t", 0): 25}), 1), 1.1)
    assert m.state is S.LOSING
    return m


def in_leaving() -> Membership:
    m = machine()
    _joined(m)
    m.handle(sync_ok(1, frozenset()), 0.0)
    m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 0.0)
    _beat(m, 1.0)
    m.handle(E.SubscriptionChanged(False), 1.1)
    assert m.state is S.LEAVING
    return m


def in_closed() -> Membership:
    m = in_leaving()
    m.handle(E.CloseRequested(), 1.2)
    m.handle(leave_ok(), 1.3)
    assert m.state is S.CLOSED
    return m


def in_fatal() -> Membership:
    m = in_stable()
    m.handle(heartbeat(C.UNSUPPORTED_VERSION, 1), 1.1)
    m.handle(E.ListenerCompleted(E.Listener.LOST), 1.2)
    assert m.state is S.FATAL
    return m


SETUPS: dict[str, tuple[MemberState, Callable[[], Membership]]] = {
    "stable": (S.STABLE, in_stable),
    "stable-lapsed": (S.STABLE, in_stable_lapsed),
    "assigning": (S.ASSIGNING, in_assigning),
    "revoking-eager": (S.REVOKING, in_revoking_eager),
    "revoking-cooperative": (S.REVOKING, in_revoking_cooperative),
    "revoking-leaving": (S.REVOKING, in_revoking_leaving),
    "unjoined": (S.UNJOINED, in_unjoined),
    "preparing": (S.PREPARING_REBALANCE, in_preparing),
    "completing": (S.COMPLETING_REBALANCE, in_completing),
    "losing": (S.LOSING, in_losing),
    "leaving": (S.LEAVING, in_leaving),
    "closed": (S.CLOSED, in_closed),
    "fatal": (S.FATAL, in_fatal),
}


def test_setups_reach_every_state() -> None:
    assert {state for state, _ in SETUPS.values()} == set(MemberState)


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("code", CODES, ids=str)
def test_answer_in_state(setup: str, code: int) -> None:
    state, build = SETUPS[setup]
    m = build()
    assert m.state is state
    want = expected(state, code)
    now = m._now + 0.2
    deadline_before = m.timers.session_deadline()
    sent_at = m.timers.last_sent  # the beat in flight, if any
    generation, member, owned = m.generation_id, m.member_id, m.owned
    listener = m.listener_kind
    out = m.handle(heartbeat(code, m.generation_id), now)
    raised = [a for a in out if isinstance(a, A.RaiseToApplication)]

    if want.keeps_session:
        # the proof dates from the beat's sending, not from its answer
        assert m.timers.session_deadline() == sent_at + SESSION
        assert not m.timers.in_flight
        assert not m.session_unproven  # a proving answer reopens the delivery gate
    else:
        assert m.timers.session_deadline() == deadline_before
        if setup == "stable-lapsed" and m.heartbeats_active:
            assert m.session_unproven  # only a proving answer reopens it

    react = want.reaction
    if react is R.IGNORE:
        assert (m.state, m.generation_id, m.member_id, m.owned) == (
            state,
            generation,
            member,
            owned,
        )
        assert raised == [] and not any(isinstance(a, A.InvokeOnPartitionsLost) for a in out)
    elif react is R.REJOIN:
        if state is S.STABLE:  # eager: revoke everything before rejoining
            assert m.state is S.REVOKING and out[-1] == A.InvokeOnPartitionsRevoked(owned, False)
        else:  # the running listener finishes first; the rejoin is remembered
            assert m.state is state and m.rejoin_reason == "Heartbeat: REBALANCE_IN_PROGRESS"
        assert (m.generation_id, m.member_id) == (generation, member)
    elif react in (R.LOSE, R.FENCED, R.FATAL):
        assert m.generation_id == -1 and m.member_id == ""
        assert not m.heartbeats_active
        if react is not R.LOSE:
            assert [r.fatal for r in raised] == [True]
        if state is S.STABLE and owned:  # a running listener finishes first, then lost
            assert out[-1] == A.InvokeOnPartitionsLost(owned)
    elif react is R.RETRY_BACKOFF:
        assert m.state is state and m.timers.next_heartbeat_at() == now + BACKOFF
        assert any(isinstance(a, A.Backoff) for a in out)
    elif react is R.FIND_COORDINATOR:
        assert m.state is state and m.coordinator_id is None
        assert any(isinstance(a, A.FindCoordinator) for a in out)
        assert m.generation_id == generation
    elif react is R.REPORT_RETRY:
        assert m.state is state and [r.fatal for r in raised] == [False]
        assert m.generation_id == generation
    else:  # pragma: no cover - a reaction the table does not use for heartbeats
        pytest.fail(f"unexpected reaction {react}")
    if state in (S.ASSIGNING, S.REVOKING):
        assert m.listener_kind == listener  # a running listener is never cut short


# -- the scenarios: listeners running five times the session timeout ------------------


def _beat_through(m: Membership, start: float, until: float, code: int) -> float:
    """Answer every heartbeat the machine sends with ``code`` until ``until``."""
    now = start
    while now < until:
        now += HEARTBEAT
        out = m.handle(E.TimerFired(), now)
        assert A.SendHeartbeat(m.generation_id, m.member_id) in out, (now, m.state, out)
        assert not any(isinstance(a, A.InvokeOnPartitionsLost | A.CancelListener) for a in out)
        out = m.handle(heartbeat(code, m.generation_id), now + 0.05)
        assert not any(isinstance(a, A.InvokeOnPartitionsLost | A.SendJoinGroup) for a in out)
        assert m.generation_id >= 0, f"membership given up at {now}s"
    return now


def test_eager_revoke_five_session_timeouts_then_rejoin_at_once() -> None:
    m = in_stable()
    out = m.handle(heartbeat(C.REBALANCE_IN_PROGRESS, 1), 1.1)
    assert out[-1] == A.InvokeOnPartitionsRevoked(tps(0, 1), False)
    now = _beat_through(m, 1.1, 1.1 + SLOW, C.REBALANCE_IN_PROGRESS)
    assert m.state is S.REVOKING and (m.generation_id, m.member_id) == (1, "m1")
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), now + 0.5)
    # the JoinGroup goes out in the same step, under the identity the broker kept
    assert out == [
        A.SetAssignment(None),
        A.SendJoinGroup("Heartbeat: REBALANCE_IN_PROGRESS", "m1", 1, frozenset()),
    ]


def test_eager_assigned_five_session_timeouts_then_revoke_and_rejoin() -> None:
    m = in_assigning()
    m.handle(heartbeat(C.REBALANCE_IN_PROGRESS, 1), 1.1)
    assert m.state is S.ASSIGNING
    now = _beat_through(m, 1.1, 1.1 + SLOW, C.REBALANCE_IN_PROGRESS)
    out = m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), now + 0.5)
    assert m.state is S.REVOKING and out[-1] == A.InvokeOnPartitionsRevoked(tps(0, 1), False)
    _beat_through(m, now + 0.5, now + 3.5, C.REBALANCE_IN_PROGRESS)
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), now + 4.0)
    assert isinstance(out[-1], A.SendJoinGroup) and out[-1].member_id == "m1"


def test_cooperative_assigned_five_session_timeouts_then_rejoin_keeping_partitions() -> None:
    m = machine(COOPERATIVE)
    _joined(m)
    m.handle(sync_ok(1, tps(0, 1)), 0.0)
    _beat(m, 1.0)
    m.handle(heartbeat(C.REBALANCE_IN_PROGRESS, 1), 1.1)
    now = _beat_through(m, 1.1, 1.1 + SLOW, C.REBALANCE_IN_PROGRESS)
    out = m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), now + 0.5)
    assert out == [A.SendJoinGroup("Heartbeat: REBALANCE_IN_PROGRESS", "m1", 1, tps(0, 1))]


@pytest.mark.parametrize("code", [C.NONE, C.REBALANCE_IN_PROGRESS], ids=str)
def test_cooperative_revoke_five_session_timeouts_then_rejoin(code: int) -> None:
    m = in_revoking_cooperative()
    m.handle(heartbeat(code, 2), 1.8)
    now = _beat_through(m, 1.8, 1.8 + SLOW, code)
    assert (m.state, m.generation_id, m.owned) == (S.REVOKING, 2, tps(0, 1))
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), now + 0.5)
    assert out == [A.SetAssignment(tps(0)), A.InvokeOnPartitionsAssigned(frozenset(), 2)]
    out = m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), now + 0.6)
    assert [type(a) for a in out] == [A.SendJoinGroup] and out[0].owned_partitions == tps(0)


@pytest.mark.parametrize(
    "failure",
    [
        heartbeat(C.COORDINATOR_LOAD_IN_PROGRESS, 1),
        heartbeat(C.GROUP_AUTHORIZATION_FAILED, 1),
        E.HeartbeatFailed("timeout", 1),
        None,  # no answer at all
    ],
    ids=["load-in-progress", "authorization", "timeout", "silence"],
)
def test_session_rule_fires_when_the_broker_stops_answering(failure: E.Event | None) -> None:
    """``session_timeout`` after the last proof the session is unproven (delivery is
    gated); the coordinator is suspected, never the membership: the generation stays."""
    m = in_revoking_eager()
    last_proof = m.timers.last_sent  # an answer proves the session from the beat's sending
    now = 2.2
    m.handle(heartbeat(C.REBALANCE_IN_PROGRESS, 1), now)
    unproven_at = None
    while unproven_at is None and now < last_proof + 2 * SESSION:
        now += BACKOFF
        out = m.handle(E.TimerFired(), now)
        if failure is not None and m.timers.in_flight:
            out += m.handle(failure, now)
        if m.session_unproven:
            unproven_at = now
    assert unproven_at is not None
    assert last_proof + SESSION <= unproven_at < last_proof + SESSION + 2 * BACKOFF
    assert m.timers.session_deadline() == last_proof + SESSION
    assert (m.state, m.generation_id, m.member_id) == (S.REVOKING, 1, "m1")
    assert m.coordinator_id is None  # a timeout already dropped it; otherwise the session did
    if failure is None or isinstance(failure, E.HeartbeatResponseReceived):
        assert [a for a in out if isinstance(a, A.FindCoordinator)], out
    # the revoke still runs; when it returns, the rejoin keeps the identity (the
    # JoinGroup itself is the broker's judgement; eager: nothing is owned any more)
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), now + 1.0)
    out += m.handle(E.CoordinatorFound(1), now + 1.1)
    assert isinstance(out[-1], A.SendJoinGroup), out
    assert (out[-1].member_id, out[-1].generation_id, out[-1].owned_partitions) == (
        "m1",
        1,
        frozenset(),
    )


def test_listener_deadline_is_the_rebalance_timeout_not_the_session() -> None:
    m = in_stable()
    m.handle(heartbeat(C.REBALANCE_IN_PROGRESS, 1), 1.1)
    now = _beat_through(m, 1.1, 1.1 + REBALANCE - 2 * HEARTBEAT, C.REBALANCE_IN_PROGRESS)
    cancelled: list[A.Action] = []
    while not cancelled:
        now += HEARTBEAT
        out = m.handle(E.TimerFired(), now)
        cancelled = [a for a in out if isinstance(a, A.CancelListener)]
        if m.timers.in_flight:
            m.handle(heartbeat(C.REBALANCE_IN_PROGRESS, 1), now)
    assert 1.1 + REBALANCE <= now < 1.1 + REBALANCE + HEARTBEAT
    assert m.generation_id == 1  # the session held the whole time
