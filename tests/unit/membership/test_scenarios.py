"""Scripted protocol runs (h11 style): whole state and exact actions after each step."""

from __future__ import annotations

import pytest

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.machine import MembershipProtocolError, MemberState
from aiogroup._protocol.results import HeartbeatResult, OffsetCommitResult

from .driver import (
    AUTO_COMMIT,
    BACKOFF,
    COOPERATIVE,
    EAGER,
    HEARTBEAT,
    MAX_POLL,
    REBALANCE,
    SESSION,
    heartbeat,
    join_error,
    join_ok,
    leave_ok,
    make,
    sync_error,
    sync_ok,
    to_stable,
    tp,
    tps,
)

S = MemberState
SESSION_REASON = (
    "session timed out without a heartbeat answer: finding the coordinator again "
    "(member id and generation kept)"
)


def test_first_join_as_leader_computes_assignment_then_syncs() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True, "subscribed"), 0.0)
    m.handle(E.CoordinatorFound(3), 0.0)
    assert m.coordinator_id == 3
    out = m.handle(join_ok(5, "m1", leader="m1", members=["m1", "m2"]), 1.0)
    assert m.state is S.COMPLETING_REBALANCE
    assert (m.generation_id, m.member_id, m.leader_id) == (5, "m1", "m1")
    assert len(out) == 1 and isinstance(out[0], A.ComputeAssignment)
    assert [mem.member_id for mem in out[0].members] == ["m1", "m2"]
    assert m.commit_gate([]).allowed is False  # join/sync in flight
    out = m.handle(E.AssignmentComputed((("m1", b"a"), ("m2", b"b"))), 1.0)
    assert out == [A.SendSyncGroup(5, "m1", "range", (("m1", b"a"), ("m2", b"b")))]
    out = m.handle(sync_ok(5, tps(0, 1)), 1.0)
    assert out == [A.SetAssignment(tps(0, 1)), A.InvokeOnPartitionsAssigned(tps(0, 1), 5)]
    assert m.state is S.ASSIGNING and m.owned == tps(0, 1)
    assert m.commit_gate(tps(0)).allowed  # commit from on_partitions_assigned is fine
    assert m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 1.5) == []
    assert m.state is S.STABLE


def test_first_eager_join_does_not_call_revoked() -> None:
    m = make()
    to_stable(m, tps(0))  # to_stable asserts no InvokeOnPartitionsRevoked on the way


def test_heartbeats_follow_the_interval_and_keep_the_session() -> None:
    m = make()
    to_stable(m, tps(0), now=10.0)
    assert m.next_deadline() == 10.0 + HEARTBEAT
    assert m.handle(E.TimerFired(), 10.5) == []  # spurious wake-up
    assert m.handle(E.TimerFired(), 11.0) == [A.SendHeartbeat(1, "m1")]
    assert m.handle(E.TimerFired(), 12.5) == []  # one heartbeat in flight at a time
    # the answer came late: the next beat is already due (interval counts from the send)
    assert m.handle(heartbeat(0, 1), 12.6) == [A.SendHeartbeat(1, "m1")]
    assert m.handle(heartbeat(0, 1), 12.7) == []
    assert m.next_deadline() == 13.6
    assert m.timers.session_deadline() == 12.6 + SESSION  # proven from the beat's sending


def test_eager_rebalance_revokes_everything_before_joining() -> None:
    m = make(auto_commit=True)
    to_stable(m, tps(0, 1))
    m.handle(E.TimerFired(), 1.0)
    out = m.handle(heartbeat(27, 1), 1.1)  # REBALANCE_IN_PROGRESS
    assert out == [
        A.MarkRevoking(tps(0, 1)),
        A.InvokeOnPartitionsRevoked(tps(0, 1), commit_first=True),
    ]
    assert m.state is S.REVOKING
    assert m.commit_gate(tps(0, 1)).allowed  # Java allows commitSync in onPartitionsRevoked
    # heartbeats keep flowing while the listener runs
    assert m.handle(E.TimerFired(), 2.1) == [A.SendHeartbeat(1, "m1")]
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), 2.2)
    assert out == [
        A.SetAssignment(None),
        A.SendJoinGroup("Heartbeat: REBALANCE_IN_PROGRESS", "m1", 1, frozenset()),
    ]
    assert m.state is S.PREPARING_REBALANCE and m.owned == frozenset()
    assert m.handle(heartbeat(0, 1), 2.3) == []  # late answer, no effect
    m.handle(join_ok(2), 3.0)
    out = m.handle(sync_ok(2, tps(1)), 3.0)
    assert out == [A.SetAssignment(tps(1)), A.InvokeOnPartitionsAssigned(tps(1), 2)]


