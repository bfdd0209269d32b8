"""A session that passes without a heartbeat answer (issue 13): suspect the coordinator.

Java's classic client marks the coordinator unknown when its session elapses without
a successful heartbeat, finds it again and keeps member id and generation; only the
broker's UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED_INSTANCE_ID end the
membership.  aiogroup does the same and keeps its stronger safety: past the proof
deadline (``timers.session_deadline()``, published as the delivery gate) no record is
handed out, no commit is allowed and no rejoin starts until an answer decides.
"""

from __future__ import annotations

import pytest

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.heartbeat import HeartbeatTimers
from aiogroup._membership.machine import (
    SESSION_ELAPSED,
    ErrorCode,
    Membership,
    MemberState,
    Reaction,
)

from .driver import (
    BACKOFF,
    COOPERATIVE,
    EAGER,
    SESSION,
    heartbeat,
    join_ok,
    make,
    sync_ok,
    to_stable,
    tps,
)

S = MemberState
C = ErrorCode
REASON = (
    "session timed out without a heartbeat answer: finding the coordinator again "
    "(member id and generation kept; delivery paused until an answer)"
)


def unproven(protocol: object = EAGER, *, found: bool = True) -> Membership:
    """STABLE with p0 and p1, the session elapsed at SESSION with a beat unanswered;
    when ``found``, the coordinator was found again and a heartbeat to it is in flight."""
    m = make(protocol)  # type: ignore[arg-type]
    to_stable(m, tps(0, 1))
    assert m.handle(E.TimerFired(), 1.0) == [A.SendHeartbeat(1, "m1")]
    assert m.handle(E.TimerFired(), SESSION) == [A.FindCoordinator(REASON)]
    if found:
        assert m.handle(E.CoordinatorFound(2), SESSION + 0.5) == [A.SendHeartbeat(1, "m1")]
    return m


def test_the_table_entry_is_find_coordinator() -> None:
    assert SESSION_ELAPSED is Reaction.FIND_COORDINATOR


def test_discovery_restarts_the_check_clock_not_the_proof_clock() -> None:
    t = HeartbeatTimers(
        session_timeout=SESSION, heartbeat_interval=1.0, max_poll_interval=30, retry_backoff=0
    )
    t.reset_session(0.0)
    t.coordinator_found(4.0)
    assert t.session_deadline() == SESSION  # the gate: only an answer moves it
    assert t.session_check_deadline() == 4.0 + SESSION
    assert t.session_expired(SESSION) and not t.session_check_due(SESSION)
    t.succeeded(5.0)
    assert t.session_deadline() == t.session_check_deadline() == 5.0 + SESSION


def test_unproven_member_keeps_identity_is_gated_and_refuses_commits() -> None:
    m = unproven(found=False)
    assert (m.state, m.generation_id, m.member_id, m.owned) == (S.STABLE, 1, "m1", tps(0, 1))
    assert m.heartbeats_active and m.session_unproven
    assert m.timers.session_deadline() == SESSION  # the published gate stays shut
    gate = m.commit_gate(tps(0))
    assert not gate.allowed and "session_timeout_ms" in (gate.refusal or "")
    # without a coordinator nothing is due but the lookup's answer: no busy loop
    deadline = m.next_deadline()
    assert deadline is None or deadline > SESSION


@pytest.mark.parametrize("code", [C.NONE, C.REBALANCE_IN_PROGRESS], ids=str)
def test_a_proving_answer_reopens_the_gate_with_a_fresh_deadline(code: int) -> None:
    m = unproven()
    m.handle(heartbeat(code, 1), SESSION + 0.6)
    assert not m.session_unproven
    assert m.timers.session_deadline() == SESSION + 0.6 + SESSION
    assert (m.generation_id, m.member_id) == (1, "m1")
    if code == C.NONE:
        assert m.state is S.STABLE and m.commit_gate(tps(0, 1)).allowed
    else:  # the same generation is rebalancing: eager revokes, then rejoins as m1
        assert m.state is S.REVOKING


