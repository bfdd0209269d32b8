"""A session that lapses without a heartbeat answer (issue 13): suspect the coordinator.

Java's classic client marks the coordinator unknown when its session elapses without
a successful heartbeat, finds it again and keeps member id and generation; only the
broker's UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED_INSTANCE_ID end the
membership.  aiogroup does the same and keeps its stronger safety: past the proof
deadline (``timers.session_deadline()``, published as the delivery gate) no record is
handed out and no commit is allowed; partitions still owned are lost to the
application (the broker may hand them on from now) and the member rejoins under the
same id; a proving answer during a listener, or to a member owning nothing, ends the
lapse instead.  See ``machine.SESSION_ELAPSED``.
"""

from __future__ import annotations

import pytest

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.heartbeat import HeartbeatTimers
from aiogroup._membership.machine import (
    SESSION_ELAPSED,
    Membership,
    MemberState,
    Reaction,
)
from aiogroup.structs import RebalanceProtocol, TopicPartition

from .driver import (
    BACKOFF,
    COOPERATIVE,
    EAGER,
    SESSION,
    heartbeat,
    join_error,
    join_ok,
    make,
    sync_ok,
    to_stable,
    tps,
)

S = MemberState
C = ErrorCode
FIND = A.FindCoordinator(
    "session timed out without a heartbeat answer: finding the coordinator again "
    "(member id and generation kept)"
)
REJOIN = (
    f"no heartbeat answer for session_timeout_ms ({SESSION:g}s); rejoining under the same member id"
)


def lapsed(
    protocol: RebalanceProtocol = EAGER, owned: frozenset[TopicPartition] = tps(0, 1)
) -> tuple[Membership, list[A.Action]]:
    """STABLE with ``owned``; a beat at 1.0 is never answered; returns the lapse's actions."""
    m = make(protocol)
    to_stable(m, owned)
    assert m.handle(E.TimerFired(), 1.0) == [A.SendHeartbeat(1, "m1")]
    return m, m.handle(E.TimerFired(), SESSION)


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
    t.sent(4.5)
    t.succeeded(5.0)
    assert t.session_deadline() == 4.5 + SESSION  # the proof dates from the beat's sending
    assert t.session_check_deadline() == 5.0 + SESSION


@pytest.mark.parametrize("protocol", [EAGER, COOPERATIVE], ids=["eager", "cooperative"])
def test_owned_partitions_are_lost_and_the_rejoin_keeps_the_identity(
    protocol: RebalanceProtocol,
) -> None:
    m, out = lapsed(protocol)
    assert out == [FIND, A.MarkRevoking(tps(0, 1)), A.InvokeOnPartitionsLost(tps(0, 1))]
    assert (m.state, m.generation_id, m.member_id) == (S.LOSING, 1, "m1")
    assert not m.commit_gate(tps(0)).allowed
    assert m.handle(E.ListenerCompleted(E.Listener.LOST), SESSION + 1) == [A.SetAssignment(None)]
    assert m.state is S.UNJOINED and not m.session_unproven
    # no eager pre-join revoke: the lost callback prepared this rebalance
    out = m.handle(E.CoordinatorFound(2), SESSION + 2)
    assert out == [A.SendJoinGroup(REJOIN, "m1", 1, frozenset())]
    # the broker had evicted us: now the identity goes, and nothing is lost twice
    out = m.handle(join_error(C.UNKNOWN_MEMBER_ID), SESSION + 3)
    assert [type(a) for a in out] == [A.SendJoinGroup] and out[0].member_id == ""


def test_the_broker_keeping_us_gives_the_assignment_back_in_the_same_generation() -> None:
    """Kafka answers a follower that rejoins with unchanged metadata with its current
    generation and assignment: no rebalance for the others."""
    m, _ = lapsed()
    m.handle(E.ListenerCompleted(E.Listener.LOST), SESSION + 1)
    m.handle(E.CoordinatorFound(2), SESSION + 2)
    assert m.handle(join_ok(1), SESSION + 3) == [A.SendSyncGroup(1, "m1", "range", ())]
    out = m.handle(sync_ok(1, tps(0, 1)), SESSION + 4)
    assert out == [A.SetAssignment(tps(0, 1)), A.InvokeOnPartitionsAssigned(tps(0, 1), 1)]
    m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), SESSION + 4)
    assert m.state is S.STABLE and m.commit_gate(tps(0)).allowed
    assert m.timers.session_deadline() == SESSION + 3 + SESSION  # from the SyncGroup's sending