def test_eager_rebalance_calls_revoked_even_with_nothing_owned() -> None:
    m = make()
    to_stable(m, frozenset())
    out = m.handle(E.MetadataChanged("partition count of t changed"), 0.5)
    assert out == [A.InvokeOnPartitionsRevoked(frozenset(), commit_first=False)]
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), 0.6)
    assert out[-1] == A.SendJoinGroup("partition count of t changed", "m1", 1, frozenset())


def test_cooperative_rebalance_revokes_only_leaving_partitions_then_rejoins() -> None:
    m = make(COOPERATIVE, auto_commit=True)
    to_stable(m, tps(0, 1, 2))
    out = m.handle(heartbeat(27, 1), 0.5)  # heartbeat not in flight: stale, ignored
    assert out == []
    m.handle(E.TimerFired(), 1.0)
    out = m.handle(heartbeat(27, 1), 1.0)
    # no revocation before joining; owned partitions go into the metadata
    assert out == [A.SendJoinGroup("Heartbeat: REBALANCE_IN_PROGRESS", "m1", 1, tps(0, 1, 2))]
    m.handle(join_ok(2), 2.0)
    out = m.handle(sync_ok(2, tps(1, 2, 3)), 2.0)
    assert out == [A.MarkRevoking(tps(0)), A.InvokeOnPartitionsRevoked(tps(0), commit_first=True)]
    assert m.state is S.REVOKING
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), 2.5)
    assert out == [A.SetAssignment(tps(1, 2, 3)), A.InvokeOnPartitionsAssigned(tps(3), 2)]
    out = m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 2.6)
    assert len(out) == 1 and isinstance(out[0], A.SendJoinGroup)
    assert out[0].reason.startswith("cooperative rebalance: released t-0")
    assert out[0].owned_partitions == tps(1, 2, 3)
    m.handle(join_ok(3), 3.0)
    out = m.handle(sync_ok(3, tps(1, 2, 3)), 3.0)
    # nothing added: assigned still runs exactly once, with an empty set
    assert out == [A.SetAssignment(tps(1, 2, 3)), A.InvokeOnPartitionsAssigned(frozenset(), 3)]
    assert m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 3.0) == []
    assert m.state is S.STABLE


def test_session_lapse_loses_partitions_but_keeps_the_identity_for_the_rejoin() -> None:
    """Java's heartbeat thread: a session without an answer marks the coordinator
    unknown, member id and generation kept.  aiogroup also tells the application its
    partitions are lost (the broker may hand them on from now); see SESSION_ELAPSED."""
    m = make()
    to_stable(m, tps(0))
    m.handle(E.TimerFired(), 1.0)  # heartbeat sent, never answered
    assert m.next_deadline() == SESSION
    out = m.handle(E.TimerFired(), SESSION)
    assert out == [
        A.FindCoordinator(SESSION_REASON),
        A.MarkRevoking(tps(0)),
        A.InvokeOnPartitionsLost(tps(0)),
    ]
    assert (m.state, m.generation_id, m.member_id) == (S.LOSING, 1, "m1")
    assert not m.commit_gate(tps(0)).allowed
    # the old heartbeat's answer arrives late: it was given up, and changes nothing
    assert m.handle(heartbeat(0, 1), SESSION + 0.05) == []
    assert m.handle(E.ListenerCompleted(E.Listener.LOST), SESSION + 1) == [A.SetAssignment(None)]
    out = m.handle(E.CoordinatorFound(2), SESSION + 2)
    why = (
        f"no heartbeat answer for session_timeout_ms ({SESSION:g}s); "
        "rejoining under the same member id"
    )
    assert out == [A.SendJoinGroup(why, "m1", 1, frozenset())]