@pytest.mark.parametrize(
    "code", [C.UNKNOWN_MEMBER_ID, C.ILLEGAL_GENERATION, C.FENCED_INSTANCE_ID], ids=str
)
def test_the_broker_ending_the_membership_means_lost(code: int) -> None:
    m = unproven()
    out = m.handle(heartbeat(code, 1), SESSION + 0.6)
    lost = [A.MarkRevoking(tps(0, 1)), A.InvokeOnPartitionsLost(tps(0, 1))]
    assert out[-2:] == lost  # FENCED_INSTANCE_ID raises (fatal) first
    assert m.state is S.LOSING and m.generation_id == -1


def test_a_rejoin_waits_for_the_answer_then_keeps_the_identity() -> None:
    """Cooperative: a rejoin claims the owned partitions, and the join states deliver
    without the gate, so no JoinGroup goes out while the session is unproven."""
    m = unproven(COOPERATIVE)
    assert m.handle(E.MetadataChanged("partitions added"), SESSION + 0.6) == []
    assert m.state is S.STABLE and m.rejoin_reason == "partitions added"
    out = m.handle(heartbeat(C.NONE, 1), SESSION + 0.7)
    assert out == [A.SendJoinGroup("partitions added", "m1", 1, tps(0, 1))]


def test_a_rejoin_after_the_broker_dropped_us_is_as_a_new_member() -> None:
    m = unproven(COOPERATIVE)
    m.handle(E.MetadataChanged("partitions added"), SESSION + 0.6)
    out = m.handle(heartbeat(C.UNKNOWN_MEMBER_ID, 1), SESSION + 0.7)
    assert out == [A.MarkRevoking(tps(0, 1)), A.InvokeOnPartitionsLost(tps(0, 1))]
    out = m.handle(E.ListenerCompleted("lost"), SESSION + 0.8)
    assert out[0] == A.SetAssignment(None)
    assert isinstance(out[-1], A.SendJoinGroup) and out[-1].member_id == ""


def test_a_silent_new_coordinator_is_suspected_a_session_after_its_discovery() -> None:
    m = unproven()  # found at SESSION + 0.5, heartbeat in flight
    assert m.next_deadline() == SESSION + 0.5 + SESSION
    assert m.handle(E.TimerFired(), SESSION + 0.5 + SESSION) == [A.FindCoordinator(REASON)]
    assert (m.state, m.generation_id, m.member_id) == (S.STABLE, 1, "m1")


def test_no_coordinator_ever_found_waits_gated_and_closes_without_hanging() -> None:
    """Java waits with the coordinator unknown.  The member retries the lookup every
    backoff for as long as it runs; close() revokes (the broker never said lost) and
    ends without a LeaveGroup, which has nowhere to go."""
    m = unproven(found=False)
    now = SESSION
    for _ in range(int(10 * SESSION / BACKOFF)):
        now += BACKOFF
        m.handle(E.ApplicationPolled(now), now)  # the application polls on (gets nothing)
        out = m.handle(E.FindCoordinatorFailed("connection"), now)
        assert [type(a) for a in out] == [A.Backoff]
        out = m.handle(E.TimerFired(), now + BACKOFF)
        assert [type(a) for a in out] == [A.FindCoordinator]
    assert (m.state, m.generation_id, m.owned) == (S.STABLE, 1, tps(0, 1))
    assert m.session_unproven
    out = m.handle(E.CloseRequested(), now + 1)
    assert out == [A.MarkRevoking(tps(0, 1)), A.InvokeOnPartitionsRevoked(tps(0, 1), False)]
    out = m.handle(E.ListenerCompleted("revoked"), now + 2)
    assert out == [A.SetAssignment(None)]
    assert m.state is S.CLOSED


def test_assigning_listener_outliving_an_unanswered_session_stays_gated() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    m.handle(join_ok(1), 0.0)
    m.handle(sync_ok(1, tps(0)), 0.0)
    assert m.state is S.ASSIGNING
    m.handle(E.TimerFired(), 1.0)  # heartbeat, never answered
    assert m.handle(E.TimerFired(), SESSION) == [A.FindCoordinator(REASON)]
    assert m.handle(E.ListenerCompleted("assigned"), SESSION + 1) == []
    assert m.state is S.STABLE and m.session_unproven
    m.handle(E.CoordinatorFound(1), SESSION + 2)
    m.handle(heartbeat(C.NONE, 1), SESSION + 2.1)
    assert not m.session_unproven and m.commit_gate(tps(0)).allowed
