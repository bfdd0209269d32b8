"""The poll rule of both machines, on virtual time (explicit ``now``; no loop, no broker).

A getone/getmany/``async for`` that is *waiting* for records is the application
polling (Java's poll(), aiokafka's fetch waiters): only an application that stops
asking for longer than ``max_poll_interval`` is taken out of its group, with a
WARNING, and the next poll - one that starts waiting included - brings it back,
with a WARNING that says what happened.
"""

from __future__ import annotations

from aiogroup._membership import actions as A
from aiogroup._membership import consumer_group as cg
from aiogroup._membership import events as E
from aiogroup._membership.machine import Membership, MemberState

from .driver import HEARTBEAT, MAX_POLL, heartbeat, leave_ok, make, to_stable, tps
from .test_consumer_group_machine import A as TOPIC_A
from .test_consumer_group_machine import Driver, ok

S = MemberState
CS = cg.ConsumerMemberState


def _beat_until(m: Membership, start: float, end: float) -> list[A.Action]:
    """Heartbeat on the interval from ``start`` to ``end``; every action returned."""
    seen: list[A.Action] = []
    t = start
    while t + HEARTBEAT <= end:
        t += HEARTBEAT
        seen += m.handle(E.TimerFired(), t)
        seen += m.handle(heartbeat(0, 1), t)
    return seen


def _warnings(actions: list[A.Action]) -> list[str]:
    return [a.message for a in actions if isinstance(a, A.LogWarning)]


# -- classic ----------------------------------------------------------------------------


def test_classic_a_waiting_poll_keeps_the_member_in_for_three_intervals() -> None:
    m = make()
    to_stable(m, tps(0))
    m.handle(E.ApplicationPolled(0.5, waiting=True), 0.5)
    assert m.next_deadline() == HEARTBEAT  # the heartbeat; no poll deadline while waiting
    seen = _beat_until(m, 0.5, 3 * MAX_POLL)
    assert m.state is S.STABLE and m.owned == tps(0) and m.generation_id == 1
    assert [a for a in seen if not isinstance(a, A.SendHeartbeat)] == []
    assert not m.awaiting_poll


def test_classic_the_idle_time_starts_when_the_waiting_poll_returns() -> None:
    m = make()
    to_stable(m, tps(0))
    m.handle(E.ApplicationPolled(0.5, waiting=True), 0.5)
    _beat_until(m, 0.5, 2 * MAX_POLL)
    returned = 2 * MAX_POLL
    m.handle(E.ApplicationPolled(returned, waiting=False), returned)
    out = _beat_until(m, returned, returned + MAX_POLL - HEARTBEAT)
    assert m.state is S.STABLE and _warnings(out) == []
    out = m.handle(E.TimerFired(), returned + MAX_POLL)
    assert m.state is S.REVOKING and m.awaiting_poll
    assert _warnings(out) == [
        "the application has not polled (getone/getmany/getmany_arrow/async for) for "
        "30.0s, longer than max_poll_interval_ms (30s): leaving the group so its "
        "partitions go to live members; the next poll rejoins"
    ]
    assert A.InvokeOnPartitionsRevoked(tps(0), commit_first=False) in out


def _taken_out(m: Membership) -> float:
    """Stable with partition 0, no poll at all: revoked, left; returns the loop time."""
    to_stable(m, tps(0))
    _beat_until(m, 0.0, MAX_POLL - HEARTBEAT)
    m.handle(E.TimerFired(), MAX_POLL)
    m.handle(E.ListenerCompleted(E.Listener.REVOKED), MAX_POLL + 0.1)
    m.handle(leave_ok(), MAX_POLL + 0.2)
    assert m.state is S.UNJOINED and m.awaiting_poll and not m.in_generation
    return MAX_POLL + 0.2


def test_classic_a_poll_that_starts_waiting_rejoins_with_a_warning() -> None:
    m = make()
    t = _taken_out(m)
    out = m.handle(E.ApplicationPolled(t + 4.8, waiting=True), t + 4.8)
    assert _warnings(out) == [
        "the application polled again 5.0s after this member left its group because "
        "max_poll_interval_ms (30s) passed without a poll: rejoining"
    ]
    assert out[-1] == A.SendJoinGroup(
        "the application polled again after max_poll_interval_ms", "", -1, frozenset()
    )
    assert m.state is S.PREPARING_REBALANCE and not m.awaiting_poll


def test_classic_a_poll_waiting_at_the_very_loop_time_of_the_leave_rejoins() -> None:
    """Its start time equals the expiry's (a coarse clock): waiting is what counts."""
    m = make()
    t = _taken_out(m)
    out = m.handle(E.ApplicationPolled(MAX_POLL, waiting=True), t)
    assert isinstance(out[-1], A.SendJoinGroup) and not m.awaiting_poll