@pytest.mark.parametrize("code", [22, 25])  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID
def test_heartbeat_generation_errors_mean_lost_not_revoked(code: int) -> None:
    m = make(COOPERATIVE)
    to_stable(m, tps(0, 1))
    m.handle(E.TimerFired(), 1.0)
    out = m.handle(heartbeat(code, 1), 1.1)
    assert out == [A.MarkRevoking(tps(0, 1)), A.InvokeOnPartitionsLost(tps(0, 1))]
    out = m.handle(E.ListenerCompleted(E.Listener.LOST), 1.2)
    assert out[0] == A.SetAssignment(None)
    assert isinstance(out[1], A.SendJoinGroup) and out[1].member_id == ""
    assert out[1].owned_partitions == frozenset()


def test_fenced_instance_is_lost_then_fatal() -> None:
    m = make(static=True)
    to_stable(m, tps(0))
    m.handle(E.TimerFired(), 1.0)
    out = m.handle(heartbeat(82, 1), 1.1)
    assert out == [
        A.RaiseToApplication("Heartbeat: FENCED_INSTANCE_ID", error_code=82, fatal=True),
        A.MarkRevoking(tps(0)),
        A.InvokeOnPartitionsLost(tps(0)),
    ]
    assert m.handle(E.ListenerCompleted(E.Listener.LOST), 1.2) == [A.SetAssignment(None)]
    assert m.state is S.FATAL
    assert m.next_deadline() is None
    assert m.commit_gate([]).stopped


def test_loss_during_assigned_listener_waits_for_it() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    m.handle(join_ok(1), 0.0)
    m.handle(sync_ok(1, tps(0)), 0.0)
    assert m.state is S.ASSIGNING
    m.handle(E.TimerFired(), 1.0)
    out = m.handle(heartbeat(25, 1), 1.0)
    assert out == []  # listeners never overlap
    out = m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 2.0)
    assert out == [A.MarkRevoking(tps(0)), A.InvokeOnPartitionsLost(tps(0))]


def test_slow_revoke_listener_keeps_heartbeating_and_is_cancelled_after_rebalance_timeout() -> None:
    m = make()
    to_stable(m, tps(0))
    m.handle(E.SubscriptionChanged(True, "topics changed"), 0.0)
    assert m.state is S.REVOKING
    t = 0.0
    while t < REBALANCE - HEARTBEAT:
        t += HEARTBEAT
        assert m.handle(E.TimerFired(), t) == [A.SendHeartbeat(1, "m1")]
        m.handle(heartbeat(0, 1), t)
    out = m.handle(E.TimerFired(), REBALANCE)
    assert (
        A.CancelListener(
            E.Listener.REVOKED,
            f"on_partitions_revoked overran the rebalance timeout ({REBALANCE:g}s)",
        )
        in out
    )
    err = RuntimeError("cancelled")
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED, err), REBALANCE)
    assert out[0] == A.RaiseToApplication(f"on_partitions_revoked raised {err!r}", exception=err)
    assert isinstance(out[-1], A.SendJoinGroup)


def test_listener_error_is_reported_and_the_rebalance_completes() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    m.handle(join_ok(1), 0.0)
    m.handle(sync_ok(1, tps(0)), 0.0)
    err = ValueError("boom")
    out = m.handle(E.ListenerCompleted(E.Listener.ASSIGNED, err), 0.1)
    assert out == [A.RaiseToApplication(f"on_partitions_assigned raised {err!r}", exception=err)]
    assert m.state is S.STABLE and m.owned == tps(0)


def test_member_id_required_rejoins_at_once_with_the_given_id() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    out = m.handle(join_error(79, member="given-id"), 0.1)
    assert out == [
        A.SendJoinGroup(
            "JoinGroup: MEMBER_ID_REQUIRED, joining with the given id", "given-id", -1, frozenset()
        )
    ]


