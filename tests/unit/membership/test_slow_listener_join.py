"""Issue 24: a slow revoke listener while another member joins, replayed without a broker.

The request timeline measured on Apache Kafka 4.4 and Tansu (docs/reliability.md, "A
slow listener costs one rebalance"): A owns four partitions (eager, session 6 s,
heartbeat 1 s, max poll interval 120 s, so a rebalance timeout of 120 s); B joins;
A's next heartbeat is answered REBALANCE_IN_PROGRESS and its revoke listener runs
30 s; the broker holds B's JoinGroup all that time and answers both joins in the
millisecond A's JoinGroup arrives.

* B's side: the machine decides how long a JoinGroup is awaited.  Awaited for only
  ``request_timeout_ms`` (the connection's default), a join held behind a listener
  longer than that failed on the client, the connection was closed and the join
  re-sent while the group was forming.  Java waits max(request timeout, rebalance
  timeout + 5 s); so must the action.  (Fails on the machine before this change:
  ``SendJoinGroup`` carried no timeout.)
* A's side: the whole timeline costs one rebalance - one revoke, one join, one
  assignment - and a heartbeat answer of the old generation read after the new one
  formed (the beat left during the revoke) does not start another.
"""

from __future__ import annotations

import pytest

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.machine import JOIN_GROUP_TIMEOUT_LAPSE, Membership, MemberState

from .driver import (
    EAGER,
    HEARTBEAT,
    SESSION,
    heartbeat,
    join_error,
    join_ok,
    sync_ok,
    to_stable,
    tps,
)

REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
LISTENER = 30.0  # A's on_partitions_revoked, every time it is called
MAX_POLL = 120.0  # max_poll_interval_ms=120000: the rebalance timeout sent with each join
REQUEST = 40.0  # request_timeout_ms default


def member(*, request_timeout: float | None = REQUEST, rebalance: float = MAX_POLL) -> Membership:
    return Membership(
        protocol=EAGER,
        session_timeout=SESSION,
        heartbeat_interval=HEARTBEAT,
        max_poll_interval=MAX_POLL,
        rebalance_timeout=rebalance,
        retry_backoff=0.1,
        request_timeout=request_timeout,
    )


def joins(out: list[A.Action]) -> list[A.SendJoinGroup]:
    return [a for a in out if isinstance(a, A.SendJoinGroup)]


def test_the_joiner_awaits_its_join_as_long_as_the_broker_may_hold_it() -> None:
    """B's two JoinGroups (KIP-394: the first is answered MEMBER_ID_REQUIRED at once,
    the second is held until A rejoins) are awaited past the rebalance timeout."""
    b = member()
    b.handle(E.SubscriptionChanged(True, "subscribed"), 0.0)
    (first,) = joins(b.handle(E.CoordinatorFound(1), 0.0))
    assert first.timeout == MAX_POLL + JOIN_GROUP_TIMEOUT_LAPSE
    out = b.handle(join_error(MEMBER_ID_REQUIRED, "B-1"), 0.002)
    (held,) = joins(out)
    assert held.member_id == "B-1"
    # The hold in the timeline: A's next heartbeat (<= 1 s), then its 30 s listener.
    assert held.timeout is not None and held.timeout > HEARTBEAT + LISTENER
    assert held.timeout > REQUEST  # the connection's default would have given up first
    assert held.timeout >= MAX_POLL + JOIN_GROUP_TIMEOUT_LAPSE


@pytest.mark.parametrize(
    ("request_timeout", "rebalance", "expected"),
    [
        (40.0, 120.0, 125.0),  # the member: the rebalance timeout decides
        (300.0, 20.0, 300.0),  # a longer request timeout is kept (Java: the max)
        (None, 20.0, 25.0),  # no request timeout given: the rebalance timeout + lapse
    ],
)
def test_join_group_timeout_is_the_larger_of_request_and_rebalance_timeouts(
    request_timeout: float | None, rebalance: float, expected: float
) -> None:
    m = member(request_timeout=request_timeout, rebalance=rebalance)
    assert m.join_group_timeout == expected
    m.handle(E.SubscriptionChanged(True, "subscribed"), 0.0)
    (join,) = joins(m.handle(E.CoordinatorFound(1), 0.0))
    assert join.timeout == expected


def test_a_bad_request_timeout_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="request_timeout"):
        member(request_timeout=0.0)