def test_classic_a_poll_during_the_poll_leave_revoke_rejoins_after_it() -> None:
    m = make()
    to_stable(m, tps(0))
    _beat_until(m, 0.0, MAX_POLL - HEARTBEAT)
    m.handle(E.TimerFired(), MAX_POLL)
    assert m.state is S.REVOKING
    out = m.handle(E.ApplicationPolled(MAX_POLL + 0.05, waiting=True), MAX_POLL + 0.05)
    assert len(_warnings(out)) == 1 and not m.awaiting_poll
    # No LeaveGroup went out: still in its generation, the member rejoins with its id;
    # the revoke it ran for the leave was this rebalance's (no second, empty one).
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), MAX_POLL + 0.1)
    assert out == [
        A.SetAssignment(None),
        A.SendJoinGroup("the application polled again after max_poll_interval_ms", "m1", 1, tps()),
    ]
    assert m.state is S.PREPARING_REBALANCE


def test_classic_no_poll_at_all_stays_out_and_says_so_once() -> None:
    m = make()
    t = _taken_out(m)
    seen: list[A.Action] = []
    for step in range(1, 40):
        seen += m.handle(E.TimerFired(), t + step)
    assert m.state is S.UNJOINED and seen == []


# -- consumer protocol (KIP-848) ---------------------------------------------------------


def _cg_stable(max_poll: float = 10.0) -> Driver:
    d = Driver(max_poll_interval=max_poll)
    d.stable_with({TOPIC_A: (0,)})
    return d


def _cg_beat_until(d: Driver, end: float, epoch: int = 1) -> list[A.Action]:
    seen: list[A.Action] = []
    while True:
        due = d.m.next_deadline()
        assert due is not None
        if due > end:
            return seen
        d.now = due
        out = d.send(E.TimerFired())
        seen += out
        if any(isinstance(a, A.SendConsumerGroupHeartbeat) for a in out):
            seen += d.send(ok(epoch))


def test_cg_a_waiting_poll_keeps_the_member_in_for_three_intervals() -> None:
    d = _cg_stable()
    d.send(E.ApplicationPolled(d.now, waiting=True))
    seen = _cg_beat_until(d, 30.0)
    assert d.state is CS.STABLE and d.m.member_epoch == 1
    assert [a for a in seen if not isinstance(a, A.SendConsumerGroupHeartbeat)] == []
    assert all(a.member_epoch == 1 for a in seen if isinstance(a, A.SendConsumerGroupHeartbeat))


def test_cg_the_idle_time_starts_when_the_waiting_poll_returns() -> None:
    d = _cg_stable()
    d.send(E.ApplicationPolled(d.now, waiting=True))
    _cg_beat_until(d, 25.0)
    d.now = 25.0
    d.send(E.ApplicationPolled(d.now, waiting=False))
    assert _cg_beat_until(d, 34.9) == [A.SendConsumerGroupHeartbeat("m-1", 1, None)] * 3
    d.now = 35.0
    out = d.send(E.TimerFired())
    assert d.state is CS.PREPARE_LEAVING
    assert isinstance(out[0], A.LogWarning) and "for 10.0s" in out[0].message


def test_cg_a_poll_while_the_poll_leave_is_under_way_rejoins_when_it_ends() -> None:
    """The leave heartbeat's answer arrives after the application asked again: the
    member passes through STALE straight to JOINING (it used to wait there forever,
    for a poll that had already happened)."""
    d = _cg_stable()
    d.now = 10.0
    d.send(E.TimerFired())
    assert d.state is CS.PREPARE_LEAVING
    d.send(E.ListenerCompleted(E.Listener.REVOKED))
    (leave,) = d.send(ok(1))  # the heartbeat sent with the revocation
    assert d.state is CS.LEAVING and leave.member_epoch == -1
    d.now = 10.5
    assert d.send(E.ApplicationPolled(d.now, waiting=True)) == []
    assert d.state is CS.LEAVING
    warning, join = d.send(ok(-1))
    assert d.state is CS.JOINING and not d.m.awaiting_poll
    assert warning == A.LogWarning(
        "the application polled again 0.5s after this member left its group because "
        "max_poll_interval_ms (10s) passed without a poll: rejoining"
    )
    assert join == A.SendConsumerGroupHeartbeat("m-1", 0, None, 300_000, ("a", "b"), None, None, {})
    assert (CS.LEAVING, CS.STALE) in {(a, b) for a, b, _ in d.m.trace}
    assert (CS.STALE, CS.JOINING, "the application polled again") in d.m.trace


def test_cg_without_a_poll_the_stale_member_waits_for_one() -> None:
    d = _cg_stable()
    d.now = 10.0
    d.send(E.TimerFired())
    d.send(E.ListenerCompleted(E.Listener.REVOKED))
    d.send(ok(1))
    d.send(ok(-1))
    assert d.state is CS.STALE and d.m.awaiting_poll and d.m.owned == frozenset()
    assert d.m.next_deadline() is None  # only the poll (the routine's PollPoke) wakes it
    d.now = 40.0
    assert d.send(E.TimerFired()) == [] and d.state is CS.STALE