def test_coordinator_load_in_progress_backs_off_then_rejoins() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    out = m.handle(join_error(14), 1.0)
    assert out == [A.Backoff(BACKOFF, "JoinGroup: COORDINATOR_LOAD_IN_PROGRESS")]
    assert m.state is S.UNJOINED and m.next_deadline() == 1.0 + BACKOFF
    assert m.handle(E.TimerFired(), 1.05) == []
    out = m.handle(E.TimerFired(), 1.0 + BACKOFF)
    assert out == [A.SendJoinGroup("JoinGroup: COORDINATOR_LOAD_IN_PROGRESS", "", -1, frozenset())]


def test_not_coordinator_on_join_rediscovers_then_rejoins() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    out = m.handle(join_error(16), 1.0)
    assert out == [A.FindCoordinator("needed to join the group")]
    assert m.coordinator_id is None
    out = m.handle(E.CoordinatorFound(2), 1.1)
    assert out == [A.SendJoinGroup("JoinGroup: NOT_COORDINATOR", "", -1, frozenset())]


def test_coordinator_lost_while_stable_keeps_generation_and_session_clock() -> None:
    m = make()
    to_stable(m, tps(0))
    m.handle(E.TimerFired(), 1.0)
    out = m.handle(E.HeartbeatFailed("connection", 1), 1.1)
    assert out == [A.FindCoordinator("coordinator lost while in a generation")]
    assert m.state is S.STABLE and m.generation_id == 1
    assert m.handle(E.TimerFired(), 2.5) == []  # no coordinator: no heartbeat
    out = m.handle(E.CoordinatorFound(2), 2.6)
    assert out == [A.SendHeartbeat(1, "m1")]  # the retry backoff has passed
    out = m.handle(E.TimerFired(), SESSION)  # still no successful heartbeat
    assert out == [
        A.FindCoordinator(SESSION_REASON),
        A.MarkRevoking(tps(0)),
        A.InvokeOnPartitionsLost(tps(0)),
    ]
    assert (m.generation_id, m.member_id) == (1, "m1")


def test_group_authorization_failure_is_reported_and_retried() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    out = m.handle(join_error(30), 1.0)
    assert out == [
        A.RaiseToApplication("JoinGroup: GROUP_AUTHORIZATION_FAILED", error_code=30),
        A.Backoff(BACKOFF, "JoinGroup: GROUP_AUTHORIZATION_FAILED"),
    ]
    assert m.state is S.UNJOINED
    out = m.handle(E.TimerFired(), 2.0)
    assert isinstance(out[0], A.SendJoinGroup)


@pytest.mark.parametrize("code", [23, 24, 26, 81, 12345])
def test_fatal_join_errors_stop_the_member(code: int) -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    out = m.handle(join_error(code), 1.0)
    assert len(out) == 1 and isinstance(out[0], A.RaiseToApplication)
    assert out[0].fatal and out[0].error_code == code
    assert m.state is S.FATAL
    assert m.handle(E.TimerFired(), 5.0) == []


def test_undecodable_assignment_is_reported_and_the_member_rejoins() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    m.handle(join_ok(1), 0.0)
    err = ValueError("bad bytes")
    out = m.handle(
        E.SyncGroupResponseReceived(sync_ok(1, tps()).result, 1, None, decode_error=err), 0.1
    )
    why = f"undecodable assignment from the group leader: {err!r}"
    assert out == [A.RaiseToApplication(why, exception=err), A.Backoff(BACKOFF, why)]
    out = m.handle(E.TimerFired(), 1.0)
    assert isinstance(out[0], A.SendJoinGroup)  # prepared once per rebalance: no revoke


def test_assignor_failure_is_reported_and_the_member_rejoins() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    m.handle(join_ok(1, leader="m1"), 0.0)
    err = KeyError("x")
    out = m.handle(E.AssignmentComputed(error=err), 0.0)
    assert isinstance(out[0], A.RaiseToApplication) and out[0].exception is err
    assert m.state is S.UNJOINED


def test_sync_rebalance_in_progress_rejoins_at_once() -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    m.handle(join_ok(1), 0.0)
    out = m.handle(sync_error(27, 1), 0.1)
    # the rebalance was already prepared before the first JoinGroup: no second revoke
    assert out == [A.SendJoinGroup("SyncGroup: REBALANCE_IN_PROGRESS", "m1", 1, frozenset())]


