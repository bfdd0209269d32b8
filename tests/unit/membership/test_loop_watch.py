"""The loop watch: a cooperative member's delivery gate during its join phase.

A cooperative member keeps consuming what it owns while its JoinGroup and SyncGroup
are in flight (KIP-429), and no heartbeat runs then to prove its session.  The broker
keeps it while a running loop answers promptly; a process that stood still while an
answer waited may have been removed, its partitions given on.  The machine watches its
own loop: after a stall the gate is shut, the stale answer is not taken and what was
owned is lost, then the member joins again.  See ``machine.LOOP_WATCH_FRACTION``.
"""

from __future__ import annotations

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.machine import LOOP_WATCH_FRACTION, Membership, MemberState

from .driver import (
    COOPERATIVE,
    EAGER,
    HEARTBEAT,
    SESSION,
    heartbeat,
    join_ok,
    make,
    sync_error,
    sync_ok,
    to_stable,
    tps,
)

S = MemberState
C = ErrorCode
LIMIT = SESSION * LOOP_WATCH_FRACTION
OWNED = tps(0, 1)


def rejoining(protocol=COOPERATIVE) -> Membership:  # type: ignore[no-untyped-def]
    """STABLE owning OWNED; a heartbeat at 1.0 answered REBALANCE_IN_PROGRESS at 1.1."""
    m = make(protocol)
    to_stable(m, OWNED)
    assert m.handle(E.TimerFired(), 1.0) == [A.SendHeartbeat(1, "m1")]
    out = m.handle(heartbeat(C.REBALANCE_IN_PROGRESS, 1), 1.1)
    assert [type(a) for a in out][-1] is A.SendJoinGroup, out
    assert m.state is S.PREPARING_REBALANCE
    return m


def test_the_join_phase_with_partitions_owned_is_gated_by_the_loop_watch() -> None:
    m = rejoining()
    assert m.loop_watched
    assert m.membership_valid_until() == 1.1 + LIMIT
    # The routine is woken often enough for a running loop to keep the gate open.
    deadline = m.next_deadline()
    assert deadline is not None and deadline <= 1.1 + min(HEARTBEAT, LIMIT / 3)


def test_every_step_of_a_running_loop_moves_the_gate() -> None:
    m = rejoining()
    for now in (2.0, 3.0, 4.0, 5.0):
        m.handle(E.TimerFired(), now)
        assert m.membership_valid_until() == now + LIMIT
    assert m.state is S.PREPARING_REBALANCE


def test_a_pause_shorter_than_the_limit_keeps_the_gate_open() -> None:
    m = rejoining()
    now = 1.1 + LIMIT * 0.9
    m.handle(join_ok(2), now)
    assert m.state is S.COMPLETING_REBALANCE
    until = m.membership_valid_until()
    assert until is not None and until > now


def lost(out: list[A.Action]) -> list[A.Action]:
    return [a for a in out if isinstance(a, A.InvokeOnPartitionsLost)]


def test_a_stall_with_the_join_answer_waiting_loses_what_was_owned() -> None:
    m = rejoining()
    woke = 1.1 + 2 * SESSION  # frozen for twice the session with the answer waiting
    out = m.handle(join_ok(2), woke)
    # The stale answer is not taken (no SyncGroup for it): the partitions are lost
    # first, then the member joins again.
    assert not any(isinstance(a, A.SendSyncGroup) for a in out), out
    assert [a.partitions for a in lost(out)] == [OWNED], out
    assert m.state is S.LOSING


def test_the_gate_is_shut_from_the_stall_until_the_join_phase_ends() -> None:
    m = rejoining()
    late = 1.1 + LIMIT + 1.0
    m.handle(E.TimerFired(), late)  # the watch's own tick came late by more than the limit
    assert m.state is S.PREPARING_REBALANCE
    for now in (late, late + 0.5, late + 2.0):
        if now > late:
            m.handle(E.TimerFired(), now)  # later steps of the same join phase
        until = m.membership_valid_until()
        assert until is not None and until <= now
    out = m.handle(join_ok(2), late + 2.5)
    assert [a.partitions for a in lost(out)] == [OWNED], out


def test_a_stall_with_the_sync_answer_waiting_loses_what_was_owned() -> None:
    m = rejoining()
    out = m.handle(join_ok(2), 1.2)
    assert out == [A.SendSyncGroup(2, "m1", "range", ())]
    woke = 1.2 + 2 * SESSION
    out = m.handle(sync_ok(2, OWNED), woke)  # a success, but read after the stall
    assert [a.partitions for a in lost(out)] == [OWNED], out
    assert not any(isinstance(a, A.SetAssignment) and a.partitions == OWNED for a in out), out


def test_a_sync_refused_after_the_stall_loses_what_was_owned_once() -> None:
    m = rejoining()
    m.handle(join_ok(2), 1.2)
    out = m.handle(sync_error(C.UNKNOWN_MEMBER_ID, 2), 1.2 + 2 * SESSION)
    assert [a.partitions for a in lost(out)] == [OWNED], out


def test_after_the_lost_listener_the_member_joins_again_unwatched() -> None:
    m = rejoining()
    m.handle(join_ok(2), 1.1 + 2 * SESSION)
    assert m.state is S.LOSING
    out = m.handle(E.ListenerCompleted(E.Listener.LOST), 1.1 + 2 * SESSION + 0.1)
    assert any(isinstance(a, A.SendJoinGroup) and not a.owned_partitions for a in out), out
    assert not m.owned and not m.loop_watched and m.membership_valid_until() is None


def test_an_eager_member_owns_nothing_in_its_join_phase_so_nothing_is_watched() -> None:
    m = make(EAGER)
    to_stable(m, OWNED)
    m.handle(E.TimerFired(), 1.0)
    m.handle(heartbeat(C.REBALANCE_IN_PROGRESS, 1), 1.1)
    # Eager revokes first (REVOKING, heartbeating); the join phase then owns nothing.
    m.handle(E.ListenerCompleted(E.Listener.REVOKED), 1.2)
    assert m.state is S.PREPARING_REBALANCE and not m.owned
    assert not m.loop_watched and m.membership_valid_until() is None
    out = m.handle(join_ok(2), 1.2 + 2 * SESSION)
    assert any(isinstance(a, A.SendSyncGroup) for a in out), out  # nothing to lose
    assert m.membership_valid_until() is None


def test_a_first_join_owns_nothing_so_nothing_is_watched() -> None:
    m = make(COOPERATIVE)
    m.handle(E.SubscriptionChanged(True, "subscribed"), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    assert m.state is S.PREPARING_REBALANCE
    assert not m.loop_watched and m.membership_valid_until() is None