def test_the_slow_member_pays_one_rebalance_for_one_join() -> None:
    """A's side of the timeline: one revoke, one JoinGroup, one assignment; the answer
    to a beat sent during the revoke, read after generation 2 formed, starts nothing."""
    a = member()
    to_stable(a, tps(0, 1, 2, 3), generation=1, member="A")
    now = 1.0
    out = a.handle(E.TimerFired(), now)
    assert out == [A.SendHeartbeat(1, "A")]
    out = a.handle(heartbeat(REBALANCE_IN_PROGRESS, 1), now + 0.001)  # B has joined
    assert [type(x) for x in out] == [A.MarkRevoking, A.InvokeOnPartitionsRevoked]
    assert a.state is MemberState.REVOKING
    revokes = 1
    # 30 s of listener: the heartbeats go on and are answered REBALANCE_IN_PROGRESS.
    t = now
    while t < now + LISTENER - HEARTBEAT:
        t += HEARTBEAT
        out = a.handle(E.TimerFired(), t)
        assert out == [A.SendHeartbeat(1, "A")]
        out = a.handle(heartbeat(REBALANCE_IN_PROGRESS, 1), t + 0.001)
        assert out == []
    t += HEARTBEAT
    assert a.handle(E.TimerFired(), t) == [A.SendHeartbeat(1, "A")]  # its answer comes late
    t = now + LISTENER
    (join,) = joins(a.handle(E.ListenerCompleted(E.Listener.REVOKED), t))
    assert join.member_id == "A" and join.generation_id == 1 and join.owned_partitions == tps()
    # The broker answers both joins in the same millisecond: generation 2, A leads.
    out = a.handle(join_ok(2, "A", leader="A", members=("A", "B")), t + 0.002)
    assert [type(x) for x in out] == [A.ComputeAssignment]
    out = a.handle(E.AssignmentComputed((("A", b""), ("B", b""))), t + 0.003)
    assert [type(x) for x in out] == [A.SendSyncGroup]
    out = a.handle(sync_ok(2, tps(0, 1)), t + 0.004)
    assert out == [A.SetAssignment(tps(0, 1)), A.InvokeOnPartitionsAssigned(tps(0, 1), 2)]
    # The beat sent under generation 1 is answered now: stale, nothing follows.
    assert a.handle(heartbeat(REBALANCE_IN_PROGRESS, 1), t + 0.005) == []
    assert a.handle(E.ListenerCompleted(E.Listener.ASSIGNED), t + 0.006) == []
    assert a.state is MemberState.STABLE and a.generation_id == 2
    # Generation 2 heartbeats: no further revoke or join.
    for k in range(1, 16):
        beat_at = t + k * HEARTBEAT + 0.01
        out = a.handle(E.TimerFired(), beat_at)
        assert out == [A.SendHeartbeat(2, "A")]
        assert a.handle(heartbeat(0, 2), beat_at + 0.001) == []
    assert revokes == 1 and a.rejoin_reason is None


def _joined_follower(sync_sent: float) -> Membership:
    """B: subscribed, JoinGroup answered (generation 2, A leads), SyncGroup sent."""
    b = member()
    b.handle(E.SubscriptionChanged(True, "subscribed"), 0.0)
    b.handle(E.CoordinatorFound(1), 0.0)
    out = b.handle(join_ok(2, "B", leader="A", members=()), sync_sent)
    assert out == [A.SendSyncGroup(2, "B", "range", ())]
    assert b.state is MemberState.COMPLETING_REBALANCE
    return b


def _hold_sync(b: Membership, start: float, until: float, *, running: bool) -> None:
    """The SyncGroup is held until ``until``; ``running``: the loop steps when asked."""
    t = start
    while running:
        due = b.next_deadline()
        assert due is not None, "the SyncGroup wait asks to be woken"
        if due >= until:
            return
        t = due
        assert b.handle(E.TimerFired(), t) == []  # nothing to send: a beat would queue


def test_a_held_sync_group_does_not_cost_the_follower_its_new_partitions() -> None:
    """The Tansu timeline: B's SyncGroup is held until the leader A syncs - here 1.5
    sessions.  The loop runs meanwhile, so the answer is read as it comes and proves
    the session from then (less a tick), as the broker restarts the session when it
    answers.  (On the machine before the change the answer proved the session only
    from the SyncGroup's sending: a heartbeat later B ran on_partitions_lost for what
    it had just been given and rejoined.)"""
    b = _joined_follower(sync_sent=10.0)
    answered = 10.0 + 1.5 * SESSION
    _hold_sync(b, 10.0, answered, running=True)
    out = b.handle(sync_ok(2, tps(2, 3)), answered)
    assert out == [A.SetAssignment(tps(2, 3)), A.InvokeOnPartitionsAssigned(tps(2, 3), 2)]
    gate = b.membership_valid_until()
    assert gate is not None and gate > answered + SESSION / 2
    assert b.handle(E.ListenerCompleted(E.Listener.ASSIGNED), answered + 0.01) == []
    # The next heartbeats: no lapse, no lost, no rejoin.
    for k in range(1, 2 * int(SESSION)):
        t = answered + k * HEARTBEAT + 0.01
        out = b.handle(E.TimerFired(), t)
        assert out == [A.SendHeartbeat(2, "B")], out
        assert b.handle(heartbeat(0, 2), t + 0.001) == []
    assert b.state is MemberState.STABLE and b.owned == tps(2, 3)
    assert b.rejoin_reason is None


def test_a_sync_group_answer_read_after_the_loop_stood_still_proves_only_from_its_sending() -> None:
    """Safety kept: the process stood still (SIGSTOP) while the SyncGroup was held; the
    answer, read on waking, may have waited for a session while the broker removed B.
    It proves the session only from the sending: the gate is shut and the new
    partitions are given up at once rather than handed out."""
    b = _joined_follower(sync_sent=10.0)
    answered = 10.0 + 1.5 * SESSION
    _hold_sync(b, 10.0, answered, running=False)
    out = b.handle(sync_ok(2, tps(2, 3)), answered)
    gate = b.membership_valid_until()
    assert gate is not None and gate <= answered  # the delivery gate is shut
    assert A.InvokeOnPartitionsAssigned(tps(2, 3), 2) in out
    out = b.handle(E.ListenerCompleted(E.Listener.ASSIGNED), answered + 0.01)
    out += b.handle(E.TimerFired(), answered + HEARTBEAT)
    assert A.InvokeOnPartitionsLost(tps(2, 3)) in out