def test_failed_sync_after_a_revoke_does_not_revoke_again() -> None:
    m = make()
    to_stable(m, tps(0))
    m.handle(E.MetadataChanged("more partitions"), 0.1)
    m.handle(E.ListenerCompleted(E.Listener.REVOKED), 0.2)
    m.handle(join_ok(2), 3.0)
    out = m.handle(sync_error(27, 2), 3.1)
    assert out == [A.SendJoinGroup("SyncGroup: REBALANCE_IN_PROGRESS", "m1", 2, frozenset())]
    m.handle(join_ok(3), 6.0)
    out = m.handle(sync_ok(3, tps(0)), 6.1)
    assert out == [A.SetAssignment(tps(0)), A.InvokeOnPartitionsAssigned(tps(0), 3)]
    # the session clock restarted with the join: no false expiry
    assert m.handle(E.TimerFired(), 7.1) == [A.SendHeartbeat(3, "m1")]


def test_close_commits_revokes_and_leaves() -> None:
    m = make(COOPERATIVE, auto_commit=True)
    to_stable(m, tps(0, 1))
    out = m.handle(E.CloseRequested(), 0.5)
    assert out == [
        A.MarkRevoking(tps(0, 1)),
        A.InvokeOnPartitionsRevoked(tps(0, 1), commit_first=True),
    ]
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), 0.6)
    assert out == [A.SetAssignment(None), A.SendLeaveGroup("m1", "the consumer is closing")]
    assert m.state is S.LEAVING
    assert m.handle(leave_ok(), 0.7) == []
    assert m.state is S.CLOSED and m.generation_id == -1
    assert m.next_deadline() is None


def test_close_of_a_static_member_sends_no_leave_group() -> None:
    m = make(static=True)
    to_stable(m, tps(0))
    m.handle(E.CloseRequested(), 1.0)
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), 1.1)
    assert out == [A.SetAssignment(None)]
    assert m.state is S.CLOSED


def test_close_while_joining_gives_the_join_up_and_closes_at_once() -> None:
    """Close does not wait for a JoinGroup the broker may hold for a whole rebalance
    timeout: the machine abandons it.  Without a member id there is nobody to leave."""
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    assert m.handle(E.CloseRequested(), 0.5) == [A.AbandonJoin(None)]
    assert m.state is S.CLOSED and m.finished
    # The answer, should it still come, is void.
    assert m.handle(join_ok(4, "m9"), 3.0) == []
    assert m.state is S.CLOSED


def test_close_while_rejoining_hands_the_leave_to_the_shell() -> None:
    """A dynamic member with an id leaves: the machine names the coordinator and the id,
    the shell sends LeaveGroup on a connection the held JoinGroup does not block."""
    m = make()
    to_stable(m, tps(0))
    m.handle(E.TimerFired(), 1.0)  # the heartbeat goes out
    m.handle(heartbeat(27, 1), 1.05)  # the group rebalances
    m.handle(E.ListenerCompleted(E.Listener.REVOKED), 1.1)  # eager: revoked first
    assert m.state is S.PREPARING_REBALANCE
    out = m.handle(E.CloseRequested(), 1.2)
    assert out[0] == A.AbandonJoin((1, "m1"))
    assert not [a for a in out if isinstance(a, A.SendLeaveGroup)]
    assert m.state is S.CLOSED


def test_unsubscribe_revokes_and_leaves_then_waits() -> None:
    m = make(auto_commit=True)
    to_stable(m, tps(0))
    out = m.handle(E.SubscriptionChanged(False, "unsubscribed"), 0.5)
    assert out == [A.MarkRevoking(tps(0)), A.InvokeOnPartitionsRevoked(tps(0), commit_first=True)]
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), 0.6)
    assert out == [A.SetAssignment(None), A.SendLeaveGroup("m1", "unsubscribed")]
    assert m.handle(leave_ok(), 0.7) == []
    assert m.state is S.UNJOINED and m.next_deadline() is None
    out = m.handle(E.SubscriptionChanged(True, "subscribed again"), 5.0)
    assert out == [A.SendJoinGroup("subscribed again", "", -1, frozenset())]