def test_a_member_owning_nothing_keeps_heartbeating_gated() -> None:
    m, out = lapsed(owned=frozenset())
    assert out == [FIND]
    assert (m.state, m.generation_id, m.member_id) == (S.STABLE, 1, "m1")
    assert m.session_unproven and m.timers.session_deadline() == SESSION
    # without a coordinator nothing is due but the lookup's answer: no busy loop
    deadline = m.next_deadline()
    assert deadline is None or deadline > SESSION
    assert m.handle(E.CoordinatorFound(2), SESSION + 0.5) == [A.SendHeartbeat(1, "m1")]
    # a found coordinator that stays silent is suspected a session after its discovery
    assert m.next_deadline() == SESSION + 0.5 + SESSION
    assert m.handle(E.TimerFired(), SESSION + 0.5 + SESSION) == [FIND]
    assert (m.state, m.generation_id) == (S.STABLE, 1)


@pytest.mark.parametrize("code", [C.NONE, C.REBALANCE_IN_PROGRESS], ids=str)
def test_a_proving_answer_reopens_the_gate_with_a_fresh_deadline(code: int) -> None:
    m, _ = lapsed(owned=frozenset())
    m.handle(E.CoordinatorFound(2), SESSION + 0.5)
    m.handle(heartbeat(code, 1), SESSION + 0.6)
    assert not m.session_unproven
    assert m.timers.session_deadline() == SESSION + 0.5 + SESSION  # the beat left at +0.5
    assert (m.generation_id, m.member_id) == (1, "m1")
    assert m.state is (S.STABLE if code == C.NONE else S.REVOKING)  # eager: revoke, rejoin


@pytest.mark.parametrize("code", [C.UNKNOWN_MEMBER_ID, C.ILLEGAL_GENERATION], ids=str)
def test_the_broker_ending_the_membership_resets_the_identity(code: int) -> None:
    m, _ = lapsed(owned=frozenset())
    m.handle(E.CoordinatorFound(2), SESSION + 0.5)
    out = m.handle(heartbeat(code, 1), SESSION + 0.6)
    assert not any(isinstance(a, A.InvokeOnPartitionsLost) for a in out)  # nothing owned
    assert isinstance(out[-1], A.SendJoinGroup) and out[-1].member_id == ""


def _assigning() -> Membership:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    m.handle(join_ok(1), 0.0)
    m.handle(sync_ok(1, tps(0)), 0.0)
    assert m.state is S.ASSIGNING
    m.handle(E.TimerFired(), 1.0)  # heartbeat, never answered
    assert m.handle(E.TimerFired(), SESSION) == [FIND]  # a listener runs: no lost yet
    return m


def test_a_proof_during_a_listener_ends_the_lapse() -> None:
    m = _assigning()
    assert m.handle(E.CoordinatorFound(1), SESSION + 1) == [A.SendHeartbeat(1, "m1")]
    m.handle(heartbeat(C.NONE, 1), SESSION + 1.1)
    out = m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), SESSION + 2)
    assert out == [A.SendHeartbeat(1, "m1")]  # the next beat is due; nothing is lost
    assert m.state is S.STABLE and not m.session_unproven and m.commit_gate(tps(0)).allowed


def test_no_proof_during_a_listener_means_lost_when_it_returns() -> None:
    m = _assigning()
    out = m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), SESSION + 1)
    assert out == [A.MarkRevoking(tps(0)), A.InvokeOnPartitionsLost(tps(0))]
    assert (m.generation_id, m.member_id) == (1, "m1")


def test_a_cooperative_pending_assignment_is_not_installed_after_a_lapse() -> None:
    m = make(COOPERATIVE)
    to_stable(m, tps(0, 1))
    m.handle(E.MetadataChanged("a member joined"), 0.5)
    m.handle(join_ok(2), 0.6)
    out = m.handle(sync_ok(2, tps(0)), 0.7)  # p1 moves: revoke it first
    assert m.state is S.REVOKING and out[-1] == A.InvokeOnPartitionsRevoked(tps(1), False)
    m.handle(E.TimerFired(), 1.7)  # heartbeat, never answered
    assert m.handle(E.TimerFired(), 0.7 + SESSION) == [FIND]
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), 0.7 + SESSION + 1)
    # what was kept (p0) is lost now; the pending assignment is dropped
    assert out == [
        A.SetAssignment(tps(0)),
        A.MarkRevoking(tps(0)),
        A.InvokeOnPartitionsLost(tps(0)),
    ]
    assert (m.generation_id, m.member_id) == (2, "m1")