def test_max_poll_interval_leaves_and_rejoins_on_next_poll() -> None:
    m = make()
    to_stable(m, tps(0))
    t = 0.0
    while t + HEARTBEAT < MAX_POLL:
        t += HEARTBEAT
        m.handle(E.TimerFired(), t)
        m.handle(heartbeat(0, 1), t)
    assert m.next_deadline() == MAX_POLL
    out = m.handle(E.TimerFired(), MAX_POLL)
    assert out == [
        A.SendHeartbeat(1, "m1"),
        A.LogWarning(
            "the application has not polled (getone/getmany/getmany_arrow/async for) for "
            "30.0s, longer than max_poll_interval_ms (30s): leaving the group so its "
            "partitions go to live members; the next poll rejoins"
        ),
        A.MarkRevoking(tps(0)),
        A.InvokeOnPartitionsRevoked(tps(0), commit_first=False),
    ]
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), MAX_POLL + 0.1)
    reason = "max_poll_interval_ms passed without a poll; leaving until the next poll"
    assert out == [A.SetAssignment(None), A.SendLeaveGroup("m1", reason)]
    m.handle(leave_ok(), MAX_POLL + 0.2)
    assert m.state is S.UNJOINED
    assert m.handle(E.TimerFired(), MAX_POLL + 5) == []  # still no poll
    out = m.handle(E.ApplicationPolled(MAX_POLL + 6), MAX_POLL + 6)
    assert out == [
        A.LogWarning(
            "the application polled again 6.0s after this member left its group because "
            "max_poll_interval_ms (30s) passed without a poll: rejoining"
        ),
        A.SendJoinGroup(
            "the application polled again after max_poll_interval_ms", "", -1, frozenset()
        ),
    ]


def test_member_without_partitions_is_never_evicted_for_not_polling() -> None:
    m = make()
    to_stable(m, frozenset())
    t = 0.0
    while t < 3 * MAX_POLL:
        t += HEARTBEAT
        out = m.handle(E.TimerFired(), t)
        assert out == [A.SendHeartbeat(1, "m1")]
        m.handle(heartbeat(0, 1), t)
    assert m.state is S.STABLE


def test_polling_keeps_the_member_in_the_group() -> None:
    m = make()
    to_stable(m, tps(0))
    t = 0.0
    while t < 2 * MAX_POLL:
        t += HEARTBEAT
        m.handle(E.ApplicationPolled(t), t)
        m.handle(E.TimerFired(), t)
        m.handle(heartbeat(0, 1), t)
    assert m.state is S.STABLE


def test_auto_commit_fires_on_its_interval_while_stable() -> None:
    m = make(auto_commit=True)
    to_stable(m, tps(0))
    out = m.handle(E.TimerFired(), AUTO_COMMIT)
    assert A.AutoCommit("auto_commit_interval_ms elapsed") in out


def test_commit_gate_names_foreign_partitions() -> None:
    m = make()
    to_stable(m, tps(0))
    gate = m.commit_gate([tp(0), tp(7)])
    assert not gate.allowed and gate.refusal is not None and "t-7" in gate.refusal
    ok = m.commit_gate([tp(0)])
    assert ok.allowed and (ok.generation_id, ok.member_id) == (1, "m1")


def test_commit_answer_unknown_member_loses_membership() -> None:
    m = make()
    to_stable(m, tps(0))
    out = m.handle(E.OffsetCommitResponseReceived(OffsetCommitResult({("t", 0): 25}), 1), 0.5)
    assert out == [A.MarkRevoking(tps(0)), A.InvokeOnPartitionsLost(tps(0))]
    # a stale answer for an older generation is ignored
    m2 = make()
    to_stable(m2, tps(0))
    assert (
        m2.handle(E.OffsetCommitResponseReceived(OffsetCommitResult({("t", 0): 25}), 0), 0.5) == []
    )


def test_illegal_event_raises_and_goes_fatal() -> None:
    m = make()
    with pytest.raises(MembershipProtocolError, match="SyncGroupResponseReceived"):
        m.handle(sync_ok(1, tps()), 0.0)
    assert m.state is S.FATAL


def test_listener_kind_mismatch_is_illegal() -> None:
    m = make()
    to_stable(m, tps(0))
    m.handle(E.CloseRequested(), 0.0)
    with pytest.raises(MembershipProtocolError):
        m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 0.0)
    assert m.state is S.FATAL


def test_bad_event_values_raise_at_once() -> None:
    with pytest.raises(TypeError, match="listener kind"):
        E.ListenerCompleted("nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown api"):
        E.request_failed("Produce", "connection")
    with pytest.raises(ValueError, match="failure kind"):
        E.HeartbeatFailed("weird")
    with pytest.raises(TypeError, match="abstract"):
        E.RequestFailed("connection")
    with pytest.raises(ValueError, match="node_id"):
        E.CoordinatorFound(-1)
    with pytest.raises(ValueError, match="heartbeat_interval"):
        from aiogroup._membership.heartbeat import HeartbeatTimers

        from .driver import Membership as _M  # noqa: F401

        HeartbeatTimers(
            session_timeout=1, heartbeat_interval=1, max_poll_interval=1, retry_backoff=0
        )


def test_unused_heartbeat_result_import_guard() -> None:
    # HeartbeatResult with a throttle is still a success
    m = make()
    to_stable(m, tps(0))
    m.handle(E.TimerFired(), 1.0)
    assert m.handle(E.HeartbeatResponseReceived(HeartbeatResult(0, 50), 1), 1.0) == []
    assert m.timers.session_deadline() == 1.0 + SESSION


def test_session_clock_restarts_when_heartbeating_resumes() -> None:
    m = make(COOPERATIVE)
    to_stable(m, tps(0))
    m.handle(E.MetadataChanged("more partitions"), 0.5)  # cooperative: rejoin keeping p0
    assert m.state is S.PREPARING_REBALANCE
    # No heartbeats while joining; the routine still wakes at every deadline (the loop
    # watch's among them: a loop that stood still would lose p0, see test_loop_watch).
    while (due := m.next_deadline()) is not None and due < SESSION + 1:
        m.handle(E.TimerFired(), due)
    assert m.state is S.PREPARING_REBALANCE
    m.handle(join_error(14), SESSION + 1)
    out = m.handle(E.SubscriptionChanged(False, "unsubscribed"), SESSION + 1)
    # still generation 1: revoked (not lost), and heartbeats start over from now
    assert out == [A.MarkRevoking(tps(0)), A.InvokeOnPartitionsRevoked(tps(0), False)]
    assert m.generation_id == 1
    assert m.handle(E.TimerFired(), SESSION + 1 + HEARTBEAT) == [A.SendHeartbeat(1, "m1")]


def test_a_cooperative_member_handed_nothing_beats_early_for_the_second_round() -> None:
    """A cooperative joiner gets nothing in the first round (the owners revoke first, then
    rejoin at once); it beats a tenth of an interval after its sync to hear of the second
    round, instead of a whole interval later (machine.FOLLOW_UP_BEAT)."""
    m = make(COOPERATIVE)
    to_stable(m, frozenset(), now=10.0)
    assert m.next_deadline() == pytest.approx(10.0 + 0.1 * HEARTBEAT)
    assert m.handle(E.TimerFired(), 10.1) == [A.SendHeartbeat(1, "m1")]
    out = m.handle(heartbeat(27, 1), 10.11)  # the owners rejoined: second round
    assert out == [A.SendJoinGroup("Heartbeat: REBALANCE_IN_PROGRESS", "m1", 1, frozenset())]


def test_the_early_beat_happens_once_then_the_interval_rules() -> None:
    m = make(COOPERATIVE)
    to_stable(m, frozenset(), now=10.0)
    m.handle(E.TimerFired(), 10.1)
    assert m.handle(heartbeat(0, 1), 10.12) == []  # no second round this time
    assert m.next_deadline() == pytest.approx(10.1 + HEARTBEAT)


@pytest.mark.parametrize(
    ("protocol", "partitions"),
    [(COOPERATIVE, tps(0)), (EAGER, frozenset()), (EAGER, tps(0))],
)
def test_no_early_beat_for_a_member_handed_partitions_or_an_eager_one(
    protocol: object, partitions: frozenset[object]
) -> None:
    m = make(protocol)  # type: ignore[arg-type]
    to_stable(m, partitions, now=10.0)  # type: ignore[arg-type]
    assert m.next_deadline() == 10.0 + HEARTBEAT