def test_no_coordinator_ever_found_waits_and_closes_without_hanging() -> None:
    """Java waits with the coordinator unknown.  The member retries the lookup for as
    long as it runs, the backoff doubling from retry_backoff to 1 s (KIP-580); close()
    ends without a LeaveGroup, which has nowhere to go."""
    m, _ = lapsed()
    m.handle(E.ListenerCompleted(E.Listener.LOST), SESSION + 0.05)
    now = SESSION + 0.05
    delays = []
    for _ in range(int(10 * SESSION / BACKOFF)):
        m.handle(E.ApplicationPolled(now), now)  # the application polls on (gets nothing)
        out = m.handle(E.FindCoordinatorFailed("connection"), now)
        assert [type(a) for a in out] == [A.Backoff]
        delay = out[0].seconds
        delays.append(delay)
        assert m.handle(E.TimerFired(), now + delay - 0.001) == []
        now += delay
        out = m.handle(E.TimerFired(), now)
        assert [type(a) for a in out] == [A.FindCoordinator]
    assert delays[:3] == [BACKOFF, 2 * BACKOFF, 4 * BACKOFF]
    assert max(delays) == delays[-1] == max(BACKOFF, 1.0)
    assert (m.state, m.generation_id, m.member_id) == (S.UNJOINED, 1, "m1")
    assert m.handle(E.CloseRequested(), now + 1) == []
    assert m.state is S.CLOSED


def test_the_lapse_is_due_at_the_proof_deadline_without_a_coordinator() -> None:
    """A lookup that hangs (a cut network) must not delay the lapse: the application
    has to learn of it before the broker can hand the partitions on."""
    m = make()
    to_stable(m, tps(0))
    m.handle(E.TimerFired(), 1.0)
    m.handle(E.HeartbeatFailed("connection", 1), 1.1)  # coordinator unknown, lookup sent
    assert m.coordinator_id is None and m.next_deadline() == SESSION
    out = m.handle(E.TimerFired(), SESSION)
    assert out == [A.MarkRevoking(tps(0)), A.InvokeOnPartitionsLost(tps(0))]


@pytest.mark.parametrize("protocol", [EAGER, COOPERATIVE], ids=["eager", "cooperative"])
@pytest.mark.parametrize("code", [C.NONE, C.REBALANCE_IN_PROGRESS], ids=str)
def test_an_answer_read_after_a_freeze_proves_nothing_and_the_session_lapses(
    protocol: RebalanceProtocol, code: int
) -> None:
    """The process was stopped (SIGSTOP, a paused VM) with a beat's answer unread.  The
    broker answered at once, evicted the member a session later and handed its partitions
    on.  Read on waking, before any timer, the answer proves the session only up to the
    beat's *sending* plus the session, long past: it counts as no answer, the gate stays
    shut, and the partitions are lost rather than handed out again (a REBALANCE_IN_PROGRESS
    read so must not start a cooperative rejoin that keeps delivering them).  Dated from
    its reading, it reopened the gate: the chaos scenario "SIGSTOP for twice the session"
    caught a zombie delivery on Apache Kafka."""
    m = make(protocol)
    to_stable(m, tps(0, 1))
    assert m.handle(E.TimerFired(), 1.0) == [A.SendHeartbeat(1, "m1")]
    woke = 1.0 + 2 * SESSION
    out = m.handle(heartbeat(code, 1), woke)
    assert m.timers.session_deadline() == SESSION  # still the sync's proof, at 0.0
    # the lapse, as if no answer had come: lost, not revoked; no commit; same identity
    assert out == [FIND, A.MarkRevoking(tps(0, 1)), A.InvokeOnPartitionsLost(tps(0, 1))]
    assert m.session_unproven and not m.commit_gate(tps(0)).allowed
    assert (m.state, m.generation_id, m.member_id) == (S.LOSING, 1, "m1")


def test_a_proof_that_comes_late_still_dates_from_the_sending() -> None:
    """A slow answer proves only what the broker can have seen: the beat left at 1.0."""
    m = make()
    to_stable(m, tps(0))
    m.handle(E.TimerFired(), 1.0)
    m.handle(heartbeat(C.NONE, 1), 1.0 + SESSION / 2)
    assert m.timers.session_deadline() == 1.0 + SESSION
    assert not m.session_unproven and m.commit_gate(tps(0)).allowed


def test_a_sync_answer_read_after_a_freeze_proves_the_session_only_from_its_sending() -> None:
    """The broker restarts the session when it receives SyncGroup, no earlier than its
    sending: an assignment read a whole session later opens no gate."""
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    assert m.handle(join_ok(1), 0.0) == [A.SendSyncGroup(1, "m1", "range", ())]
    woke = 2 * SESSION
    out = m.handle(sync_ok(1, tps(0)), woke)
    assert out[:2] == [A.SetAssignment(tps(0)), A.InvokeOnPartitionsAssigned(tps(0), 1)]
    assert m.timers.session_deadline() == SESSION
    assert m.session_unproven and not m.commit_gate(tps(0)).allowed
    # the listener runs to its end; then what it was given is lost, not kept
    out = m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), woke + 0.1)
    assert out == [A.MarkRevoking(tps(0)), A.InvokeOnPartitionsLost(tps(0))]
